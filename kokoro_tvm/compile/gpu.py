"""CUDA targets: TVM's own GPU schedules, nvcc, and whether a CUDA device is present.

Our CPU schedules (``kokoro_tvm.compile.schedules``) are not used for GPUs: ``lower`` keeps the
CUDA backend's pass lists, which schedule every PrimFunc after FuseTIR with dlight's GPU rules
(Matmul, GEMV, Reduction, GeneralReduction, Fallback: thread bindings for every kernel). Kernels
are compiled by nvcc into a fatbin with SASS for the target's ``arch`` (``sm_90``: H100/H200),
so building needs nvcc but no GPU; running needs a driver that supports the CUDA runtime the
TVM wheel links (``libcudart.so.13``).
"""
from __future__ import annotations

import contextlib
import os
import shutil
from typing import Iterator

SCHEDULE_RULES = ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")


def cuda_available() -> bool:
    """Whether TVM sees a CUDA device here (False without a driver or GPU)."""
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # no libcuda, no runtime_cuda: no device
        return False


@contextlib.contextmanager
def nvcc_compile() -> Iterator[None]:
    """TVM compiles CUDA kernels with nvcc (fatbin) instead of NVRTC, which needs the
    cuda-bindings package; nvcc is found on PATH or in /usr/local/cuda*/bin."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("building a cuda target needs nvcc (the CUDA toolkit) on PATH")
    previous = os.environ.get("TVM_CUDA_COMPILE_MODE")
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TVM_CUDA_COMPILE_MODE", None)
        else:
            os.environ["TVM_CUDA_COMPILE_MODE"] = previous
