"""The contract between a built library and its callers, shared by the compiler side (lower,
build) and the runtime side (library, bare) without either importing the other."""

# Function ``f`` of a library comes with ``f + TRANSFORM_SUFFIX``, which takes the weights by
# KModel state-dict key and returns the prepared weights that ``f`` takes after its inputs.
TRANSFORM_SUFFIX = "_transform_params"

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


def host_cpu_extensions() -> set[str] | None:
    """The CPU_EXTENSIONS this machine's CPU has, as Linux reports them (which counts only
    those the kernel enabled); None where it cannot tell (another OS, or no such list)."""
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as file:
            cpuinfo = file.read()
    except OSError:
        return None
    return listed_cpu_extensions(cpuinfo, host_machine())


def lacking_cpu_extensions(extensions) -> list[str]:
    """Those of ``extensions`` (LLVM's names) this machine's CPU lacks; none where it cannot
    tell (host_cpu_extensions)."""
    have = host_cpu_extensions()
    return [] if have is None else sorted(set(extensions) - have)
