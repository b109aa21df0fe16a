"""Whether this machine can run a target's libraries, from its dict form. It sits above
compile/devices.py (where the code runs, without TVM) and compile/targets.py (TVM's targets):
planning asks it when it parses, so TVM is imported only where LLVM must say what a named
``mcpu`` implies.
"""
from __future__ import annotations

from typing import Any

from kokoro_tvm import cpu
from kokoro_tvm.compile.devices import (
    architecture,
    cpu_architecture,
    device_kind,
    is_cross,
    operating_system,
)


def cannot_run_reason(options: dict[str, Any]) -> str | None:
    """Why this machine cannot run a target's libraries (None when it can): no CUDA or Metal
    device, another architecture or operating system, or instruction-set extensions the
    target's ``mcpu`` implies that this CPU lacks. What an mcpu implies is LLVM's answer,
    through TVM (compile/targets.cpu_of); it is asked only for a named mcpu of this
    architecture, since planning runs this and TVM's import takes seconds."""
    if device_kind(options) == "cuda":
        from kokoro_tvm.compile.gpu import cuda_available

        return None if cuda_available() else "no CUDA device"
    if device_kind(options) == "webgpu":
        from kokoro_tvm.runtime.webgpu import WebGpuError, webgpu_device

        try:
            webgpu_device()
        except WebGpuError as err:
            return str(err)
        return None
    if is_cross(options):
        return cpu.cannot_run_reason(cpu_architecture(options), {"extensions": []},
                                     operating_system(options))
    if device_kind(options) == "metal":
        from kokoro_tvm.runtime.metal import metal_available

        return None if metal_available() else "no Metal device"
    if options.get("mcpu") == "host":  # this CPU's own code
        return None
    from kokoro_tvm.compile.targets import cpu_of

    return cpu.cannot_run_reason(architecture(options), cpu_of(options))
