"""Validate: a library against PyTorch; reports why when this machine cannot run it."""
from __future__ import annotations

import json
from typing import Any

from kokoro_tvm.atomic import write_json
from kokoro_tvm.stages.common import PathLike, kmodel


def validate(checkpoint: PathLike, model_config: PathLike, component: str, lstm: str,
             bucket: int, library: PathLike, params: PathLike, seed: int, out: PathLike,
             target_options: dict[str, Any] | None = None,
             threads: int | None = None) -> dict[str, Any]:
    """results/validate/...: the library against PyTorch on the same inputs; fails if not passed.

    A library this machine cannot run (CUDA without a GPU, another CPU architecture) gets a
    report with ``status: skipped``, the reason, and ``passed: false``; the job succeeds and the
    manifest lists the library as unvalidated (the runtime refuses it)."""
    from kokoro_tvm.compile.devices import cannot_run_reason, device_kind
    from kokoro_tvm.measure.validate import ValidationFailed, validate_component

    options = target_options or {"kind": "llvm"}
    reason = cannot_run_reason(options)
    if reason is not None:
        report = {"component": component, "lstm": lstm, "bucket": bucket,
                  "library": str(library),
                  "seed": seed, "status": "skipped", "reason": reason, "metrics": {},
                  "passed": False}
        write_json(out, report)
        return report
    import torch
    import tvm

    if threads is not None:
        torch.set_num_threads(threads)
    report = validate_component(kmodel(checkpoint, model_config), component, bucket, library,
                                params, seed, device=device_kind(options))
    report.update(component=component, lstm=lstm, bucket=bucket, library=str(library), seed=seed,
                  status="passed" if report["passed"] else "failed",
                  threads={"torch": torch.get_num_threads(), "tvm": tvm.runtime.num_threads()})
    if not report["passed"]:
        raise ValidationFailed(f"{library} failed validation against PyTorch:\n"
                               + json.dumps(report["metrics"], indent=1))
    write_json(out, report)
    return report
