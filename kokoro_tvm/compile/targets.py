"""TVM targets from their dict form, e.g. ``{"kind": "llvm", "mcpu": "host", "num-cores": 2}``.

TVM 0.27 rejects ``-mcpu=native``; ``"host"`` here means the CPU LLVM detects on this machine
(``llvm_get_system_cpu``, e.g. ``znver4`` or ``rocketlake``). The detection happens when a target
is made, so a build for ``host`` is specific to the machine that built it: configs that must be
portable should name the CPU.
"""
from __future__ import annotations

from typing import Any

import tvm
from tvm.target import codegen

from kokoro_tvm.compile.devices import architecture, device_kind, host_options
from kokoro_tvm.compile.webgpu.limits import MAX_WORKGROUP_BYTES
from kokoro_tvm.cpu import CPU_EXTENSIONS, host_machine


def host_cpu() -> str:
    """LLVM's name for this machine's CPU."""
    return str(codegen.llvm_get_system_cpu())


def resolve_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options with ``mcpu: host`` replaced by the detected CPU name."""
    resolved = dict(options)
    if resolved.get("mcpu") == "host":
        resolved["mcpu"] = host_cpu()
    return resolved


# Keys of a target's options that say how we compile for it, not what TVM targets.
OWN_KEYS = ("precision",)


def make_target(options: dict[str, Any]) -> tvm.target.Target:
    """A tvm.target.Target from the dict form, resolving ``mcpu: host``; a GPU target whose
    host is fixed (metal: devices.HOSTS) gets that host."""
    tvm_options = {k: v for k, v in resolve_options(options).items() if k not in OWN_KEYS}
    if (host := host_options(options)) is not None:
        tvm_options["host"] = host
    if options["kind"] == "webgpu":  # TVM assumes 32 KiB; every device offers 16 KiB
        tvm_options.setdefault("max_shared_memory_per_block", MAX_WORKGROUP_BYTES)
    return tvm.target.Target(tvm_options)


def cpu_of(options: dict[str, Any]) -> dict[str, Any]:
    """The CPU a target's host code is compiled for: its ``mcpu`` (None for LLVM's generic CPU)
    and the instruction-set extensions (cpu.CPU_EXTENSIONS) that mcpu implies, which the code
    may use. A cuda target's host code is for the generic CPU of this architecture, a metal
    target's for its fixed host (Apple silicon)."""
    if device_kind(options) == "webgpu":  # no host code
        return {"mcpu": None, "extensions": []}
    if device_kind(options) == "cuda":
        cpu, machine, mcpu = tvm.target.Target("llvm"), host_machine(), None
    elif (host := host_options(options)) is not None:
        return cpu_of(host)
    else:
        cpu, machine = make_target(options), architecture(options)
        mcpu = resolve_options(options).get("mcpu")
    implied = {str(feature) for feature in codegen.llvm_get_cpu_features(cpu)}
    return {"mcpu": mcpu,
            "extensions": sorted(set(CPU_EXTENSIONS.get(machine, {})) & implied)}

