"""CPUs: how manifests name architectures, the instruction-set extensions a library's code may
use, which of them this machine's CPU has, and so whether it can run a library's code."""
from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Other spellings of the architectures a manifest names (its "architecture": Python's
# platform.machine() on Linux, the first part of an LLVM triple): macOS's and Windows'.
_MACHINE_ALIASES = {"arm64": "aarch64", "AMD64": "x86_64"}


def machine_name(name: str) -> str:
    """An architecture as manifests name it (x86_64, aarch64), from a platform's or a triple's
    spelling."""
    return _MACHINE_ALIASES.get(name, name)


def host_machine() -> str:
    """This machine's architecture as manifests name it."""
    import platform

    return machine_name(platform.machine())


# Operating systems as manifests name them, from Python's sys.platform.
_SYSTEMS = {"darwin": "macos", "linux": "linux", "win32": "windows"}
SYSTEM_NAMES = {"macos": "macOS", "linux": "Linux", "windows": "Windows"}


def host_system() -> str:
    """This machine's operating system as manifests name it (linux, macos)."""
    import sys

    return _SYSTEMS.get(sys.platform, sys.platform)


# The instruction-set extensions code generation may use for what the libraries compute
# (float32, int8 and int32 arithmetic, int64 indices), per architecture: LLVM's name (what a
# target's mcpu implies) -> Linux's in /proc/cpuinfo ("flags" on x86_64, "Features" on aarch64).
# A library built for one CPU runs on another that has every one of these that the first has.
# Left out: system and crypto extensions, which code generation uses only through intrinsics,
# and half and bfloat16 arithmetic and conversions (no library computes such types; add them
# if one does).
CPU_EXTENSIONS = {
    "x86_64": {
        "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2",
        "popcnt": "popcnt", "lzcnt": "abm", "bmi": "bmi1", "bmi2": "bmi2", "movbe": "movbe",
        "avx": "avx", "avx2": "avx2", "fma": "fma", "avxvnni": "avx_vnni",
        "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw",
        "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512vnni": "avx512_vnni",
        "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2",
        "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq", "gfni": "gfni",
    },
    "aarch64": {
        "neon": "asimd", "dotprod": "asimddp", "i8mm": "i8mm", "sve": "sve", "sve2": "sve2",
    },
}
CPUINFO = "/proc/cpuinfo"


def listed_cpu_extensions(cpuinfo: str, machine: str) -> set[str] | None:
    """The CPU_EXTENSIONS of ``machine`` (LLVM's names) that a /proc/cpuinfo text lists for its
    first CPU; None where it lists no extensions for that architecture."""
    names = CPU_EXTENSIONS.get(machine)
    if names is None:
        return None
    key = {"x86_64": "flags", "aarch64": "Features"}[machine]
    for line in cpuinfo.splitlines():
        field, _, value = line.partition(":")
        if field.strip() == key:
            listed = set(value.split())
            return {llvm for llvm, linux in names.items() if linux in listed}
    return None


def _host_cpuinfo() -> str | None:
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return None


def host_cpu_extensions() -> set[str] | None:
    """The CPU_EXTENSIONS this machine's CPU has, as Linux reports them (which counts only
    those the kernel enabled); None where it cannot tell (another OS, or no such list)."""
    cpuinfo = _host_cpuinfo()
    return None if cpuinfo is None else listed_cpu_extensions(cpuinfo, host_machine())


def host_cpu_name() -> str:
    """This machine's CPU as Linux names it, with its family and model: what a benchmark's
    figures are recorded with."""
    fields = dict(re.findall(r"^(model name|cpu family|model)\s*:\s*(.*)$",
                             _host_cpuinfo() or "", re.M))
    return (f"{fields.get('model name', 'unknown')} (family {fields.get('cpu family', '?')} "
            f"model {fields.get('model', '?')})")


def lacking_cpu_extensions(extensions: Iterable[str]) -> list[str]:
    """Those of ``extensions`` (LLVM's names) this machine's CPU lacks; none where it cannot
    tell (host_cpu_extensions)."""
    have = host_cpu_extensions()
    return [] if have is None else sorted(set(extensions) - have)


# The architecture and system of code with no host part, which any machine runs (a webgpu
# library's launch plans).
ANY_MACHINE = "any"


def cannot_run_reason(architecture: str, cpu: dict[str, Any], system: str | None = None
                      ) -> str | None:
    """Why this machine cannot run code compiled for ``architecture`` and ``cpu`` (its mcpu and
    the CPU_EXTENSIONS that code may use, as compile/targets.cpu_of gives and manifests record)
    on ``system`` (this machine's where None); None when it can."""
    if architecture == ANY_MACHINE:
        return None
    here, here_system = host_machine(), host_system()
    system = system or here_system
    if (architecture, system) != (here, here_system):
        return (f"code for {SYSTEM_NAMES.get(system, system)} on {architecture} cannot run on "
                f"this {SYSTEM_NAMES.get(here_system, here_system)} {here} machine")
    if lacking := lacking_cpu_extensions(cpu["extensions"]):
        return (f"code for the CPU {cpu['mcpu']} may use {', '.join(lacking)}, which this "
                "machine's CPU lacks")
    return None


CGROUP = "/sys/fs/cgroup"


def cgroup_cpu_quota(root: str | Path = CGROUP) -> float | None:
    """The CPUs this process's cgroup may use a period (a container's --cpus, Kubernetes' CPU
    limit), from cgroup v2's cpu.max or v1's CFS quota; None where it sets no quota."""
    root = Path(root)
    try:
        quota, period = (root / "cpu.max").read_text().split()
    except (OSError, ValueError):
        try:
            quota = (root / "cpu/cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu/cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    return int(quota) / int(period)


def usable_cores(root: str | Path = CGROUP) -> int:
    """The cores this process should compute on: those its affinity allows, fewer where its
    cgroup's quota is smaller (rounded up): a container limited to 2 CPUs on a 64-core host
    that ran 64 threads would spend its quota in a fraction of each period and wait."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    quota = cgroup_cpu_quota(root)
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))
