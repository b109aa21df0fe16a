from __future__ import annotations

import json
from typing import Any

from kokoro_tvm.atomic import write_json
from kokoro_tvm.paths import PathLike


def validate(component: str, lstm: str, bucket: int, library: PathLike, params: PathLike,
             reference: PathLike | None, out: PathLike, target_options: dict[str, Any]
             ) -> dict[str, Any]:
    """A library against the PyTorch values the reference stage saved for its bucket
    (``reference``), and at exact length (measure/validate.py), reported in
    results/validate/...; fails if not passed.

    A library this machine cannot run (CUDA without a GPU, another CPU architecture, an
    ``mcpu`` with instruction-set extensions this CPU lacks) gets a report with ``status:
    skipped``, the reason, and ``passed: false`` (the workflow computes no ``reference`` for
    it); the job succeeds, and the manifest and the model folder list the library as
    unvalidated, to be validated where it runs."""
    from kokoro_tvm.compile.devices import device_kind, library_precision
    from kokoro_tvm.compile.runnable import cannot_run_reason
    from kokoro_tvm.measure.validate import ValidationFailed, load_reference, validate_component

    precision = library_precision(target_options, component, bucket)
    report = {"component": component, "lstm": lstm, "bucket": bucket, "library": str(library),
              "precision": precision}
    if (reason := cannot_run_reason(target_options)) is not None:
        report.update(status="skipped", reason=reason, metrics={}, passed=False)
        write_json(out, report)
        return report
    if reference is None:
        raise ValueError(f"{library} runs here but was given no reference to validate against")
    import tvm

    report.update(validate_component(component, bucket, library, params,
                                     load_reference(reference), device=device_kind(target_options),
                                     precision=precision))
    report.update(status="passed" if report["passed"] else "failed",
                  threads={"tvm": tvm.runtime.num_threads()})
    if not report["passed"]:
        raise ValidationFailed(f"{library} failed validation against PyTorch:\n"
                               + json.dumps(report["metrics"], indent=1))
    write_json(out, report)
    return report
