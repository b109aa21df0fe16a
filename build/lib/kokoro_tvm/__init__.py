"""kokoro-tvm: compile Kokoro-82M with Apache TVM into per-bucket libraries, and speak with them.

``from kokoro_tvm import Kokoro`` is the runtime's API (runtime/kokoro.py); it is imported on
first use, so that the build side's imports of this package stay light.
"""

__version__ = "0.1.0"
__all__ = ["Kokoro"]


def __getattr__(name: str):
    if name == "Kokoro":
        from kokoro_tvm.runtime.kokoro import Kokoro

        return Kokoro
    raise AttributeError(f"module 'kokoro_tvm' has no attribute {name!r}")
