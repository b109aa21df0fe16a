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


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_within_two_ulp_at_any_phase(name):
    """Relative to float32's spacing at the exact value, up to the sine generator's 1e6 (the
    float64 reduction keeps the argument exact; the float32 polynomials add about 1 ulp)."""
    x = np.concatenate([np.linspace(-30, 30, N // 2), np.linspace(-1e6, 1e6, N // 2)])
    want = getattr(np, name)(x.astype("float32").astype("float64"))
    got = _run(getattr(fastmath, name), x).astype("float64")
    spacing = np.spacing(np.abs(want).astype("float32")).astype("float64")
    assert np.max(np.abs(got - want) / spacing) <= 2.0


def _run(fn, x: np.ndarray) -> np.ndarray:
    target = make_target({"kind": "llvm", "mcpu": "host"})
    lib = tvm.compile(tvm.IRModule({"main": _kernel(fn)}), target=target)
    out = tvm.runtime.tensor(np.zeros(N, "float32"))
    lib["main"](tvm.runtime.tensor(x.astype("float32")), out)
    return out.numpy()


def test_exp_is_within_two_ulp_of_libm():
    """exp relative to float32's spacing (absolute error is meaningless over 76 decades), over
    the range where float32 exp is normal: softmax's arguments (x - row max) lie in [-88, 0]."""
    x = np.linspace(-87.0, 88.0, N).astype("float32")
    got = _run(fastmath.exp, x)
    want = np.exp(x)  # numpy's float32 exp: libm's, correctly rounded to float32 or nearly
    assert np.all(np.abs(got - want) <= 2 * np.spacing(want))


def test_exp_clamps_outside_the_normal_range_and_keeps_nan():
    special = np.array([-np.inf, -1e4, -88.5, 100.0, np.inf, np.nan, 0.0], "float32")
    got = _run(fastmath.exp, np.resize(special, N))[:len(special)]
    assert np.all(got[:3] == 0.0)
    np.testing.assert_allclose(got[3:5], np.exp(np.float32(fastmath.EXP_CLAMP)), rtol=2e-7)
    assert np.isnan(got[5]) and got[6] == 1.0


def test_log_is_within_two_ulp_of_libm():
    """log of positive normal floats, relative to float32's spacing at the exact value: from
    2^-24 (the noise kernel's smallest 1 - u) to 1e6, and densely around 1, where the result
    is near 0."""
    x = np.concatenate([np.geomspace(2.0 ** -24, 1e6, N // 2),
                        np.linspace(0.9, 1.1, N // 2)]).astype("float32")
    got = _run(fastmath.log, x).astype("float64")
    want = np.log(x.astype("float64"))
    spacing = np.spacing(np.abs(want).astype("float32")).astype("float64")
    assert np.max(np.abs(got - want) / np.maximum(spacing, 1e-45)) <= 2.0
