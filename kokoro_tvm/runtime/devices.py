"""The TVM device a library of each device kind (compile/devices.py: cpu, cuda, metal) runs on."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence


def device(kind: str, kernels: Sequence[Path] = ()):
    """The TVM device a library of device kind ``kind`` runs on; for cuda, libraries loaded from
    now on take their kernels from ``kernels`` or the cache (runtime/cuda.py)."""
    if kind == "cuda":
        from kokoro_tvm.runtime.cuda import arch_of, cuda_device, use_kernels

        found = cuda_device()
        use_kernels(kernels, arch_of(found))
        return found
    if kind == "metal":
        from kokoro_tvm.runtime.metal import metal_device

        return metal_device()
    import tvm

    return tvm.cpu(0)
