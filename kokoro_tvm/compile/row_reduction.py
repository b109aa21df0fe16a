"""Reductions over the rows of a tensor (all axes but the last), as TE blocks marked for the
row-statistics schedule (schedules/row_statistics.py), which computes them inside the row loop
of the function's output: the masked InstanceNorm (compile/instance_norm.py) and softmax
(schedules/softmax.py) use them.

A reduction (``row_reduction``) is ``PARTIALS`` interleaved partial results (``LANE_PARTIALS``:
the schedule turns them into vector lanes), then a scalar tail; ``PER_ROW`` marks a value per
row and ``ROW_VALUES`` a whole row of an intermediate. Kept apart from the schedule so that the
import stage, which emits the InstanceNorm, does not depend on the schedules' code.
"""
from __future__ import annotations

from typing import Callable

from tvm import te, tirx

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
