"""Row statistics computed inside the row loop of the function's output: the masked InstanceNorm
of compile/instance_norm.py and the softmax of schedules/softmax.py, with the elementwise ops
FuseOps appends to them (AdaIN's affine, Snake or LeakyReLU, masks) inlined into the output
block.

A legalization marks the blocks that work on one row (all axes but the last) with
``ROW_STATISTIC``: reductions over the row (``row_reduction``: ``PARTIALS`` interleaved partial
results, then a scalar tail), values per row (``PER_ROW``) and whole rows of an intermediate
(``ROW_VALUES``). The output's leading loops are fused into one parallel row loop and its
innermost loop vectorised; every marked block moves into the row loop, so a row's statistics
and its output are computed while the row is in cache: the input is read from memory once
instead of once per pass. A partials block gets its lanes vectorised inside the reduction (the
accumulators are one row's ``PARTIALS`` values) and its initialisation hoisted out; a row of
values is vectorised along the row. Blocks not per row (the count of valid positions) stay at
the root with the elementwise schedule.
"""
from __future__ import annotations

from typing import Callable

from tvm import s_tir, te, tirx
from tvm.target import Target

from kokoro_tvm.compile.schedules.common import root_blocks
from kokoro_tvm.compile.schedules.contraction import vectorize_inner
from kokoro_tvm.compile.schedules.cpu import cpu_facts
from kokoro_tvm.compile.schedules.elementwise import (
    inline_spatial,
    schedule_root_blocks,
)

# Block annotation: the block works on one row; its value says which kind.
ROW_STATISTIC = "kokoro_tvm.row_statistic"
LANE_PARTIALS, PER_ROW, ROW_VALUES = "lane_partials", "per_row", "row_values"
# Interleaved partial results per row: a whole number of vectors of float64 for every SIMD width
# up to 1024 bits.
PARTIALS = 16
# Combining two partial results of each reduction.
_REDUCERS = {"sum": (te.sum, lambda a, b: a + b), "max": (te.max, tirx.max)}


def row_block(kind: str) -> dict[str, str]:
    """The TE ``attrs`` that mark a block as a row statistic of ``kind``."""
    return {ROW_STATISTIC: kind}


def row_reduction(value: Callable, rows: tuple[int, ...], length: int, name: str,
                  reducer: str = "sum") -> te.Tensor:
    """``reducer`` ("sum" or "max") over l < length of ``value(*row, l)`` per row: PARTIALS
    interleaved partial results, the tail that does not fill them, then their combination. The
    dtype is ``value``'s."""
    reduce, combine = _REDUCERS[reducer]
    partials = PARTIALS if length >= PARTIALS else 1
    steps, tail = divmod(length, partials)
    k = te.reduce_axis((0, steps), f"{name}_k")
    partial = te.compute((*rows, partials),
                         lambda *i: reduce(value(*i[:-1], k * partials + i[-1]), axis=k),
                         name=f"{name}_partial", attrs=row_block(LANE_PARTIALS))
    j = te.reduce_axis((0, partials), f"{name}_j")
    total = te.compute(rows, lambda *r: reduce(partial(*r, j), axis=j),
                       name=f"{name}_total", attrs=row_block(PER_ROW))
    if not tail:
        return total
    t = te.reduce_axis((0, tail), f"{name}_t")
    rest = te.compute(rows, lambda *r: reduce(value(*r, steps * partials + t), axis=t),
                      name=f"{name}_tail", attrs=row_block(PER_ROW))
    return te.compute(rows, lambda *r: combine(total(*r), rest(*r)), name=f"{name}_{reducer}",
                      attrs=row_block(PER_ROW))


def _kind(sch: s_tir.Schedule, block) -> str | None:
    annotations = sch.get(block).annotations
    return str(annotations[ROW_STATISTIC]) if ROW_STATISTIC in annotations else None


def _vectorize_partials(sch: s_tir.Schedule, block) -> None:
    """(lanes, steps) -> (steps, lanes) with the lanes vectorised, then the zero initialisation
    before the steps (vectorised too: decomposing copies the loop's annotation)."""
    lanes, steps = sch.get_loops(block)[-2:]
    sch.reorder(steps, lanes)
    sch.vectorize(lanes)
    sch.decompose_reduction(block, steps)


def apply_row_statistics(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """The schedule for a function with row-statistic blocks, or None."""
    sch = s_tir.Schedule(func)
    blocks = root_blocks(sch)
    marked = [b for b in blocks if _kind(sch, b) is not None]
    if not marked:
        return None
    facts = cpu_facts(target)
    output = blocks[-1]
    for block in blocks[:-1]:
        if _kind(sch, block) is None:
            inline_spatial(sch, block)
    *row_loops, _ = sch.get_loops(output)
    row = sch.fuse(*row_loops)
    sch.parallel(row)  # before any reduction is decomposed under it
    vectorize_inner(sch, output, facts.lanes())
    for block in reversed(marked):
        sch.compute_at(block, row, preserve_unit_loops=True)
        if _kind(sch, block) == LANE_PARTIALS:
            _vectorize_partials(sch, block)
        elif _kind(sch, block) == ROW_VALUES:
            vectorize_inner(sch, block, facts.lanes())
    schedule_root_blocks(sch, facts, skip=[output, *marked])
    return sch
