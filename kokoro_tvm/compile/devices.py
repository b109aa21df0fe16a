"""Where a target's code runs, from its dict form, without importing TVM (the workflow reads
these when it parses): the device (cpu or cuda), the precision, the CPU architecture
(``mtriple`` or this machine), the cross linker and the LSTM lowerings a device can compile.
Whether this machine can run the libraries is compile/runnable.py's (it may ask TVM).
"""
from __future__ import annotations

from typing import Any

from kokoro_tvm.cpu import host_machine, machine_name
from kokoro_tvm.facts import LSTM_METHOD_NAMES


def device_kind(options: dict[str, Any]) -> str:
    """The TVM device a target's libraries run on: ``cuda`` or ``cpu``."""
    return "cuda" if options["kind"] == "cuda" else "cpu"


# What a target may compute the generator's convolutions in, the default first.
PRECISIONS = ("float32", "int8")


def precision(options: dict[str, Any]) -> str:
    """What a target computes the generator's convolutions in: ``float32`` unless its options
    say ``precision: int8`` (compile/quantize.py)."""
    return str(options.get("precision", PRECISIONS[0]))


# int8 covers decoder buckets up to this many frames: its waveform's log-mel L1 against PyTorch
# grows with the length (0.08-0.12 at 128-512 frames, 0.18 at 1024, 0.17 at 1536, 0.246 at
# 2048 where the bar is 0.25; docs/int8.md). Longer buckets of an int8
# target stay float32.
INT8_MAX_FRAMES = 1536


def library_precision(options: dict[str, Any], component: str, bucket: int) -> str:
    """The precision of one library of a target: int8 where the target asks for it, the
    component has quantizable functions and the bucket is at most ``INT8_MAX_FRAMES``."""
    from kokoro_tvm.components import COMPONENTS

    if (precision(options) == "int8" and COMPONENTS[component].quantizable
            and bucket <= INT8_MAX_FRAMES):
        return "int8"
    return "float32"


def architecture(options: dict[str, Any]) -> str:
    """The architecture a target's code is for: the CPU (``x86_64``, ``aarch64``) from
    ``mtriple`` or this machine, or the GPU (``cuda:sm_90``)."""
    if device_kind(options) == "cuda":
        return f"cuda:{options.get('arch', 'unknown')}"
    triple = options.get("mtriple")
    if not triple:
        return host_machine()
    return machine_name(triple.split("-")[0])


def is_cross(options: dict[str, Any]) -> bool:
    """Whether a CPU target's code is for another architecture than this machine's."""
    return device_kind(options) == "cpu" and architecture(options) != host_machine()


def cross_compiler(options: dict[str, Any]) -> str | None:
    """The C compiler that links a cross target's objects (Debian's ``{triple}-gcc``,
    e.g. ``aarch64-linux-gnu-gcc`` from gcc-aarch64-linux-gnu), or None for native targets."""
    if not is_cross(options):
        return None
    return f"{options['mtriple']}-gcc"


# LSTM lowerings each device can compile, fastest first. tir and tir_vec are hand-written CPU
# TIR (a scalar or vectorised loop over time, threads per direction); GPU targets swap tir_vec's
# kernel for a GPU one when lowering (compile/gpu/lstm.py), the scalar tir has none; unroll is
# plain Relax ops, which dlight schedules like any other, but its IR grows with the bucket.
DEVICE_LSTM_METHODS = {"cpu": LSTM_METHOD_NAMES,
                       "cuda": tuple(m for m in LSTM_METHOD_NAMES if m != "tir")}


def lstm_methods_for(options: dict[str, Any], configured: list[str]) -> list[str]:
    """The configured LSTM methods this target can build; its first own one if none is."""
    allowed = DEVICE_LSTM_METHODS[device_kind(options)]
    return [m for m in configured if m in allowed] or [allowed[0]]
