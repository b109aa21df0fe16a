"""Helpers every legalization and schedule rule shares (as dlight keeps its own in one place)."""
from __future__ import annotations

import tvm
from tvm import relax, s_tir


def tvm_legalization(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """TVM's own legalization of ``call``: the fall-back of ours for cases they do not cover."""
    return tvm.ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)


def static_shapes(*exprs: relax.Expr) -> bool:
    """Whether every expression's tensor type has a known shape of constant dimensions (what our
    legalizations cover)."""
    shapes = [e.ty.shape for e in exprs]
    return all(shape is not None and all(isinstance(d, tvm.ir.prim.expr.IntImm) for d in shape)
               for shape in shapes)


def root_blocks(sch: s_tir.Schedule) -> list:
    """The blocks directly under the function's root block, in order (none without a root)."""
    try:
        return list(sch.get_child_blocks(sch.get_sblock("root")))
    except Exception:  # noqa: BLE001 - TVM raises its own error types for a missing block
        return []


def loop_extent(sch: s_tir.Schedule, loop) -> int | None:
    """A loop's extent where it is a constant, else None."""
    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tvm.tirx.IntImm) else None
