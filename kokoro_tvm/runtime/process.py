"""Process-wide settings for a process that only speaks (the CLI, and the benchmark's TVM
engine): memory that a long-running speaker gives back."""
from __future__ import annotations

import ctypes
import os
import sys

# glibc's M_MMAP_THRESHOLD: blocks from this size up are mapped and unmapped on their own, so
# that freed weights and activations return to the system. Left alone, glibc raises the
# threshold after the first large free, and the heap then keeps about 200 MB that the weights
# transform freed (docs/decisions.md, Runtime memory).
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 20


def speak_only() -> None:
    """Before TVM is imported: load TVM's runtime library alone (not its 260 MB compiler, about
    110 MB of resident memory), and fix glibc's mmap threshold. Changes nothing when TVM is
    already imported, or off glibc."""
    if "tvm" not in sys.modules:
        os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
