"""The pipeline stages as functions: files in, files out, written atomically.

Each workflow script is a command line over exactly one of these; Snakemake decides which run.
"""
from __future__ import annotations

import json
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_tvm.atomic import atomic_path, sha256_file, write_json
from kokoro_tvm.errors import UserError

PathLike = str | Path


class ImportFailed(UserError):
    """An exported program TVM cannot import (an unsupported op, say); names the artifact."""


def _kmodel(checkpoint: PathLike, model_config: PathLike):
    """KModel with CustomSTFT (TorchSTFT's complex ops have no TVM converters)."""
    from kokoro_tvm.model import load_kmodel

    return load_kmodel(model_config, checkpoint, disable_complex=True)


def save_programs(programs: dict, dest: PathLike) -> None:
    """All functions of a component in one .pt2 archive (one ExportedProgram per function)."""
    from torch.export.pt2_archive._package import package_pt2

    with atomic_path(dest) as tmp:
        package_pt2(str(tmp), exported_programs=programs)


def load_programs(path: PathLike) -> dict:
    from torch.export.pt2_archive._package import load_pt2

    return dict(load_pt2(str(path)).exported_programs)


def export(checkpoint: PathLike, model_config: PathLike, component: str, bucket: int,
           out: PathLike, seed: int = 0) -> None:
    """results/export/{component}/b{bucket}.pt2: the component traced at one static bucket."""
    from kokoro_tvm.components import export_component

    save_programs(export_component(_kmodel(checkpoint, model_config), component, bucket, seed), out)


def write_params(checkpoint: PathLike, model_config: PathLike, component: str,
                 out: PathLike) -> None:
    """results/params/{component}.npz: the component's weights under their Relax input names."""
    from kokoro_tvm.components import component_params

    arrays = component_params(_kmodel(checkpoint, model_config), component)
    with atomic_path(out) as tmp:
        np.savez(tmp, **arrays)


def import_relax(exported: PathLike, lstm: str, out: PathLike) -> dict[str, Any]:
    """results/relax/{component}/{lstm}/b{bucket}.json; import figures kept as module attrs."""
    import tvm

    from kokoro_tvm.compile.importer import import_programs, ir_lines

    started = time.perf_counter()
    try:
        mod, _ = import_programs(load_programs(exported), lstm)
    except Exception as err:  # TVM's importer reports unsupported ops with assorted types
        raise ImportFailed(f"{exported}: cannot import into Relax with lstm method '{lstm}': "
                           f"{type(err).__name__}: {err}") from err
    figures = {"import_seconds": round(time.perf_counter() - started, 3), "ir_lines": ir_lines(mod)}
    mod = mod.with_attrs({f"kokoro_tvm.{k}": v for k, v in figures.items()})
    with atomic_path(out) as tmp:
        tmp.write_text(tvm.ir.save_json(mod))
    return figures


def lower(relax_json: PathLike, target_options: dict[str, Any], out: PathLike) -> None:
    """results/lowered/{target}/...: the target's Relax pipeline applied, before codegen."""
    import tvm

    from kokoro_tvm.compile.lower import lower as lower_module
    from kokoro_tvm.compile.targets import make_target

    mod = tvm.ir.load_json(Path(relax_json).read_text())
    lowered = lower_module(mod, make_target(target_options))
    with atomic_path(out) as tmp:
        tmp.write_text(tvm.ir.save_json(lowered))


IMPORT_FIGURES = ("ir_lines", "import_seconds")


def _module_figure(mod, name: str):
    value = (mod.attrs or {}).get(f"kokoro_tvm.{name}")
    return None if value is None else float(value) if "seconds" in name else int(value)


def build(lowered_json: PathLike, params: PathLike, target_name: str,
          target_options: dict[str, Any], dims: dict[str, Any], out_so: PathLike,
          out_meta: PathLike) -> dict[str, Any]:
    """results/lib/{target}/...: the code-only library and its .meta.json."""
    import tvm

    from kokoro_tvm.compile.build import build_library
    from kokoro_tvm.compile.devices import architecture, cross_compiler, device_kind
    from kokoro_tvm.compile.targets import make_target

    mod = tvm.ir.load_json(Path(lowered_json).read_text())
    target = make_target(target_options)
    figures = {name: _module_figure(mod, name) for name in IMPORT_FIGURES}
    for name in IMPORT_FIGURES:  # timings must not reach the library: builds stay reproducible
        mod = mod.without_attr(f"kokoro_tvm.{name}")
    info = build_library(mod, target, out_so, cross_compiler(target_options))
    meta = {
        **dims, **info,
        "target": target_name, "target_string": str(target), "library": str(out_so),
        "device": device_kind(target_options), "architecture": architecture(target_options),
        "library_sha256": sha256_file(out_so),
        "library_bytes": Path(out_so).stat().st_size,
        "params_sha256": sha256_file(params),
        **figures,
        "versions": {d: version(d) for d in ("apache-tvm", "torch", "kokoro")},
    }
    write_json(out_meta, meta)
    return meta


def validate(checkpoint: PathLike, model_config: PathLike, component: str, bucket: int,
             library: PathLike, params: PathLike, seed: int, out: PathLike,
             target_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """results/validate/...: the library against PyTorch on the same inputs; fails if not passed.

    A library this machine cannot run (CUDA without a GPU, another CPU architecture) gets a
    report with ``status: skipped``, the reason, and ``passed: false``; the job succeeds and the
    manifest lists the library as unvalidated (the runtime refuses it)."""
    from kokoro_tvm.compile.devices import cannot_run_reason, device_kind
    from kokoro_tvm.validate import ValidationFailed, validate_component

    options = target_options or {"kind": "llvm"}
    reason = cannot_run_reason(options)
    if reason is not None:
        report = {"component": component, "bucket": bucket, "library": str(library),
                  "seed": seed, "status": "skipped", "reason": reason, "metrics": {},
                  "passed": False}
        write_json(out, report)
        return report
    report = validate_component(_kmodel(checkpoint, model_config), component, bucket, library,
                                params, seed, device=device_kind(options))
    report.update(component=component, bucket=bucket, library=str(library), seed=seed,
                  status="passed" if report["passed"] else "failed")
    if not report["passed"]:
        raise ValidationFailed(f"{library} failed validation against PyTorch:\n"
                               + json.dumps(report["metrics"], indent=1))
    write_json(out, report)
    return report


def manifest(metas: list[PathLike], validations: list[PathLike], target: str,
             out: PathLike) -> dict[str, Any]:
    """results/manifest/{target}.json: every library of the target with its metadata; those
    whose validation was skipped (no device here) have ``validated: false``."""
    entries = []
    for meta_path, validation_path in zip(metas, validations, strict=True):  # same order
        meta = json.loads(Path(meta_path).read_text())
        validation = json.loads(Path(validation_path).read_text())
        entries.append({**meta, "meta": str(meta_path), "validation": str(validation_path),
                        "passed": validation["passed"],
                        "validation_status": validation.get("status", "passed"),
                        "validated": validation["passed"] is True})
    document = {"target": target, "libraries": entries}
    write_json(out, document)
    return document
