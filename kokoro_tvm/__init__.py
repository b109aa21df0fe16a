"""kokoro-tvm: compile Kokoro-82M with Apache TVM into per-bucket libraries, and speak with them."""

__version__ = "0.1.0"
