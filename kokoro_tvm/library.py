"""Calling compiled libraries: a Relax VM per library, weights bound by the names it reports.

A library's functions take their inputs first, then the weights they read, each parameter named
(inputs by the component's input names, weights by KModel state-dict keys). Callers pass inputs
by name and the weights come from the component's params file, so no argument order is stored
anywhere else. Weights are turned into device tensors once and shared by every bucket.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import tvm
# The runtime's VM class (relax.VirtualMachine is this one), so that a runtime-only TVM without
# the compiler package can load libraries too (kokoro_tvm/bare.py).
from tvm.runtime.vm import VirtualMachine


def parameter_names(vm: VirtualMachine, function: str) -> list[str]:
    """A VM function's parameter names in call order: inputs first, then weights."""
    return [vm._get_function_param_name(function, i) for i in range(vm._get_function_arity(function))]


class Weights:
    """One component's params file, converted to device tensors on first use, then cached."""

    def __init__(self, npz: str | os.PathLike, device=None):
        self.npz = np.load(npz)
        self.device = device or tvm.cpu()
        self._tensors: dict[str, tvm.runtime.Tensor] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.npz.files

    def __getitem__(self, name: str):
        if name not in self._tensors:
            self._tensors[name] = tvm.runtime.tensor(self.npz[name], self.device)
        return self._tensors[name]


class Library:
    """One built library (.so) and the weights its functions read."""

    def __init__(self, so_path: str | os.PathLike, weights: Weights):
        self.path = Path(so_path)
        self.weights = weights
        self.vm = VirtualMachine(tvm.runtime.load_module(str(so_path)), weights.device)

    def __call__(self, function: str, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Runs ``function``; parameters come from ``inputs`` by name, else from the weights."""
        args = []
        for name in parameter_names(self.vm, function):
            if name in inputs:
                args.append(tvm.runtime.tensor(np.ascontiguousarray(inputs[name]),
                                               self.weights.device))
            elif name in self.weights:
                args.append(self.weights[name])
            else:
                raise KeyError(f"{self.path}: {function} needs '{name}', neither an input "
                               "nor a weight of its params file")
        return _as_list(self.vm[function](*args))


def _as_list(out) -> list[np.ndarray]:
    if isinstance(out, tvm.runtime.Tensor):
        return [out.numpy()]
    return [a for o in out for a in _as_list(o)]
