"""Running metal libraries on a Mac with Apple silicon: the Apple GPU as a TVM device.

A metal library carries its kernels as Metal Shading Language source, which TVM's Metal
runtime compiles when the library loads (compile/metal.py). That runtime is
libtvm_runtime_metal.dylib beside libtvm_runtime in the macOS arm64 TVM wheel, which only the
compiler's ``import tvm`` loads: a runtime-only process loads it here.
"""
from __future__ import annotations

from kokoro_tvm.errors import UserError
from kokoro_tvm.runtime.backends import first_device, load_backend

METAL_RUNTIME = "libtvm_runtime_metal.dylib"


class MetalError(UserError):
    """No usable Metal device for a metal library."""


def _load_metal_runtime() -> None:
    load_backend("tvm_runtime_metal", METAL_RUNTIME)


def metal_device():
    """The first Metal device, or a MetalError saying why there is none."""
    import tvm

    return first_device(lambda: tvm.metal(0), _load_metal_runtime, MetalError,
                        "metal libraries need a Mac with Apple silicon",
                        "TVM sees no Metal device here; use the macos_arm64 target's libraries "
                        "(the CPU) instead")


def metal_available() -> bool:
    """Whether TVM sees a Metal device here."""
    try:
        metal_device()
    except MetalError:
        return False
    return True
