"""kokoro-tvm: compile Kokoro-82M with Apache TVM into per-bucket libraries, and speak with them.

``from kokoro_tvm import Kokoro`` is the runtime's API (runtime/kokoro.py), imported on first
use: the build side imports this package too, and neither its processes nor its derived code
inputs (stages/code_inputs.py) should take in the runtime.
"""
import importlib

__version__ = "0.1.0"
__all__ = ["Kokoro"]


def __getattr__(name: str):
    if name == "Kokoro":
        return importlib.import_module("kokoro_tvm.runtime.kokoro").Kokoro
    raise AttributeError(f"module 'kokoro_tvm' has no attribute {name!r}")
