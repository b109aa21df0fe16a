"""matmul (bert, projections, LSTM gates, AdaIN style FCs) as a padded contraction.

``a [..., M, K] @ b [..., K, N]`` with ``b`` either 2-D (a weight) or with the same batch
dimensions as ``a``. Rows are M, vec is N (contiguous in ``b``), padded to whole tiles: when N
is not a multiple of the tile, ``b`` is first copied into a zero-padded buffer (small: the
ragged cases are the decoder's style FCs). Other shapes keep TVM's own legalization.
"""
from __future__ import annotations

import tvm
from tvm import relax, te, tirx

from kokoro_tvm.compile.schedules.contraction import annotation, vec_multiple
from kokoro_tvm.compile.schedules.cpu import cpu_facts


def matmul_compute(a: te.Tensor, b: te.Tensor, multiple: int) -> te.Tensor:
    *batch, rows, depth = (int(d) for d in a.shape)
    cols = int(b.shape[-1])
    padded = -(-cols // multiple) * multiple
    nb = len(batch)
    shared_b = len(b.shape) == 2
    if padded != cols:
        b_src = b
        b = te.compute((*b_src.shape[:-1], padded),
                       lambda *i: tirx.if_then_else(i[-1] < cols, b_src[(*i[:-1], tirx.min(i[-1], cols - 1))],
                                                    tirx.const(0, b_src.dtype)),
                       name="b_pad")
    k = te.reduce_axis((0, depth), "k")

    def body(*i):
        bi = (k, i[-1]) if shared_b else (*i[:nb], k, i[-1])
        return te.sum(a[(*i[:nb], i[nb], k)] * b[bi], axis=[k])

    y = te.compute((*batch, rows, padded), body, name="matmul",
                   attrs=annotation(row_axis=nb, vec_axis=nb + 1))
    if padded == cols:
        return y
    return te.compute((*batch, rows, cols), lambda *i: y[i], name="crop")


def legalize_matmul(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    a, b = call.args
    a_shape, b_shape = list(a.ty.shape), list(b.ty.shape)
    static = all(isinstance(d, tvm.ir.prim.expr.IntImm) for d in (*a_shape, *b_shape))
    supported = (static and a.ty.dtype == b.ty.dtype == "float32" and len(a_shape) >= 2
                 and str(call.attrs.out_dtype) in ("", "None", "float32")
                 and (len(b_shape) == 2 or [int(d) for d in b_shape[:-2]]
                      == [int(d) for d in a_shape[:-2]]))
    facts = cpu_facts(tvm.target.Target.current(allow_none=False))
    if not supported or int(b_shape[-1]) < facts.lanes():
        return tvm.ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
    rows, cols = int(a_shape[-2]), int(b_shape[-1])
    return bb.call_te(matmul_compute, a, b, vec_multiple(facts, rows, cols),
                      primfunc_name_hint="matmul")
