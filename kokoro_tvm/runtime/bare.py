"""Calling a built library with a runtime-only TVM: no compiler, no PyTorch, no Relax package.

What runs where the full TVM wheel is not installed: on a GPU machine (tools/gpu_check) and
under qemu-user for cross-compiled libraries (tests/test_targets.py), with ``TVM_USE_RUNTIME_LIB=1``
and only libtvm_runtime (+ libtvm_runtime_cuda for CUDA) beside the tvm and tvm_ffi packages.
Parameters are bound as in ``library.Library``, which needs nothing beyond the runtime.

CLI (one function, arrays in and out as .npz):
    python -m kokoro_tvm.runtime.bare --library b16.so --params bert.npz --function main \\
        --inputs in.npz --out out.npz [--device cpu|cuda] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from kokoro_tvm.runtime.devices import device
from kokoro_tvm.runtime.library import Library, Weights


def call_ms(call: Callable[[], object], sync: Callable[[], object], repeat: int) -> list[float]:
    """Wall milliseconds of ``repeat`` calls of ``call`` after one warm-up, each followed by
    ``sync`` (the device's, so that asynchronous GPU work is counted)."""
    call()
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def median_ms(call: Callable[[], object], sync: Callable[[], object], repeat: int) -> float:
    """Median of ``call_ms``."""
    return float(np.median(call_ms(call, sync, repeat)))


class BareLibrary(Library):
    """One library on one device (``cpu`` or ``cuda``); weights (name -> numpy array) moved to
    the device and prepared once."""

    def __init__(self, so_path: str | Path, weights: Mapping[str, np.ndarray], kind: str = "cpu"):
        super().__init__(so_path, Weights(weights, device(kind)))

    def time_ms(self, function: str, inputs: Mapping[str, np.ndarray], repeat: int = 10
                ) -> float:
        """Median wall milliseconds of one call (after one warm-up), synchronised."""
        return median_ms(self.bind(function, inputs), self.device.sync, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", required=True)
    parser.add_argument("--params", required=True)
    parser.add_argument("--function", required=True)
    parser.add_argument("--inputs", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeat", type=int, default=0, help="also time N calls")
    args = parser.parse_args()
    library = BareLibrary(args.library, np.load(args.params), args.device)
    inputs = dict(np.load(args.inputs))
    outs = library(args.function, inputs)
    np.savez(args.out, *outs)
    if args.repeat:
        print(json.dumps({"ms": library.time_ms(args.function, inputs, args.repeat)}))


if __name__ == "__main__":
    main()
