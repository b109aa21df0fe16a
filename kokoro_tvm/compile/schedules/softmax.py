"""softmax over the last axis (ALBERT's attention) as row statistics.

TVM's legalization is four passes over the scores (row maximum, sum of exponentials, then the
exponentials again, divided), its reductions serial per row and ``exp`` a libm call per element
that LLVM cannot vectorize (docs/benchmarks.md, "Kept: softmax as row statistics").
Here the row's maximum and sum are ``row_reduction``s (vector lanes of partial results), the
exponentials (compile/fastmath.py's ``exp``) are computed once into a row that is then scaled by
the sum's reciprocal, and schedules/row_statistics.py computes all of it inside the output's row
loop, while the row is in cache.
"""
from __future__ import annotations

from tvm import relax, te

from kokoro_tvm.compile import fastmath
from kokoro_tvm.compile.row_reduction import (
    PER_ROW,
    ROW_VALUES,
    row_block,
    row_reduction,
)
from kokoro_tvm.compile.schedules.common import static_shapes, tvm_legalization


def softmax_rows(x: te.Tensor) -> te.Tensor:
    """softmax of ``x`` over its last axis."""
    *rows, length = (int(d) for d in x.shape)
    rows = tuple(rows)
    peak = row_reduction(lambda *i: x(*i), rows, length, "peak", reducer="max")
    exps = te.compute(x.shape, lambda *i: fastmath.exp(x(*i) - peak(*i[:-1])), name="exps",
                      attrs=row_block(ROW_VALUES))
    total = row_reduction(lambda *i: exps(*i), rows, length, "exps", reducer="sum")
    inverse = te.compute(rows, lambda *r: 1.0 / total(*r), name="inverse",
                         attrs=row_block(PER_ROW))
    return te.compute(x.shape, lambda *i: exps(*i) * inverse(*i[:-1]), name="softmax")


def legalize_softmax(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    x = call.args[0]
    if (not static_shapes(x) or x.ty.dtype != "float32" or len(x.ty.shape) < 2
            or int(call.attrs.axis) % len(x.ty.shape) != len(x.ty.shape) - 1):
        return tvm_legalization(bb, call)
    return bb.call_te(softmax_rows, x, primfunc_name_hint="softmax")
