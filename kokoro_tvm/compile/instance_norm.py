"""The masked InstanceNorm of Kokoro's AdaIN layers as one TIR function.

``torch.ops.kokoro_tvm.masked_instance_norm(x, valid, eps)`` (model/masked_norm.py) reaches
the importer as one node, which leaves a placeholder for it; once the length is a bucket's,
``compile/specialize.py`` emits it as a single TE function instead of TVM's eight Relax ops,
which became four kernels per AdaIN, each a pass over the whole tensor.

The function's statistics blocks are *row statistics* (compile/row_reduction.py): each row
(batch, channel) reads only its own row of ``x``, so the schedule computes them inside the
output's row loop and a row is read from memory once, its second and third reads coming from
cache. Each sum accumulates in float64 (a row is SAMPLES_PER_FRAME values per frame;
docs/fidelity.md) over interleaved partial sums, which the schedule turns into
vector lanes, then a scalar tail.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import tvm
from tvm import relax, te

from kokoro_tvm.compile.deferred import placeholder
from kokoro_tvm.compile.row_reduction import PER_ROW, row_block, row_reduction

if TYPE_CHECKING:  # lowering loads this module without PyTorch (stages/common.without_torch)
    from torch import fx

# PrimFunc attribute holding eps, so that a target can emit its own form
# (compile/gpu/instance_norm.py).
EPS_ATTR = "kokoro_tvm.instance_norm_eps"
# Its placeholder's name (compile/specialize.py).
OP_NAME = "masked_instance_norm"


def masked_instance_norm(x: te.Tensor, valid: te.Tensor, eps: float) -> te.Tensor:
    """(x - mean) / sqrt(var + eps) with the mean and biased variance over the positions where
    ``valid`` [B, 1, L] is 1, per row of ``x`` [B, C, L]."""
    batch, channels, length = (int(d) for d in x.shape)
    rows = (batch, channels)
    pos = te.reduce_axis((0, length), "l")
    count = te.compute((batch,), lambda b: te.sum(valid[b, 0, pos].astype("float64"), axis=pos),
                       name="count")

    def masked(b, c, i):
        return (x[b, c, i] * valid[b, 0, i]).astype("float64")

    total = row_reduction(masked, rows, length, "mean")
    mean = te.compute(rows, lambda b, c: total[b, c] / count[b], name="mean",
                      attrs=row_block(PER_ROW))

    def squared(b, c, i):
        centred = (x[b, c, i].astype("float64") - mean[b, c]) * valid[b, 0, i].astype("float64")
        return centred * centred

    squares = row_reduction(squared, rows, length, "var")
    scale = te.compute(rows, lambda b, c: (1.0 / te.sqrt(squares[b, c] / count[b] + eps))
                       .astype(x.dtype), name="inv_std", attrs=row_block(PER_ROW))
    return te.compute(x.shape, lambda b, c, i: (x[b, c, i] - mean[b, c].astype(x.dtype))
                      * scale[b, c], name="normalised")


def convert_masked_instance_norm(node: fx.Node, importer) -> relax.Expr:
    """kokoro_tvm.masked_instance_norm(x, valid, eps) -> its placeholder, eps as a value."""
    x, valid = (importer.env[a] for a in node.args[:2])
    eps = relax.prim_value(tvm.tirx.FloatImm("float64", float(node.args[2])))
    return placeholder(importer.block_builder, OP_NAME, [x, valid, eps], x.ty)


def emit_masked_instance_norm(bb: relax.BlockBuilder, x: relax.Expr, valid: relax.Expr,
                              eps: relax.Expr) -> relax.Expr:
    """The placeholder's kernel: one ``call_tir`` at static shapes."""
    eps = float(eps.value)
    return bb.call_te(masked_instance_norm, x, valid, eps, primfunc_name_hint=OP_NAME,
                      primfunc_attrs={EPS_ATTR: eps})
