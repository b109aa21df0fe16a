"""The arithmetic-only functions of kokoro_tvm/compile/fastmath.py, built in a vectorised TIR
kernel, against float64 numpy: tanh and sigmoid over [-30, 30], sin and cos over [-30, 30] and
phases up to 1e6 (the sine generator's), plus zero, tiny and infinite inputs. Bar: max abs error
<= 1e-6 (libm's float32 results are within 6e-8; the LSTM bar is 1e-5); infinities give NaN for
sin and cos, as in libm."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from kokoro_tvm.compile import fastmath
from kokoro_tvm.compile.targets import make_target

N = 4096


def _kernel(fn):
    @T.prim_func
    def main(x: T.Buffer((N,), "float32"), y: T.Buffer((N,), "float32")):
        T.func_attr({"tir.noalias": True})
        for i0 in range(N // 16):
            for i1 in T.vectorized(16):
                y[i0 * 16 + i1] = fn(x[i0 * 16 + i1])

    return main


SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 8.99, 9.01, -9.01, np.pi / 2, -np.pi, np.inf, -np.inf]


@pytest.mark.parametrize("name, reference, largest", [
    ("tanh", np.tanh, 30),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), 30),
    ("sin", np.sin, 30),
    ("cos", np.cos, 30),
    ("sin", np.sin, 1e6),
    ("cos", np.cos, 1e6),
])
def test_matches_float64(name, reference, largest):
    target = make_target({"kind": "llvm", "mcpu": "host"})
    lib = tvm.compile(tvm.IRModule({"main": _kernel(getattr(fastmath, name))}), target=target)
    x = np.concatenate([np.linspace(-largest, largest, N - len(SPECIAL)),
                        SPECIAL]).astype("float32")
    out = tvm.runtime.tensor(np.zeros(N, "float32"))
    lib["main"](tvm.runtime.tensor(x), out)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = reference(x.astype("float64"))
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-6)
