from __future__ import annotations

from pathlib import Path
from typing import Any

from kokoro_tvm.atomic import write_json
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import load_ir


def tune(relax_json: PathLike, bucket: int, target_options: dict[str, Any], max_trials: int,
         trials_per_task: int, out_dir: PathLike, threads: int = 1) -> dict[str, Any]:
    """The optional tuning stage (config.yaml's tuning.enabled): a MetaSchedule database for
    one library's kernels (results/tune/{target}/...), the imported module made the bucket's
    first (compile/specialize.py), written to a scratch folder and moved into place when
    complete, with its figures as JSON."""
    import shutil

    from kokoro_tvm.compile.specialize import specialize
    from kokoro_tvm.compile.targets import make_target
    from kokoro_tvm.compile.tune import tune as tune_kernels

    out_dir = Path(out_dir)
    scratch = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    mod = specialize(load_ir(relax_json), bucket)
    figures = tune_kernels(mod, make_target(target_options), scratch, max_trials, trials_per_task,
                           threads=threads)
    write_json(scratch / "figures.json", figures)
    shutil.rmtree(out_dir, ignore_errors=True)
    scratch.rename(out_dir)
    return figures
