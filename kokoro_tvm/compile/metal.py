"""Metal kernels as a metal library carries them, checked against what Apple GPUs run.

TVM's Metal code generator keeps each kernel as Metal Shading Language source in the library
(no ``tvm_callback_metal_compile`` is registered here: Apple's compiler runs only on a Mac), and
the Mac's TVM runtime compiles it when the library loads. So the build checks the source itself:
no ``double`` (Apple GPUs have no float64), at most ``MAX_BUFFERS`` buffer arguments per kernel,
at most ``MAX_THREADGROUP_BYTES`` of threadgroup memory, at most ``MAX_THREADS`` threads per
threadgroup (from the scheduled kernels' thread bindings), and every kernel the host code
launches (by name, through the runtime) defined in the source.
"""
from __future__ import annotations

import math
import re

import tvm

MAX_BUFFERS = 31
MAX_THREADS = 1024
MAX_THREADGROUP_BYTES = 32 * 1024
_KERNEL = re.compile(r"kernel void (\w+)\((.*?)\)\s*\{", re.S)
_BUFFER = re.compile(r"\[\[\s*buffer\(\d+\)\s*\]\]")
_THREADGROUP_ARRAY = re.compile(r"threadgroup (\w+) \w+\[(\d+)\]")
_TYPE_BYTES = {"bool": 1, "char": 1, "uchar": 1, "half": 2, "short": 2, "ushort": 2,
               "float": 4, "int": 4, "uint": 4, "long": 8, "ulong": 8}
# Kernel names as the host code's LLVM IR holds them: C strings it asks the runtime for.
_LAUNCHED = re.compile(r'c"(\w+_kernel(?:_\d+)?)\\00"')
# Thread bindings in TVMScript: a loop bound to a thread axis, or a launch.
_THREAD_BINDING = re.compile(
    r'T\.thread_binding\((?:T\.int64\()?(\d+)\)?, thread="(threadIdx\.[xyz])"')
_LAUNCH_THREAD = re.compile(r'T\.launch_thread\("(threadIdx\.[xyz])", (?:T\.int64\()?(\d+)')


class MetalKernelError(ValueError):
    """Metal kernels an Apple GPU would not run."""


def kernels(source: str) -> dict[str, tuple[str, str]]:
    """Each kernel of Metal source: name -> (its parameter list, its body and what follows up
    to the next kernel)."""
    found = list(_KERNEL.finditer(source))
    ends = [m.start() for m in found[1:]] + [len(source)]
    return {m.group(1): (m.group(2), source[m.end():end]) for m, end in zip(found, ends)}


def source_problems(source: str, launched: set[str] = frozenset()) -> list[str]:
    """What in Metal ``source`` an Apple GPU would not run, and which of the ``launched`` kernel
    names it does not define."""
    problems = []
    if re.search(r"\bdouble\b", source):
        problems.append("float64 (double) arithmetic, which Apple GPUs lack")
    defined = kernels(source)
    for name, (parameters, body) in defined.items():
        buffers = len(_BUFFER.findall(parameters))
        if buffers > MAX_BUFFERS:
            problems.append(f"{name} takes {buffers} buffers (Metal allows {MAX_BUFFERS})")
        shared = sum(_TYPE_BYTES.get(kind, 4) * int(count)
                     for kind, count in _THREADGROUP_ARRAY.findall(body))
        if shared > MAX_THREADGROUP_BYTES:
            problems.append(f"{name} uses {shared} bytes of threadgroup memory "
                            f"(Metal allows {MAX_THREADGROUP_BYTES})")
    if missing := sorted(launched - set(defined)):
        problems.append(f"the host launches kernels the source lacks: {', '.join(missing)}")
    return problems


def thread_counts(mod: tvm.IRModule) -> dict[str, int]:
    """Threads per threadgroup of each scheduled PrimFunc of ``mod``: the product of its largest
    extent bound to each threadIdx axis (read from its TVMScript, since TVM's Python API has no
    TIR visitor)."""
    counts = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        extents: dict[str, int] = {}
        script = func.script()
        bound = ([(tag, n) for n, tag in _THREAD_BINDING.findall(script)]
                 + _LAUNCH_THREAD.findall(script))
        for tag, extent in bound:
            extents[tag] = max(extents.get(tag, 1), int(extent))
        if extents:
            counts[gvar.name_hint] = math.prod(extents.values())
    return counts


def modules(module) -> list:
    """``module`` and every module it imports, depth first."""
    found = [module]
    for imported in module.imports:
        found += modules(imported)
    return found


def check_kernels(executable, lowered: tvm.IRModule) -> None:
    """Raises MetalKernelError naming what in a built metal library (``executable``, built from
    ``lowered``) an Apple GPU would not run."""
    built = modules(executable.mod)
    sources = [m.inspect_source() for m in built if m.kind == "metal"]
    launched = {name for m in built if m.kind == "llvm"
                for name in _LAUNCHED.findall(m.inspect_source("ll"))}
    problems = source_problems("\n".join(sources), launched)
    problems += [f"{name} runs {threads} threads per threadgroup (Metal allows {MAX_THREADS})"
                 for name, threads in thread_counts(lowered).items() if threads > MAX_THREADS]
    if problems:
        raise MetalKernelError("; ".join(problems))
