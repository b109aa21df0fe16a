from __future__ import annotations

from typing import Any

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import load_ir


def lower(relax_json: PathLike, bucket: int, target_options: dict[str, Any], out: PathLike,
          tuning_db: PathLike | None = None, precision: str = "float32") -> None:
    """An imported module made one bucket's (compile/specialize.py), then the target's Relax
    pipeline, stopping before code generation (results/lowered/{target}/...); with a tuning
    database (``tune``), its schedules where it has them; with ``precision`` int8
    (``devices.library_precision``), the generator's convolutions quantized
    (compile/quantize.py)."""
    import tvm

    from kokoro_tvm.compile.lower import lower as lower_module
    from kokoro_tvm.compile.specialize import specialize
    from kokoro_tvm.compile.targets import make_target

    mod = specialize(load_ir(relax_json), bucket)
    lowered = lower_module(mod, make_target(target_options),
                           tuning_db=None if tuning_db is None else str(tuning_db),
                           precision=precision)
    with atomic_path(out) as tmp:
        tmp.write_text(tvm.ir.save_json(lowered))
