"""Optional MetaSchedule tuning of one library's kernels (the ``tune`` rule).

The kernels are those the lower stage would schedule (``lower.fused_kernels``: our
legalizations, fused, unscheduled); MetaSchedule searches schedules for them on this machine
and keeps the best in a JSON database (its work dir, a Snakemake artifact per target,
component, LSTM method and bucket). ``lower`` applies the database when given one: kernels
found there get the tuned schedule, the rest ours. Measurements run on this machine, so a
database is only meaningful for a target this machine can run.
"""
from __future__ import annotations

import contextlib
import inspect
import time
from pathlib import Path
from typing import Any

import tvm

from kokoro_tvm.compile.lower import fused_kernels

BUILD_TIMEOUT_SECONDS = 300


def skip_module_scans() -> None:
    """For this whole process (a builder worker's initializer): ``inspect.getmodule`` answers
    at once for frames of pseudo files ("<string>", "<frozen importlib._bootstrap>"), where
    Python scans all of ``sys.modules`` on every call and can find no module. MetaSchedule's
    context and its builder import ``tvm.s_tir.tensor_intrin``, whose TVMScript functions each
    take ``inspect.stack()`` inside an import: tens of thousands of such scans, most of a minute
    per process (docs/build-time.md)."""
    scan = inspect.getmodule

    def getmodule(obj, _filename=None):
        if _filename is not None and _filename.startswith("<") and not hasattr(obj, "__module__"):
            return None
        return scan(obj, _filename)

    inspect.getmodule = getmodule


@contextlib.contextmanager
def module_scans_skipped():
    """``skip_module_scans`` while tuning in this process, undone after."""
    scan = inspect.getmodule
    skip_module_scans()
    try:
        yield
    finally:
        inspect.getmodule = scan


def tune(mod: tvm.IRModule, target: tvm.target.Target, work_dir: str | Path, max_trials: int,
         trials_per_task: int, seed: int = 0, threads: int = 1) -> dict[str, Any]:
    """Tunes ``mod``'s kernels into ``work_dir``, measuring on ``threads`` cores; returns
    kernel count, trials and seconds."""
    from tvm.s_tir import meta_schedule as ms

    kernels = fused_kernels(mod, target)
    started = time.perf_counter()
    # A candidate's build runs in a worker process that first imports TVM; MetaSchedule's 30 s
    # default timed every build out on this 2-core machine while other jobs ran.
    builder = ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_SECONDS,
                                      initializer=skip_module_scans)
    with module_scans_skipped():
        database = ms.tir_integration.tune_tir(
            kernels, target, str(work_dir), max_trials_global=max_trials,
            max_trials_per_task=trials_per_task, num_trials_per_iter=min(64, trials_per_task),
            builder=builder, num_tuning_cores=threads, seed=seed)
    return {"kernels": len(kernels.functions_items()),
            "tuning_records": len(database.get_all_tuning_records()),
            "max_trials": max_trials, "trials_per_task": trials_per_task,
            "tuning_seconds": round(time.perf_counter() - started, 1)}
