"""Row statistics computed inside the row loop of the function's output: the masked InstanceNorm
of compile/instance_norm.py and the softmax of schedules/softmax.py, with the elementwise ops
FuseOps appends to them (AdaIN's affine, Snake or LeakyReLU, masks) inlined into the output
block.

Legalizations mark the blocks that work on one row (compile/row_reduction.py). The output's
leading loops are fused into one parallel row loop and its innermost loop vectorised; every
marked block moves into the row loop, so a row's statistics and its output are computed while
the row is in cache: the input is read from memory once instead of once per pass. A partials
block gets its lanes vectorised inside the reduction (the accumulators are one row's
``PARTIALS`` values) and its initialisation hoisted out; a row of values is vectorised along
the row. Blocks not per row (the count of valid positions) stay at the root with the
elementwise schedule.
"""
from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from kokoro_tvm.compile.row_reduction import LANE_PARTIALS, ROW_STATISTIC, ROW_VALUES
from kokoro_tvm.compile.schedules.common import root_blocks, vectorize_innermost
from kokoro_tvm.compile.schedules.cpu import cpu_facts
from kokoro_tvm.compile.schedules.elementwise import (
    inline_spatial,
    schedule_root_blocks,
)


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
    scheduled = [sch.get(b).name_hint for b in (output, *marked)]
    *row_loops, _ = sch.get_loops(output)
    row = sch.fuse(*row_loops)
    sch.parallel(row)  # before any reduction is decomposed under it
    row_values = [b for b in marked if _kind(sch, b) == ROW_VALUES]
    for block in reversed(marked):
        sch.compute_at(block, row, preserve_unit_loops=True)
        if _kind(sch, block) == LANE_PARTIALS:
            _vectorize_partials(sch, block)
    # Only once every block is in place: a row that is no multiple of the lanes splits a block
    # in two under one whose reads compute_at cannot see, so a producer moved after that would
    # land behind its consumer.
    for block in (*row_values, output):
        vectorize_innermost(sch, block, facts.lanes())
    schedule_root_blocks(sch, facts, skip=scheduled)
    return sch
