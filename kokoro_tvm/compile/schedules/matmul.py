"""matmul (bert, projections, LSTM gates, AdaIN style FCs) as a padded contraction.

``a [..., M, K] @ b [..., K, N]`` with ``b`` either 2-D (a weight) or with the same batch
dimensions as ``a``. Rows are M, vec is N, padded to whole tiles. A 2-D ``b`` is first packed
into panels one register tile wide (``[N / tile, K, tile]``), so the kernel streams each tile's
columns contiguously instead of striding over rows of ``b``; the packing reads only the weight,
so the lower stage lifts it out of the per-call function and a library packs once. A batched
``b`` (attention) is read in place, zero-padded when N is ragged. Other shapes keep TVM's own
legalization.
"""
from __future__ import annotations

import tvm
from tvm import relax, te, tirx

from kokoro_tvm.compile.schedules.common import (
    ceil_div,
    round_up,
    static_shapes,
    tvm_legalization,
)
from kokoro_tvm.compile.schedules.contraction import annotation, vec_multiple
from kokoro_tvm.compile.schedules.cpu import cpu_facts


def _pack_weight(b: te.Tensor, tile: int) -> te.Tensor:
    """``b [K, N]`` as ``[ceil(N / tile), K, tile]``, zero-padded: each register tile's columns
    for every k in one contiguous stream. ``b`` is a weight (or a transform of one), so the
    lower stage lifts this into the library's weight transform: it runs once, not per call."""
    depth, cols = (int(d) for d in b.shape)
    panels = ceil_div(cols, tile)

    def packed(p, k, j):
        n = p * tile + j
        return tirx.if_then_else(n < cols, b[k, tirx.min(n, cols - 1)], tirx.const(0, b.dtype))

    return te.compute((panels, depth, tile), packed, name="weight_panels")


def _pad_columns(b: te.Tensor, padded: int) -> te.Tensor:
    """Batched ``b [..., K, N]`` zero-padded to ``padded`` columns (attention: small)."""
    cols = int(b.shape[-1])
    if padded == cols:
        return b
    return te.compute((*b.shape[:-1], padded),
                      lambda *i: tirx.if_then_else(
                          i[-1] < cols, b[(*i[:-1], tirx.min(i[-1], cols - 1))],
                          tirx.const(0, b.dtype)),
                      name="b_pad")


def matmul_compute(a: te.Tensor, b: te.Tensor, cols: int, tile: int, panels: bool) -> te.Tensor:
    """``a [..., M, K] @ b`` with ``b`` either weight panels (``_pack_weight``) or batched like
    ``a``; the vec axis (N) padded to whole tiles, then cropped to ``cols``."""
    *batch, rows, depth = (int(d) for d in a.shape)
    nb = len(batch)
    padded = round_up(cols, tile)
    k = te.reduce_axis((0, depth), "k")
    if panels:
        def body(*i):
            return te.sum(a[(*i[:nb], i[nb], k)] * b[i[-1] // tile, k, i[-1] % tile], axis=[k])
    else:
        b = _pad_columns(b, padded)

        def body(*i):
            return te.sum(a[(*i[:nb], i[nb], k)] * b[(*i[:nb], k, i[-1])], axis=[k])

    y = te.compute((*batch, rows, padded), body, name="matmul",
                   attrs=annotation(row_axis=nb, vec_axis=nb + 1))
    if padded == cols:
        return y
    return te.compute((*batch, rows, cols), lambda *i: y[i], name="crop")


def legalize_matmul(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    a, b = call.args
    a_shape, b_shape = list(a.ty.shape), list(b.ty.shape)
    static = static_shapes(a, b)
    supported = (static and a.ty.dtype == b.ty.dtype == "float32" and len(a_shape) >= 2
                 and str(call.attrs.out_dtype) in ("", "None", "float32")
                 and (len(b_shape) == 2 or [int(d) for d in b_shape[:-2]]
                      == [int(d) for d in a_shape[:-2]]))
    facts = cpu_facts(tvm.target.Target.current(allow_none=False))
    if not supported or int(b_shape[-1]) < facts.lanes():
        return tvm_legalization(bb, call)
    rows, cols = int(a_shape[-2]), int(b_shape[-1])
    tile = vec_multiple(facts, rows, cols)
    panels = len(b_shape) == 2
    if panels:
        b = bb.emit(bb.call_te(_pack_weight, b, tile, primfunc_name_hint="weight_panels"))
    return bb.call_te(matmul_compute, a, b, cols, tile, panels, primfunc_name_hint="matmul")
