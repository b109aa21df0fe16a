"""Register-tiled contractions: the one CPU schedule behind conv1d, conv_transpose1d and matmul.

Each rule family legalizes its op into a TE compute whose main block is a contraction
``out[..., row, ..., vec] += a[...] * b[...]`` and marks that block with ``ANNOTATION`` naming
which spatial axes are the *row* axis (output channels, matrix rows: a scalar broadcast from the
weight) and the *vec* axis (time, matrix columns: contiguous in the streamed operand). The
legalization pads the vec axis to a whole number of tiles (``vec_multiple``) and crops after,
so the tile never needs a tail.

The schedule (``schedule_contraction``): tile row x vec into an ``R x (M * lanes)`` register
block (R broadcasts and M vector loads feed R*M accumulators per reduction step), the whole
reduction inside the tile, accumulators in a local buffer that LLVM keeps in registers, the
epilogue (crop, bias, activations fused by FuseOps) written per tile, and the tile loops fused
and parallel. Vec tiles are the outer tile loop so one input tile (all reduction rows) stays in
cache while every row tile reuses it. Where the vec tiles alone are enough to share among
threads, a padded input the legalization names (``tile_input``) is computed per vec tile.
"""
from __future__ import annotations

import json

from tvm import s_tir, tirx
from tvm.target import Target

from kokoro_tvm.compile.schedules.common import (
    ceil_div,
    divisor_at_most,
    loop_extent,
    root_blocks,
    vectorize_innermost,
)
from kokoro_tvm.compile.schedules.cpu import CpuFacts, cpu_facts
from kokoro_tvm.compile.schedules.elementwise import (
    PARALLEL_CHUNKS,
    schedule_root_blocks,
)

ANNOTATION = "kokoro_tvm.contraction"
MAX_VECTORS = 4  # vectors per accumulator row: more buys little and costs a longer tail


def register_tile(facts: CpuFacts, rows: int, vec_extent: int) -> tuple[int, int]:
    """(R, M): accumulator rows and vectors for ``rows`` output rows and a vec axis of
    ``vec_extent`` elements (before padding).

    R*M accumulators plus M vector operands and one broadcast must fit the register file;
    R divides ``rows`` (no ragged row tiles); M is no more than the vec axis needs; among
    fitting tiles the most accumulators win, then the most vectors (fewer broadcasts per FMA).
    """
    lanes = facts.lanes()
    best = (1, 1)
    for vectors in range(1, min(MAX_VECTORS, ceil_div(vec_extent, lanes)) + 1):
        budget = (facts.registers - vectors - 1) // vectors
        r = divisor_at_most(rows, budget)
        if (r * vectors, vectors) > (best[0] * best[1], best[1]):
            best = (r, vectors)
    return best


def vec_multiple(facts: CpuFacts, rows: int, vec_extent: int) -> int:
    """What a legalization pads the vec axis to a multiple of: the vector tile M * lanes."""
    return register_tile(facts, rows, vec_extent)[1] * facts.lanes()


def annotation(row_axis: int, vec_axis: int, tile_input: str | None = None,
               dot: str | None = None, points_axis: int | None = None,
               tile_output: str | None = None) -> dict[str, str]:
    """The block annotation a legalization puts on its contraction (TE ``attrs``).
    ``tile_input`` names a producer (the zero-padded input) that the schedule may compute per
    vec tile, for the tile's window only (``schedule_contraction``). ``dot`` names a tensor
    intrinsic that computes the vector lanes times the last reduction axis in one instruction
    (int8 dot products, compile/quantize.py) where float32 has one FMA per reduction step.
    ``points_axis`` (a spatial axis run inside each register tile) and ``tile_output`` (a
    consumer reducing over it, computed per tile from the accumulators) are Winograd's
    transform points and output transform (schedules/winograd.py)."""
    axes = {"row": row_axis, "vec": vec_axis}
    for key, value in (("tile_input", tile_input), ("dot", dot), ("points", points_axis),
                       ("tile_output", tile_output)):
        if value is not None:
            axes[key] = value
    return {ANNOTATION: json.dumps(axes)}


def find_contraction(sch: s_tir.Schedule) -> tuple[s_tir.schedule.SBlockRV, dict] | None:
    """The annotated contraction block of the function, if any, and its axes."""
    for block in root_blocks(sch):
        ann = sch.get(block).annotations
        if ANNOTATION in ann:
            return block, json.loads(str(ann[ANNOTATION]))
    return None


def _try(fn, *args) -> bool:
    try:
        fn(*args)
        return True
    except Exception:  # noqa: BLE001 - a schedule primitive's refusal is an expected outcome
        return False


def schedule_contraction(sch: s_tir.Schedule, block, axes: dict, facts: CpuFacts) -> None:
    """Tiles, vectorizes and parallelizes the contraction ``block`` and its epilogue."""
    lanes = facts.lanes()
    stmt = sch.get(block)
    kinds = [iv.iter_type for iv in stmt.iter_vars]
    loops = sch.get_loops(block)
    spatial = [loop for loop, k in zip(loops, kinds) if k == tirx.IterVar.DataPar]
    reduce = [loop for loop, k in zip(loops, kinds) if k != tirx.IterVar.DataPar]
    row, vec = spatial[axes["row"]], spatial[axes["vec"]]
    points = [spatial[axes["points"]]] if "points" in axes else []
    placed = (axes["row"], axes["vec"], axes.get("points"))
    others = [loop for i, loop in enumerate(spatial) if i not in placed]
    rows, vecs = loop_extent(sch, row), loop_extent(sch, vec)
    r, m = register_tile(facts, rows, vecs)
    if vecs % lanes:
        lanes = 1  # not a padded axis (a legalization chose not to pad): scalar tiles
    m = max(1, min(m, vecs // lanes))
    while vecs % (m * lanes):
        m -= 1
    ro, ri = sch.split(row, [None, r])
    vo, vm, vi = sch.split(vec, [None, m, lanes])
    dot = [reduce.pop()] if "dot" in axes else []  # the intrinsic's own reduction, inside vi
    sch.reorder(*others, vo, ro, *points, *reduce, ri, vm, vi, *dot)

    # Accumulate in a local tile, write it back (and run the epilogue) once per tile.
    writeback = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(writeback, ro, preserve_unit_loops=True)
    tile_output = _named(sch, sch.get_consumers(writeback), axes.get("tile_output"))
    if tile_output is not None:
        # The transform reads every point's accumulators of the tile while they are in L1;
        # it is the function's output (the interleave is a call of its own: winograd.py).
        sch.reverse_compute_at(tile_output, ro, preserve_unit_loops=True)
        sch.compute_inline(writeback)
        _vectorize_over_reduction(sch, tile_output, facts.lanes())
    else:
        for consumer in _epilogue(sch, writeback):
            if not _try(sch.reverse_compute_inline, consumer):
                sch.reverse_compute_at(consumer, ro, preserve_unit_loops=True)
    scheduled = [sch.get(b) for b in (block, tile_output) if b is not None]
    for b in _blocks_under(sch, ro):
        if not any(sch.get(b).same_as(s) for s in scheduled):
            vectorize_innermost(sch, b, facts.lanes())
    tile_input = _tile_input(sch, block, axes)
    if tile_input is not None and vecs // (m * lanes) >= PARALLEL_CHUNKS:
        # Each vec tile pads its own input window just before its row tiles read it, while it
        # is in cache, instead of a pass of its own over the whole input; the threads then
        # split the vec tiles alone, which needs many of them (docs/cpu-speed.md, CPU peak).
        sch.compute_at(tile_input, vo, preserve_unit_loops=True)
        vectorize_innermost(sch, tile_input, facts.lanes())
        sch.parallel(sch.fuse(*others, vo))
    else:
        sch.parallel(sch.fuse(*others, vo, ro))
    sch.unroll(ri)
    sch.unroll(vm)
    if lanes > 1 and not dot:
        sch.vectorize(vi)
    if reduce:  # the init block's loops copy the unroll and vectorize annotations
        init = sch.decompose_reduction(block, reduce[0])
        if dot:
            sch.vectorize(sch.get_loops(init)[-1])
    if dot:
        sch.tensorize(vi, axes["dot"])
    if tile_output is not None:
        sch.decompose_reduction(tile_output, sch.get_loops(tile_output)[-2])


def _named(sch: s_tir.Schedule, blocks, name: str | None):
    """The block of ``blocks`` called ``name``, if any."""
    return next((b for b in blocks if sch.get(b).name_hint == name), None)


def _tile_input(sch: s_tir.Schedule, block, axes: dict):
    """The producer of ``block`` that its annotation names as ``tile_input``, if any."""
    return _named(sch, sch.get_producers(block), axes.get("tile_input"))


def _vectorize_over_reduction(sch: s_tir.Schedule, block, lanes: int) -> None:
    """A per-tile reduction (Winograd's output transform): its reduction moved inside the
    spatial loops but the last, which is vectorized, so each vector accumulates in a register;
    the short reduction is unrolled."""
    *_, last, reduction = sch.get_loops(block)
    outer, inner = sch.split(last, [None, lanes])
    sch.reorder(outer, reduction, inner)
    sch.unroll(reduction)
    sch.vectorize(inner)


def _epilogue(sch: s_tir.Schedule, block) -> list:
    """Blocks after ``block`` at the root, in order (the fused elementwise tail)."""
    children = root_blocks(sch)
    names = [sch.get(b).name_hint for b in children]
    index = names.index(sch.get(block).name_hint)
    return list(children[index + 1:])


def _blocks_under(sch: s_tir.Schedule, loop) -> list:
    return list(sch.get_child_blocks(loop))


def apply_contraction(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """The schedule for a function holding an annotated contraction, or None."""
    sch = s_tir.Schedule(func)
    found = find_contraction(sch)
    if found is None:
        return None
    block, axes = found
    facts = cpu_facts(target)
    name = sch.get(block).name_hint
    schedule_contraction(sch, block, axes, facts)
    # The side blocks left at the root (padding, weight regrouping, interleave); tensorizing
    # replaced the contraction by the block ``blockize`` names "{name}_o".
    schedule_root_blocks(sch, facts, skip=[name, f"{name}_o"])
    return sch
