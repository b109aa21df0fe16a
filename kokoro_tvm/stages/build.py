from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

from kokoro_tvm.atomic import sha256_file, write_json
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import IMPORT_FIGURES, load_ir


def _module_figure(mod, name: str):
    value = (mod.attrs or {}).get(f"kokoro_tvm.{name}")
    return None if value is None else float(value) if "seconds" in name else int(value)


def build(lowered_json: PathLike, params: PathLike, target_name: str,
          target_options: dict[str, Any], dims: dict[str, Any], out_so: PathLike,
          out_meta: PathLike) -> dict[str, Any]:
    """A lowered module generated and linked into a code-only library
    (results/lib/{target}/...; for webgpu, its WGSL and launch plans), with its .meta.json."""
    from kokoro_tvm.compile.build import build_library, build_webgpu_library
    from kokoro_tvm.compile.devices import (
        architecture,
        cpu_architecture,
        cross_linker,
        device_kind,
        operating_system,
    )
    from kokoro_tvm.compile.targets import cpu_of, make_target

    mod = load_ir(lowered_json)
    target = make_target(target_options)
    figures = {name: _module_figure(mod, name) for name in IMPORT_FIGURES}
    for name in IMPORT_FIGURES:  # timings must not reach the library: builds stay reproducible
        mod = mod.without_attr(f"kokoro_tvm.{name}")
    system = operating_system(target_options)
    if device_kind(target_options) == "webgpu":
        info = build_webgpu_library(mod, target, out_so)
    else:
        info = build_library(mod, target, out_so, cross_linker(target_options), system)
    meta = {
        **dims, **info,
        "target": target_name, "target_string": str(target), "library": str(out_so),
        "device": device_kind(target_options), "architecture": architecture(target_options),
        "host_architecture": cpu_architecture(target_options), "system": system,
        "cpu": cpu_of(target_options),
        "library_sha256": sha256_file(out_so),
        "library_bytes": Path(out_so).stat().st_size,
        "params_sha256": sha256_file(params),
        **figures,
        "versions": {d: version(d) for d in ("apache-tvm", "torch", "kokoro")},
    }
    write_json(out_meta, meta)
    return meta
