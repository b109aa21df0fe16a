"""Building a lowered module into a code-only shared library.

The lowered module has been through the Relax pipeline already (``lower.lower``), so the build
runs only VM codegen, TIR compilation and linking (``relax.build`` with ``relax_pipeline=None``).
Weights are function inputs, so the library holds code only.

Cross targets (an llvm ``mtriple`` of another architecture or operating system, and metal's
macOS host) are linked with their linker command (``devices.cross_linker``, compile/link.py),
and a macOS library is checked to be one that macOS loads (compile/macho.py); CUDA kernels are
compiled with nvcc (``gpu.nvcc_compile``), Metal kernels are kept as source and checked against
Metal's limits (compile/metal.py).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi
from tvm import relax

from kokoro_tvm.abi import TRANSFORM_SUFFIX
from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.compile import gpu
from kokoro_tvm.compile.link import linker


def _tensor_signature(ty) -> dict[str, Any]:
    """Shape and dtype of a Relax tensor type; a symbolic dimension by its name (``align``'s
    token count)."""
    return {"shape": [int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in ty.shape],
            "dtype": str(ty.dtype)}


def _outputs(ret_ty) -> list[dict[str, Any]]:
    fields = ret_ty.fields if isinstance(ret_ty, relax.TupleType) else [ret_ty]
    return [_tensor_signature(t) for t in fields]


def transform_fingerprint(mod: tvm.IRModule, name: str) -> str:
    """A hash of the function ``name`` and every function it calls (structural hashes, which
    ignore the names of variables, in call order). Two libraries whose weight transforms have
    the same fingerprint prepare the same tensors from the same weights, so the runtime
    prepares them once (runtime/library.py)."""
    hashes, seen = [], set()
    pending = [mod.get_global_var(name)]
    while pending:
        gvar = pending.pop(0)
        if gvar.name_hint in seen:
            continue
        seen.add(gvar.name_hint)
        hashes.append(tvm_ffi.structural_hash(mod[gvar], map_free_vars=True))
        if isinstance(mod[gvar], relax.Function):
            pending.extend(relax.analysis.all_global_vars(mod[gvar]))
    return hashlib.sha256(" ".join(map(str, hashes)).encode()).hexdigest()


def signature(mod: tvm.IRModule) -> dict[str, dict[str, Any]]:
    """Function name -> its inputs (name, shape, dtype), weight names, outputs, and its weight
    transform's fingerprint once lowered.

    Read from the Relax functions of an imported or lowered module: the first ``num_input``
    parameters are the caller's inputs; the weights from the params file are the rest, or, once
    lowered, the parameters of the function's lifted ``_transform_params`` companion.
    """
    names = {gvar.name_hint for gvar in mod.get_global_vars()}
    functions = {}
    for gvar, func in mod.functions_items():
        name = gvar.name_hint
        if (not isinstance(func, relax.Function) or "num_input" not in func.attrs
                or name.endswith(TRANSFORM_SUFFIX)):
            continue
        num_input = int(func.attrs["num_input"])
        weights = (mod[name + TRANSFORM_SUFFIX].params if name + TRANSFORM_SUFFIX in names
                   else func.params[num_input:])
        functions[name] = {
            "inputs": [{"name": p.name, **_tensor_signature(p.ty)}
                       for p in func.params[:num_input]],
            "weights": [p.name for p in weights],
            "outputs": _outputs(func.ret_ty),
        }
        if name + TRANSFORM_SUFFIX in names:
            functions[name]["transform"] = transform_fingerprint(mod, name + TRANSFORM_SUFFIX)
    return dict(sorted(functions.items()))


def embedded_constant_bytes(mod: tvm.IRModule) -> int:
    """Bytes of tensor constants inside the module's Relax functions (what the library embeds).

    Weights are inputs, so this should be small buffers only (STFT kernels, position ids); a
    large value means weights were bound into the code by mistake.
    """
    sizes: list[int] = []

    def visit(expr):
        if isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.value, tvm.runtime.Tensor):
            sizes.append(expr.value.numpy().nbytes)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return sum(sizes)


def _facts(lowered_mod: tvm.IRModule, target: tvm.target.Target, start: float, size: int
           ) -> dict[str, Any]:
    return {
        "build_seconds": round(time.perf_counter() - start, 3),
        "library_bytes": size,
        "embedded_constant_bytes": embedded_constant_bytes(lowered_mod),
        "target": str(target),
        "functions": signature(lowered_mod),
    }


def build_webgpu_library(lowered_mod: tvm.IRModule, target: tvm.target.Target,
                         out: str | os.PathLike) -> dict[str, Any]:
    """A webgpu library (compile/webgpu/plan.py: WGSL and launch plans, checked against
    WebGPU's default limits) written to ``out`` atomically; returns build facts as
    ``build_library``."""
    from kokoro_tvm.compile.webgpu.plan import build_plan

    start = time.perf_counter()
    plan = build_plan(lowered_mod, target)
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(plan, sort_keys=True), encoding="utf-8")
        size = tmp.stat().st_size
    return _facts(lowered_mod, target, start, size)


def build_library(lowered_mod: tvm.IRModule, target: tvm.target.Target,
                  out_so: str | os.PathLike, cross_linker: list[str] | None = None,
                  system: str = "linux") -> dict[str, Any]:
    """Compiles ``lowered_mod`` for ``target`` and writes ``out_so`` atomically, linked with
    ``cross_linker`` (e.g. ``["aarch64-linux-gnu-gcc"]``) when given, for the operating system
    ``system`` (``macos``: a Mach-O dylib, checked).

    Returns build facts for the library's metadata: seconds spent, size, and the signature.
    """
    start = time.perf_counter()
    with gpu.nvcc_compile() if target.kind.name == "cuda" else contextlib.nullcontext():
        executable = relax.build(lowered_mod, target, relax_pipeline=None)
    if target.kind.name == "metal":
        from kokoro_tvm.compile.metal import check_kernels

        check_kernels(executable, lowered_mod)
    macos_name = Path(out_so).name if system == "macos" else None
    fcompile = linker(cross_linker, macos_name) if cross_linker else None
    with atomic_path(out_so) as tmp:
        executable.export_library(str(tmp), fcompile=fcompile)
        if system == "macos":
            from kokoro_tvm.compile.macho import check_library

            check_library(tmp)
        size = tmp.stat().st_size
    return _facts(lowered_mod, target, start, size)
