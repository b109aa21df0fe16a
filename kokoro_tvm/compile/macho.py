"""What a macOS library must be for a Mac to load it, checked on the build machine.

Read with LIEF (a maintained Mach-O parser): one arm64 slice, a dylib, built for macOS 11 or
later (the first macOS on Apple silicon), depending on libSystem alone (the TVM runtime's
symbols are looked up in the process that loads it), exporting TVM's library blob, whose VM
executable deserializes and calls nothing the library and TVM's runtime lack (a metal library's
kernels pass compile/metal.py's checks, and each one its host code launches is there), and signed:
the code signature's CodeDirectory hashes every page of the file up to its code limit (Apple's
format, which LIEF reads as a blob), and each hash is checked against the page. macOS kills a
process that maps an arm64 library without a valid signature; an ad-hoc one is enough.
"""
from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

MIN_MACOS = (11, 0, 0)
LIBSYSTEM = "/usr/lib/libSystem.B.dylib"
LIBRARY_SYMBOL = "___tvm_ffi__library_bin"  # TVM's serialized modules (C name, Mach-O's _)
VM_KEY = "relax.VMExecutable"
METAL_KEY = "metal"  # a metal library's kernels (compile/metal.py)
KERNEL_NAME = re.compile(rb"(?<=\0)(\w+_kernel(?:_\d+)?)(?=\0)")
_SUPERBLOB, _CODEDIRECTORY = 0xFADE0CC0, 0xFADE0C02
_HASHES = {1: hashlib.sha1, 2: hashlib.sha256}  # CodeDirectory hashType


class MachOError(ValueError):
    """A library a Mac would not load."""


def signature_problems(data: bytes, offset: int, size: int) -> list[str]:
    """What is wrong with the code signature at ``offset`` (``size`` bytes) of the file
    ``data``: its CodeDirectory's page hashes against the pages."""
    blob = data[offset:offset + size]
    magic, _, count = struct.unpack_from(">III", blob)
    if magic != _SUPERBLOB:
        return [f"the code signature is not a SuperBlob (magic {magic:#x})"]
    directories = []
    for i in range(count):
        _, at = struct.unpack_from(">II", blob, 12 + 8 * i)
        if struct.unpack_from(">I", blob, at)[0] == _CODEDIRECTORY:
            directories.append(at)
    if not directories:
        return ["the code signature has no CodeDirectory"]
    problems = []
    for at in directories:
        (hash_offset, _, _, slots, code_limit, hash_size, hash_type, _, page_log2
         ) = struct.unpack_from(">IIIIIBBBB", blob, at + 16)
        if hash_type not in _HASHES:
            problems.append(f"unknown code signature hash type {hash_type}")
            continue
        page = 1 << page_log2
        if code_limit != offset or slots != -(-code_limit // page):
            problems.append(f"the signature covers {code_limit} bytes in {slots} pages, not the "
                            f"{offset} bytes before it")
            continue
        for i in range(slots):
            expected = blob[at + hash_offset + i * hash_size:at + hash_offset + (i + 1) * hash_size]
            actual = _HASHES[hash_type](data[i * page:min((i + 1) * page, code_limit)]).digest()
            if actual[:hash_size] != expected:
                problems.append(f"page {i} does not match its signed hash (modified after "
                                "signing?)")
                break
    return problems


def packed_modules(binary) -> dict[str, bytes]:
    """The modules TVM packed into a library (its LIBRARY_SYMBOL blob, which the runtime
    deserializes when it loads the library): type key -> serialized bytes. The blob is a
    little-endian byte count, the import tree (two vectors of uint64) and then each module as
    its type key and its bytes (strings: a uint64 length, then the bytes), "_lib" standing for
    the library's own code."""
    address = binary.get_symbol(LIBRARY_SYMBOL).value
    (size,) = struct.unpack("<Q", bytes(binary.get_content_from_virtual_address(address, 8)))
    blob = bytes(binary.get_content_from_virtual_address(address + 8, size))
    position = 0

    def number() -> int:
        nonlocal position
        position += 8
        return struct.unpack_from("<Q", blob, position - 8)[0]

    def string() -> bytes:
        nonlocal position
        length = number()
        position += length
        return blob[position - length:position]

    for _ in range(2):  # the import tree's row pointers and child indices
        for _ in range(number()):
            number()
    found = {}
    while position < len(blob):
        key = string().decode()
        if key != "_lib":
            found[key] = string()
    return found


def launched_kernels(binary, data: bytes) -> set[bytes]:
    """The kernel names a library's host code launches: the C strings ending in ``_kernel`` (or
    ``_kernel_N``) in the file ``data`` outside the packed modules (whose own function table
    names them too)."""
    start = binary.virtual_address_to_offset(binary.get_symbol(LIBRARY_SYMBOL).value)
    (size,) = struct.unpack_from("<Q", data, start)
    return {match.group(1) for match in KERNEL_NAME.finditer(data)
            if not start <= match.start() < start + 8 + size}


def vm_problems(binary, data: bytes) -> list[str]:
    """What keeps the library's Relax VM executable from running: it must deserialize (with
    TVM's own loader, as the Mac's runtime does), and every function it calls must be a VM
    function of its own, a function of TVM's runtime, or a function the library exports."""
    import tvm  # noqa: F401 - registers TVM's runtime functions, the VM's loader among them
    import tvm_ffi

    packed = packed_modules(binary)
    if VM_KEY not in packed:
        return [f"it packs no {VM_KEY} (modules: {sorted(packed)})"]
    try:
        executable = tvm_ffi.get_global_func(f"ffi.Module.load_from_bytes.{VM_KEY}")(
            packed[VM_KEY])
    except Exception as err:  # noqa: BLE001 - any failure to deserialize is the finding
        return [f"its VM executable does not load: {err}"]
    own = set(re.findall(r"^@(\w+):", executable["as_text"](), re.MULTILINE))
    calls = re.search(r"Globals \(#\d+\): \[(.*?)\]", executable["stats"](), re.S).group(1)
    missing = [name for name in (n.strip() for n in calls.split(","))
               if name not in own and tvm_ffi.get_global_func(name, allow_missing=True) is None
               and not binary.has_symbol(f"___tvm_ffi_{name}")]
    problems = [f"its VM calls functions it lacks: {', '.join(missing)}"] if missing else []
    if METAL_KEY in packed:  # kernels as source, launched by name from the host code
        from kokoro_tvm.compile.metal import source_problems

        launched = {name.decode() for name in launched_kernels(binary, data)}
        problems += source_problems(packed[METAL_KEY].decode("utf-8", "replace"), launched)
    return problems


def library_problems(path: str | Path) -> list[str]:
    """Why a Mac with Apple silicon would not load ``path`` as a library (none: it would)."""
    import lief

    lief.logging.disable()
    data = Path(path).read_bytes()
    fat = lief.MachO.parse(str(path))
    if fat is None:
        return [f"{path} is not a Mach-O file"]
    if fat.size != 1 or fat.at(0).header.cpu_type != lief.MachO.Header.CPU_TYPE.ARM64:
        return [f"{path} is not a single arm64 Mach-O file"]
    binary = fat.at(0)
    problems = []
    if binary.header.file_type != lief.MachO.Header.FILE_TYPE.DYLIB:
        problems.append(f"it is a {binary.header.file_type.name}, not a DYLIB")
    if not binary.has_build_version:
        problems.append("it names no minimum macOS (no LC_BUILD_VERSION)")
    else:
        version = binary.build_version
        if version.platform != lief.MachO.BuildVersion.PLATFORMS.MACOS:
            problems.append(f"it is built for {version.platform.name}, not macOS")
        if tuple(version.minos) > MIN_MACOS:
            problems.append(f"it needs macOS {'.'.join(map(str, version.minos))}, not 11")
    own = binary.get(lief.MachO.LoadCommand.TYPE.ID_DYLIB)
    dependencies = [lib.name for lib in binary.libraries if own is None or lib.name != own.name]
    if dependencies != [LIBSYSTEM]:
        problems.append(f"it depends on {dependencies}, not libSystem alone")
    if not binary.has_symbol(LIBRARY_SYMBOL):
        problems.append(f"it lacks TVM's {LIBRARY_SYMBOL[1:]}")
    else:
        problems += vm_problems(binary, data)
    if not binary.has_code_signature:
        problems.append("it is not signed (macOS kills a process that loads it)")
    else:
        signature = binary.code_signature
        problems += signature_problems(data, signature.data_offset, signature.data_size)
    return [f"{path}: {problem}" for problem in problems]


def check_library(path: str | Path) -> None:
    """Raises MachOError naming every reason a Mac would not load ``path``."""
    if problems := library_problems(path):
        raise MachOError("; ".join(problems))
