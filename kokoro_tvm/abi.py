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
