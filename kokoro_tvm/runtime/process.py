"""Process-wide settings for a process that only speaks (the CLI, and the benchmark's TVM
engine)."""
from __future__ import annotations

import os
import sys


def speak_only() -> None:
    """Before TVM is imported: load TVM's runtime library alone, not its 260 MB compiler
    library (about 110 MB of resident memory). Changes nothing once TVM is imported."""
    if "tvm" not in sys.modules:
        os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
