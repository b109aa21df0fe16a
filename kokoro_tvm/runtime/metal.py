"""Running metal libraries on a Mac with Apple silicon: the Apple GPU as a TVM device.

A metal library carries its kernels as Metal Shading Language source, which TVM's Metal
runtime compiles when the library loads (compile/metal.py). That runtime is
libtvm_runtime_metal.dylib beside libtvm_runtime in the macOS arm64 TVM wheel, which only the
compiler's ``import tvm`` loads: a runtime-only process loads it here.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

from kokoro_tvm.errors import UserError

METAL_RUNTIME = "libtvm_runtime_metal.dylib"


class MetalError(UserError):
    """No usable Metal device for a metal library."""


def _load_metal_runtime() -> None:
    from tvm.base import _LOADED_LIBS

    if "tvm_runtime_metal" in _LOADED_LIBS or "tvm_runtime" not in _LOADED_LIBS:
        return
    library = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent / METAL_RUNTIME
    if library.is_file():
        _LOADED_LIBS["tvm_runtime_metal"] = ctypes.CDLL(str(library), ctypes.RTLD_GLOBAL)


def metal_device():
    """The first Metal device, or a MetalError saying why there is none."""
    import tvm

    try:
        if not tvm.metal(0).exist:
            _load_metal_runtime()
        if tvm.metal(0).exist:
            return tvm.metal(0)
    except Exception as err:  # noqa: BLE001 - no Metal runtime in this TVM: no device
        raise MetalError(f"metal libraries need a Mac with Apple silicon: {err}") from err
    raise MetalError("metal libraries need a Mac with Apple silicon: TVM sees no Metal device "
                     "here; use the macos_arm64 target's libraries (the CPU) instead")


def metal_available() -> bool:
    """Whether TVM sees a Metal device here."""
    try:
        metal_device()
    except MetalError:
        return False
    return True
