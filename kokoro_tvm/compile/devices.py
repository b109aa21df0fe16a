"""Where a target's code runs, from its dict form, without importing TVM (the workflow reads
these when it parses): the device (cpu, cuda or metal), the precision, the CPU architecture and
operating system (``mtriple`` or this machine), the cross linker and the LSTM lowerings a device
can compile.
Whether this machine can run the libraries is compile/runnable.py's (it may ask TVM).
"""
from __future__ import annotations

import sys
from typing import Any

from kokoro_tvm.cpu import ANY_MACHINE, host_machine, host_system, machine_name
from kokoro_tvm.facts import LSTM_METHOD_NAMES

# GPU target kinds, each also the TVM device its libraries run on.
GPU_KINDS = ("cuda", "metal", "webgpu")
# The host code of a metal library: Apple silicon's macOS (11 is the first for arm64), for the
# CPU of the first Apple silicon Macs (the floor: every later one runs its code).
MACOS_ARM64 = {"kind": "llvm", "mtriple": "aarch64-apple-macos11", "mcpu": "apple-m1"}
HOSTS = {"metal": MACOS_ARM64}


def device_kind(options: dict[str, Any]) -> str:
    """The TVM device a target's libraries run on: ``cuda``, ``metal`` or ``cpu``."""
    return options["kind"] if options["kind"] in GPU_KINDS else "cpu"


# GPU kinds without float64 arithmetic: their kernels sum and reduce in float32 or integers
# (compile/gpu/without_float64.py).
WITHOUT_FLOAT64 = ("metal", "webgpu")


def host_options(options: dict[str, Any]) -> dict[str, Any] | None:
    """The dict form of the CPU a GPU target's host code is compiled for where it is fixed
    (metal: macOS on Apple silicon); None where it is this machine's (cuda) or the target is a
    CPU."""
    return HOSTS.get(options["kind"])


def operating_system(options: dict[str, Any]) -> str:
    """The operating system a target's libraries load on: ``macos`` for an Apple triple (or a
    metal target), else this machine's for a native target, else ``linux``."""
    if options["kind"] == "webgpu":
        return ANY_MACHINE
    host = host_options(options) or options
    triple = host.get("mtriple")
    if triple is None:
        return host_system()
    return "macos" if "-apple-" in triple else "linux"


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


def cpu_architecture(options: dict[str, Any]) -> str:
    """The CPU (``x86_64``, ``aarch64``) a target's host code is for: its (or its fixed host's)
    ``mtriple``, or this machine's; ``ANY_MACHINE`` for webgpu, which has none."""
    if options["kind"] == "webgpu":
        return ANY_MACHINE
    triple = (host_options(options) or options).get("mtriple")
    if not triple or device_kind(options) == "cuda":
        return host_machine()
    return machine_name(triple.split("-")[0])


def architecture(options: dict[str, Any]) -> str:
    """The architecture a target's code is for: the CPU (``x86_64``, ``aarch64``) from
    ``mtriple`` or this machine, or the GPU (``cuda:sm_90``, ``metal``)."""
    if device_kind(options) == "cuda":
        return f"cuda:{options.get('arch', 'unknown')}"
    if device_kind(options) in ("metal", "webgpu"):
        return device_kind(options)
    return cpu_architecture(options)


def is_cross(options: dict[str, Any]) -> bool:
    """Whether a target's host code is for another CPU architecture or operating system than
    this machine's."""
    if options["kind"] == "webgpu":
        return False
    return (cpu_architecture(options), operating_system(options)) != (host_machine(),
                                                                       host_system())


def cross_linker(options: dict[str, Any]) -> list[str] | None:
    """The command that links a cross target's objects into a shared library, or None for
    native targets: for macOS, zig's (the ziglang package, installed with the build: it signs
    arm64 Mach-O libraries ad hoc, which macOS requires); for Linux, Debian's ``{triple}-gcc``
    (``aarch64-linux-gnu-gcc`` from gcc-aarch64-linux-gnu)."""
    if not is_cross(options):
        return None
    if operating_system(options) == "macos":
        host = host_options(options) or options
        version = host["mtriple"].split("macos")[-1] or "11"
        version += "" if "." in version else ".0"  # zig wants major.minor
        return [sys.executable, "-m", "ziglang", "cc", "-target",
                f"{cpu_architecture(options)}-macos.{version}"]
    return [f"{options['mtriple']}-gcc"]


# LSTM lowerings each device can compile, fastest first. tir and tir_vec are hand-written CPU
# TIR (a scalar or vectorised loop over time, threads per direction); GPU targets swap tir_vec's
# kernel for a GPU one when lowering (compile/gpu/lstm.py), the scalar tir has none; unroll is
# plain Relax ops, which dlight schedules like any other, but its IR grows with the bucket.
DEVICE_LSTM_METHODS = {"cpu": LSTM_METHOD_NAMES,
                       **{gpu: tuple(m for m in LSTM_METHOD_NAMES if m != "tir")
                          for gpu in GPU_KINDS}}


def lstm_methods_for(options: dict[str, Any], configured: list[str]) -> list[str]:
    """The configured LSTM methods this target can build; its first own one if none is."""
    allowed = DEVICE_LSTM_METHODS[device_kind(options)]
    return [m for m in configured if m in allowed] or [allowed[0]]
