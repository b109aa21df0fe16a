"""How a GPU's TVM backend is found: its runtime library loaded beside libtvm_runtime, then its
first device (runtime/cuda.py, runtime/metal.py)."""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Callable


def load_backend(name: str, file: str) -> None:
    """TVM's runtime library for a device, ``file`` beside libtvm_runtime (kept under ``name``
    in TVM's loaded libraries): a runtime-only TVM loads no backend."""
    from tvm.base import _LOADED_LIBS

    if name in _LOADED_LIBS or "tvm_runtime" not in _LOADED_LIBS:
        return
    library = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent / file
    if library.is_file():
        _LOADED_LIBS[name] = ctypes.CDLL(str(library), ctypes.RTLD_GLOBAL)


def first_device(get: Callable[[], object], load: Callable[[], None], error: type[Exception],
                 needs: str, absent: str):
    """``get()``, TVM's first device of a kind, once it exists, its backend loaded with ``load``
    where it does not yet; else ``error``, one line: ``needs``, then why (``absent`` where TVM
    sees no device, the failure where asking for one fails)."""
    try:
        if not get().exist:
            load()
        if get().exist:
            return get()
    except Exception as err:  # noqa: BLE001 - no driver or no backend: no device
        raise error(f"{needs}: {err}") from err
    raise error(f"{needs}: {absent}")
