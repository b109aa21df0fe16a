"""CUDA targets: their schedules, nvcc, and whether a CUDA device is present.

Our CPU schedules (``kokoro_tvm.compile.schedules``) are not used for GPUs. ``lower`` gives GPU
targets our legalizations (``contraction.LEGALIZATIONS`` and the math that every target
gets) and our GPU schedules for convolutions and the norm (``Contraction``, ``RowNorm``), then
dlight's GPU rules (Matmul, GEMV, Reduction, GeneralReduction, Fallback) schedule every other
PrimFunc after FuseTIR. Kernels
are compiled by nvcc into a fatbin with SASS for the target's ``arch`` (``sm_90``: H100/H200),
so building needs nvcc but no GPU; running needs a driver that supports the CUDA runtime the
TVM wheel links (``libcudart.so.13``).

The package's modules are the GPU lowering, which only GPU targets import (so CPU libraries do
not depend on them: stages/code_inputs.GPU_ONLY); this one is what CPU code may ask too.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from kokoro_tvm.runtime.cuda import CudaError, cuda_device, find_nvcc


def cuda_available() -> bool:
    """Whether TVM sees a CUDA device here (False without a driver or GPU)."""
    try:
        cuda_device()
    except CudaError:
        return False
    return True


@contextlib.contextmanager
def nvcc_compile() -> Iterator[None]:
    """TVM compiles CUDA kernels with nvcc (fatbin) instead of NVRTC, which needs the
    cuda-bindings package, and without --use_fast_math, whose approximate division, exp and
    log TVM would otherwise apply (kokoro_tvm/runtime/cuda.py compiles at load the same way)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("building a cuda target needs nvcc (the CUDA toolkit) on PATH "
                                "or under /usr/local/cuda*")
    # TVM runs "nvcc" from PATH.
    path = os.pathsep.join([str(Path(nvcc).parent), os.environ.get("PATH", "")])
    settings = {"TVM_CUDA_COMPILE_MODE": "nvcc", "TVM_CUDA_NVCC_NO_FAST_MATH": "1", "PATH": path}
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cuda_sources(lowered, target) -> list[str]:
    """The CUDA C of the kernels a lowered module (``tvm.IRModule``) compiles to for ``target``:
    what its library carries and a GPU compiles when loading it (kokoro_tvm/runtime/cuda.py)."""
    from tvm import relax

    with nvcc_compile():
        executable = relax.build(lowered, target, relax_pipeline=None)
    found = []

    def visit(module):
        if module.kind == "cuda":
            found.append(module.inspect_source("cuda"))
        for imported in module.imports:
            visit(imported)

    visit(executable.mod)
    return found
