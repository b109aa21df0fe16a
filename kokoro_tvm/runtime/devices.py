"""The device a library of each device kind (compile/devices.py: cpu, cuda, metal, webgpu) runs
on, and the classes that call its libraries: TVM's Relax VM, or the WebGPU plan player
(runtime/webgpu.py), which loads no TVM."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence


def device(kind: str, kernels: Sequence[Path] = ()):
    """The device a library of device kind ``kind`` runs on; for cuda, libraries loaded from
    now on take their kernels from ``kernels`` or the cache (runtime/cuda.py)."""
    if kind == "webgpu":
        from kokoro_tvm.runtime.webgpu import webgpu_device

        return webgpu_device()
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


def library_types(kind: str) -> tuple[type, type]:
    """The library and weights classes for device kind ``kind`` (runtime/library.py's
    ``Library`` and ``Weights``, or their WebGPU forms)."""
    if kind == "webgpu":
        from kokoro_tvm.runtime.webgpu import PlanLibrary, PlanWeights

        return PlanLibrary, PlanWeights
    from kokoro_tvm.runtime.library import Library, Weights

    return Library, Weights
