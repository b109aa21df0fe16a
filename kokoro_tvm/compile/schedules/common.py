"""Helpers every legalization and schedule rule shares (as dlight keeps its own in one place)."""
from __future__ import annotations

import tvm
from tvm import relax, s_tir, tirx

# Below this many whole vector chunks, a loop whose extent is no multiple of the lanes stays
# scalar (LLVM may still vectorize it): the scalar rest costs about what the chunks save
# (docs/cpu-speed.md, "Vector loops with a scalar rest").
MIN_PARTITIONED_CHUNKS = 8


def ceil_div(n: int, d: int) -> int:
    return -(-n // d)


def round_up(n: int, multiple: int) -> int:
    """The least multiple of ``multiple`` that is at least ``n`` (an axis padded to whole
    tiles)."""
    return ceil_div(n, multiple) * multiple


def divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (1 if ``limit`` < 1)."""
    return max((d for d in range(1, min(n, limit) + 1) if n % d == 0), default=1)


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


def _stores_a_condition(stmt) -> bool:
    """Whether a block's body is a store of ``if_then_else`` (padding, gathers)."""
    return (isinstance(stmt, tirx.BufferStore) and isinstance(stmt.value, tvm.ir.expr.Call)
            and stmt.value.op.same_as(tvm.ir.Op.get("prim.if_then_else")))


def vectorize_innermost(sch: s_tir.Schedule, block, lanes: int):
    """Vectorizes the block's innermost loop in chunks of ``lanes``. Returns the loop left in
    its place among the block's loops, for the caller to fuse or parallelize: the loop over
    the chunks, the innermost loop itself where it stays scalar, or None.

    A loop of 2 to ``lanes`` iterations becomes one vector. A longer one whose extent is no
    multiple of the lanes has its whole chunks split off into a vector loop of their own and
    the rest run as a scalar loop after it (a split alone would leave a bounds test inside the
    vector loop, which TVM then runs element by element). The two loops are then under a block
    of their own, and None is returned. That is not done for fewer than
    ``MIN_PARTITIONED_CHUNKS`` chunks, nor for a block that stores a condition (TVM runs a
    vector ``if_then_else`` lane by lane, while LLVM vectorizes the scalar loop with masks):
    those loops stay scalar."""
    loops = sch.get_loops(block)
    if not loops:
        return None
    loop = loops[-1]
    extent = loop_extent(sch, loop)
    if extent is None or extent <= 1:
        return loop
    if extent <= lanes:
        sch.vectorize(loop)
        return None
    rest = extent % lanes
    if rest and (extent < MIN_PARTITIONED_CHUNKS * lanes
                 or _stores_a_condition(sch.get(block).body)):
        return loop
    if rest:
        loop, _ = sch.loop_partition(loop, [extent - rest, None])
    chunks, vector = sch.split(loop, [None, lanes])
    sch.vectorize(vector)
    return None if rest else chunks
