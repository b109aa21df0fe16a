"""Running cuda libraries: the device, and their kernels compiled once per source.

TVM 0.27 libraries built where no CUDA driver is present (every build here) carry their kernels
as CUDA C source, which TVM compiles when a library is loaded on a GPU, through the global
function ``tvm_callback_cuda_compile``. TVM's own callback compiles at every load and always
with ``--use_fast_math`` (approximate division, exp and log). Ours looks for
``{sha256 of the source}.fatbin`` in the given kernel folders and the user's cache, and compiles
a missing one once, with nvcc, without fast math, into the cache. Nothing here needs TVM's
compiler: a runtime-only TVM (libtvm_runtime and libtvm_runtime_cuda) is enough.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.errors import UserError
from kokoro_tvm.runtime.backends import first_device, load_backend

CACHE = Path(os.environ.get("KOKORO_TVM_CACHE", "~/.cache/kokoro-tvm")).expanduser() / "cuda"
# TVM's nvcc flags for its generated source, less --use_fast_math.
NVCC_FLAGS = ("-O3", "--expt-relaxed-constexpr", "--expt-extended-lambda",
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__")


class CudaError(UserError):
    """No usable CUDA device or compiler for a cuda library."""


def kernel_file(code: str) -> str:
    """The file name a kernel source's fatbin is kept under."""
    return hashlib.sha256(code.encode()).hexdigest() + ".fatbin"


def find_nvcc() -> str | None:
    """nvcc on PATH, or in a CUDA toolkit's usual place (/usr/local/cuda*), or None."""
    found = shutil.which("nvcc") or next(iter(sorted(Path("/usr/local").glob("cuda*/bin/nvcc"))),
                                         None)
    return None if found is None else str(found)


def compile_fatbin(code: str, arch: str) -> bytes:
    """``code`` (CUDA C from a TVM library) compiled by nvcc for ``arch`` (e.g. ``sm_90``)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaError("compiling the CUDA kernels of a cuda library needs nvcc (the CUDA "
                        "toolkit) on PATH, or a kernels folder holding them compiled (as the "
                        "GPU check's bundle does; README: GPU)")
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.fatbin"
        source.write_text(code)
        done = subprocess.run([nvcc, "--fatbin", "-arch", arch, *NVCC_FLAGS, "-o", str(out),
                               str(source)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed on a library's kernels:\n{done.stderr[-4000:]}")
        return out.read_bytes()


def arch_of(device) -> str:
    """``sm_XY`` of a TVM CUDA device."""
    return "sm_" + device.compute_version.replace(".", "")


_KERNEL_FOLDERS: list[Path] = []


def use_kernels(folders: Sequence[Path], arch: str) -> None:
    """Makes TVM load cuda libraries' kernels from ``folders`` (added to those given before) or
    the cache, compiling a missing one once, for ``arch``, into the cache."""
    import tvm_ffi

    _KERNEL_FOLDERS.extend(Path(f) for f in folders if Path(f) not in _KERNEL_FOLDERS)

    @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
    def _kernels(code, *_):
        name = kernel_file(code)
        for folder in (*_KERNEL_FOLDERS, CACHE):
            if (folder / name).is_file():
                return bytearray((folder / name).read_bytes())
        binary = compile_fatbin(code, arch)
        CACHE.mkdir(parents=True, exist_ok=True)
        with atomic_path(CACHE / name) as tmp:
            tmp.write_bytes(binary)
        return bytearray(binary)


def _load_cuda_runtime() -> None:
    """libtvm_runtime_cuda beside libtvm_runtime."""
    load_backend("tvm_runtime_cuda", "libtvm_runtime_cuda.so")


def cuda_device():
    """The first CUDA device, or a CudaError saying why there is none."""
    import tvm

    return first_device(lambda: tvm.cuda(0), _load_cuda_runtime, CudaError,
                        "cuda libraries need an NVIDIA GPU and its driver",
                        "TVM sees no CUDA device here; use the llvm target's libraries on this "
                        "machine")
