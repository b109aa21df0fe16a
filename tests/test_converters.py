"""Each converter of kokoro_tvm.compile.converters against PyTorch on a one-op program.

Without the converter TVM 0.27 fails to build (clamp, clamp_min) or computes the wrong result
(clamp_max), as BREAKAGE records per op (the reason the converter exists: if that stops being
true, TVM was fixed and the converter can go); with it the result equals PyTorch's.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_tvm.compile.converters import CONVERTERS


class OneOp(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


# converter key -> (the op, its input). Integer index clamps are what Kokoro's linear
# interpolation produces; clamp_max is silently ignored by TVM's own converter.
CASES = {
    "clamp.default": (lambda x: torch.clamp(x, None, 5), torch.arange(-4, 12).reshape(2, 8)),
    "clamp_min.default": (lambda x: torch.clamp_min(x, 2), torch.arange(-4, 12).reshape(2, 8)),
    "clamp_max.default": (lambda x: torch.clamp_max(x, 0.5),
                          torch.linspace(-2, 2, 16).reshape(2, 8)),
}


def _program(key):
    fn, x = CASES[key]
    program = torch.export.export(OneOp(fn), (x,))
    ops = [n.target.__name__ for n in program.graph.nodes if n.op == "call_function"]
    assert ops == [key], f"the test program should be exactly {key}, got {ops}"
    return program, x


def _run(program, x, converters) -> np.ndarray:
    # Without decompositions the op reaches TVM's converter as exported.
    mod = from_exported_program(program, run_ep_decomposition=False,
                                custom_convert_map=converters)
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()))
    return (out[0] if not isinstance(out, tvm.runtime.Tensor) else out).numpy()


def test_every_converter_has_a_case():
    assert set(CASES) == set(CONVERTERS)


@pytest.mark.parametrize("key", sorted(CASES))
def test_converter_matches_pytorch(key):
    program, x = _program(key)
    expected = program.module()(x).numpy()
    got = _run(program, x, {key: CONVERTERS[key]})
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


# How TVM 0.27 breaks each op without the converter: the error a build raises, or None where it
# builds and computes another result. Measured by running each case without its converter.
BREAKAGE = {
    "clamp.default": "Cannot convert infinity to BigInt",  # the missing min is -inf
    "clamp_min.default": "Cannot convert infinity to BigInt",  # the missing max is +inf
    "clamp_max.default": None,  # builds, and ignores the bound
}


def test_every_case_has_its_breakage():
    assert set(BREAKAGE) == set(CASES)


@pytest.mark.parametrize("key", sorted(CASES))
def test_tvm_without_converter_is_broken(key):
    """If this fails, TVM now converts the op (or breaks it another way): drop or revisit the
    converter."""
    program, x = _program(key)
    expected = program.module()(x).numpy()
    if BREAKAGE[key] is None:
        got = _run(program, x, None)
        assert not np.array_equal(got, expected), f"TVM now converts {key} correctly: drop the fix"
    else:
        with pytest.raises(RuntimeError, match=BREAKAGE[key]):
            _run(program, x, None)
