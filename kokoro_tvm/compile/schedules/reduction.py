"""Long float32 sums and means accumulated in float64.

TVM's legalized ``sum``/``mean`` add the reduced elements one after another in the output's
dtype, so float32 rounding grows with the count. Reductions over at least ``LONG_REDUCTION``
elements accumulate in float64 instead, which makes the error independent of the count; in the
five components these are the weight norms of the generator's convolutions (in channels x taps,
in the weight transform) and f0n's count of valid frames. Short reductions (LayerNorm rows)
keep TVM's legalization. The masked InstanceNorm's statistics, the long sums this was first
written for, are their own function (compile/instance_norm.py; docs/fidelity.md).
"""
from __future__ import annotations

import math

import tvm
from tvm import relax, te, topi

from kokoro_tvm.compile.schedules.common import static_shapes, tvm_legalization

# Reductions over at least this many elements accumulate in float64.
LONG_REDUCTION = 1024


def _reduced_count(call: relax.Call) -> int | None:
    if not static_shapes(call.args[0]):
        return None
    shape = call.args[0].ty.shape
    axes = call.attrs.axis
    dims = [int(d) for d in shape]
    picked = range(len(dims)) if axes is None else [int(a) % len(dims) for a in axes]
    return math.prod(dims[a] for a in picked)


def _float64_reduction(x: te.Tensor, axis, keepdims: bool, mean: bool) -> te.Tensor:
    axis = None if axis is None else [int(a) for a in axis]
    total = topi.sum(topi.cast(x, "float64"), axis=axis, keepdims=keepdims)
    if mean:
        count = math.prod(int(x.shape[a]) for a in (range(len(x.shape)) if axis is None else axis))
        total = topi.divide(total, tvm.tirx.const(count, "float64"))
    return topi.cast(total, x.dtype)


def _legalize(mean: bool):
    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        count = _reduced_count(call)
        if call.args[0].ty.dtype != "float32" or count is None or count < LONG_REDUCTION:
            return tvm_legalization(bb, call)
        return bb.call_te(_float64_reduction, call.args[0], call.attrs.axis,
                          bool(call.attrs.keepdims), mean,
                          primfunc_name_hint="mean" if mean else "sum")

    return legalize


legalize_sum = _legalize(mean=False)
legalize_mean = _legalize(mean=True)
