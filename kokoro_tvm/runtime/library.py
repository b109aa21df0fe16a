"""Calling compiled libraries: a Relax VM per library, weights bound by the names it reports.

Each function ``f`` of a library comes with ``f_transform_params`` (lifted in the lower stage):
everything ``f`` computes from weights alone (transposed matmul weights, weight-normalised conv
kernels, ALBERT's shared layer weights once instead of twelve times). It takes the weights by
KModel state-dict key and returns them prepared; ``f`` then takes its inputs by name, followed
by the prepared weights in that order. A library's weights are prepared once, on first use, and
only the prepared ones are kept: the weights as stored are read from the params file for the
transform and released after it. Libraries of one component (its buckets) share one
``Weights``, and prepared tensors that are equal byte for byte are kept once there: the
decoder's prepared weights are the same at every bucket.
Callers pass inputs by name and the weights come from the component's params file, so no
argument order is stored anywhere else.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from kokoro_tvm.cpu import usable_cores

# TVM's thread pool defaults to the physical cores it infers as logical / 2, which is 1 on a
# 2-core machine without SMT, where PyTorch uses both, and ignores a container's CPU limit:
# libraries run on every core this process may use (cpu.usable_cores) unless TVM_NUM_THREADS
# says otherwise (read when the pool starts, on the first call).
os.environ.setdefault("TVM_NUM_THREADS", str(usable_cores()))

import tvm  # noqa: E402 - after the thread count is set

# The runtime's VM class (relax.VirtualMachine is this one), so that a runtime-only TVM without
# the compiler package can load libraries too (kokoro_tvm/runtime/bare.py).
from tvm.runtime.vm import VirtualMachine  # noqa: E402

from kokoro_tvm.abi import TRANSFORM_SUFFIX  # noqa: E402
from kokoro_tvm.runtime.transfers import Transfers  # noqa: E402

_CLEAR_POOLS = "vm.builtin.memory_manager.clear"
_LIBC = ctypes.CDLL(None)


def release_pooled_memory() -> None:
    """Returns what TVM's pooled allocators keep for later calls (their free blocks) and what
    the C heap then holds free to the system. The pool keeps a block per size it has seen, so
    a process that runs many buckets would otherwise hold every bucket's activations at once
    (docs/memory.md)."""
    tvm.get_global_func(_CLEAR_POOLS)()
    trim = getattr(_LIBC, "malloc_trim", None)  # glibc's; freed blocks under its mmap threshold
    if trim is not None:
        trim(0)


def parameter_names(vm: VirtualMachine, function: str) -> list[str]:
    """A VM function's parameter names in call order."""
    return [vm._get_function_param_name(function, i)
            for i in range(vm._get_function_arity(function))]


def prepare_weights(vm: VirtualMachine, function: str, weight: Callable[[str], object],
                    library: str | os.PathLike) -> list:
    """The prepared weights ``function`` takes after its inputs: its transform function run on
    ``weight(name)`` for each weight it names."""
    transform = function + TRANSFORM_SUFFIX
    if not vm.module.implements_function(transform):
        raise KeyError(f"{library} has no {transform}: it was built before weight transforms "
                       "were lifted; rebuild it with snakemake")
    return as_tensors(vm[transform](*[weight(name) for name in parameter_names(vm, transform)]))


def input_names(vm: VirtualMachine, function: str, prepared: list) -> list[str]:
    """The names of ``function``'s inputs: its parameters before the prepared weights."""
    names = parameter_names(vm, function)
    return names[:len(names) - len(prepared)]


class Weights:
    """One component's weights (a params .npz path, or name -> array), read as device tensors
    when a transform needs them; and the prepared weights its libraries share."""

    def __init__(self, source: str | os.PathLike | Mapping[str, np.ndarray], device=None):
        self.path = Path(source) if isinstance(source, (str, os.PathLike)) else None
        self.arrays = np.load(source) if self.path is not None else source
        self.device = device or tvm.cpu()
        self._prepared: dict[tuple, tvm.runtime.Tensor] = {}
        self.by_transform: dict[str, list] = {}  # transform fingerprint -> prepared weights

    def shared(self, prepared: list) -> list:
        """``prepared`` with every tensor replaced by an equal one kept earlier, if any."""
        out = []
        for tensor in prepared:
            array = tensor.numpy()
            data = array.reshape(-1).view(np.uint8)  # the array's own bytes, not a copy
            key = (array.shape, str(array.dtype),
                   hashlib.blake2b(data, digest_size=16).digest())
            out.append(self._prepared.setdefault(key, tensor))
        return out

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def __getitem__(self, name: str):
        """A new device tensor of weight ``name``, as stored (not kept here)."""
        return tvm.runtime.tensor(np.ascontiguousarray(self.arrays[name]), self.device)


class Library:
    """One built library (.so) and the weights its functions read; ``transforms`` maps its
    functions to their weight transforms' fingerprints (the build's metadata), so that a
    transform another library of the component already ran is not run again. Calls use TVM's
    ``allocator``: "pooled" keeps each call's activations for the next call of this library,
    "naive" frees them (see TvmEngine's ``allocator``). Inputs and outputs are copied through
    ``transfers``, which counts them."""

    def __init__(self, so_path: str | os.PathLike, weights: Weights,
                 transforms: Mapping[str, str] | None = None, allocator: str = "pooled",
                 transfers: Transfers | None = None):
        self.path = Path(so_path)
        self.weights = weights
        self.transfers = transfers or Transfers()
        self.transforms = dict(transforms or {})
        self.device = weights.device
        self.module = tvm.runtime.load_module(str(so_path))
        self.vm = VirtualMachine(self.module, weights.device, memory_cfg=allocator)
        self._prepared: dict[str, list] = {}

    def _weight(self, name: str):
        if name not in self.weights:
            raise KeyError(f"{self.path}: needs weight '{name}', missing from its params file")
        return self.weights[name]

    def prepared(self, function: str) -> list:
        """``function``'s prepared weights (computed on the first call, then kept).

        A transform with the fingerprint of one another library of the component ran is not run
        again: its prepared weights are taken from there. Transforms run in a VM of their own
        with TVM's naive allocator, which frees what it allocates: the pooled one that calls
        use (faster: docs/memory.md) would keep their intermediates
        reserved."""
        if function not in self._prepared:
            fingerprint = self.transforms.get(function)
            if fingerprint in self.weights.by_transform:
                self._prepared[function] = self.weights.by_transform[fingerprint]
                return self._prepared[function]
            once = VirtualMachine(self.module, self.device, memory_cfg="naive")
            self._prepared[function] = self.weights.shared(
                prepare_weights(once, function, self._weight, self.path))
            if fingerprint is not None:
                self.weights.by_transform[fingerprint] = self._prepared[function]
        return self._prepared[function]

    def bind(self, function: str, inputs: Mapping[str, object]) -> Callable[[], object]:
        """A call of ``function`` with its arguments already on the device (for timing too);
        inputs are numpy arrays, or tensors on the device (an earlier call's outputs)."""
        weights = self.prepared(function)
        names = input_names(self.vm, function, weights)
        missing = [name for name in names if name not in inputs]
        if missing:
            raise KeyError(f"{self.path}: {function} needs inputs {missing}")
        args = [self._on_device(inputs[name]) for name in names] + weights
        func = self.vm[function]
        return lambda: func(*args)

    def _on_device(self, value):
        if isinstance(value, tvm.runtime.Tensor):
            return value
        return self.transfers.upload(value, self.device)

    def on_device(self, function: str, inputs: Mapping[str, object]) -> list:
        """Runs ``function`` on ``inputs`` (by name); outputs as tensors left on the device."""
        return as_tensors(self.bind(function, inputs)())

    def __call__(self, function: str, inputs: Mapping[str, object]) -> list[np.ndarray]:
        """Runs ``function`` on ``inputs`` (by name); outputs as numpy arrays."""
        return [self.transfers.download(t) for t in self.on_device(function, inputs)]


def as_tensors(out) -> list:
    """A VM result (a tensor or nested tuples of tensors) as a flat list of tensors."""
    if isinstance(out, tvm.runtime.Tensor):
        return [out]
    return [t for o in out for t in as_tensors(o)]
