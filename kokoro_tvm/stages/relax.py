from __future__ import annotations

import time
from typing import Any

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.errors import UserError
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import load_programs


class RelaxImportFailed(UserError):
    """An exported program TVM cannot import (an unsupported op, say); names the artifact."""


def relax(exported: PathLike, lstm: str, out: PathLike) -> dict[str, Any]:
    """An exported component imported into TVM Relax with its length symbolic, its LSTMs to be
    lowered by ``lstm`` (results/relax/{component}/{lstm}.json), for every bucket: the lower
    stage binds the length. The weights stay inputs (the params stage writes them once per
    component), and the import's figures are kept as module attributes."""
    import tvm

    from kokoro_tvm.compile.relax import import_programs, ir_lines

    started = time.perf_counter()
    try:
        mod, _ = import_programs(load_programs(exported), lstm)
    except Exception as err:  # TVM's importer reports unsupported ops with assorted types
        raise RelaxImportFailed(f"{exported}: cannot import into Relax with lstm method '{lstm}': "
                           f"{type(err).__name__}: {err}") from err
    figures = {"import_seconds": round(time.perf_counter() - started, 3), "ir_lines": ir_lines(mod)}
    mod = mod.with_attrs({f"kokoro_tvm.{k}": v for k, v in figures.items()})
    with atomic_path(out) as tmp:
        tmp.write_text(tvm.ir.save_json(mod))
    return figures
