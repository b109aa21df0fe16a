"""conv1d and conv_transpose1d on CUDA: our contraction computes, one shared-memory GPU schedule.

dlight's Matmul rule takes TVM's own conv1d by re-indexing it into a matrix product whose
reduction axis (input channel x tap) is innermost in every tile it stages, so the input tile is
read across channels (a cache line per element) instead of along time; conv_transpose1d, which
TVM lowers by zero-stuffing the input, costs ``stride`` times the arithmetic. Here:

- the legalizations are the CPU ones (``schedules/conv1d.py``, polyphase
  ``schedules/conv_transpose.py``); conv1d pads time to a whole number of tiles, because a
  tail predicate inside the contraction's loop costs up to 5x on an H100 (docs/gpu.md),
  and its crop, with the epilogue (bias, residual, activation fused by FuseOps) inlined into
  it, is each thread's write-back of its accumulators. conv_transpose1d's phases are not padded
  (its interleave cannot be split per thread; at Kokoro's lengths they are whole tiles);
- the schedule tiles output channels x time per thread block (``Tile``), stages the
  weight tile ``[rows, channels, taps]`` and the input tile ``[channels, time span]`` in shared
  memory per step of input channels, reads the input tile along time (coalesced), and keeps
  each thread's accumulators in registers; the padding and any fused producer are computed
  while staging.
"""
from __future__ import annotations

import dataclasses
import math

import tvm
from tvm import s_tir
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.gpu.matmul import (
    auto_inline_consumer_chain,
    auto_inline_producers,
)

from kokoro_tvm.compile.devices import GPU_KINDS
from kokoro_tvm.compile.schedules.common import divisor_at_most, root_blocks
from kokoro_tvm.compile.schedules.contraction import find_contraction
from kokoro_tvm.compile.schedules.conv1d import conv1d_legalization
from kokoro_tvm.compile.schedules.conv_transpose import conv1d_transpose_legalization


@dataclasses.dataclass(frozen=True)
class Tile:
    """A thread block's share: ``thread_rows * row_micro`` output rows by ``vthreads *
    thread_cols * col_micro`` time steps, ``channels`` input channels staged per step."""
    thread_rows: int = 8
    thread_cols: int = 32
    row_micro: int = 8
    col_micro: int = 4
    vthreads: int = 1
    channels: int = 8
    unroll: int = 256

    @property
    def cols(self) -> int:
        return self.vthreads * self.thread_cols * self.col_micro


DEFAULT_TILE = Tile()
# WebGPU's unrolls 8 steps: a browser compiles every kernel when a page loads, and Chromium's
# CPU WebGPU (SwiftShader) did not finish the output convolution unrolled to 256
# (docs/browser.md, The decoder).
WEBGPU_TILE = dataclasses.replace(DEFAULT_TILE, unroll=8)
TILES = {"webgpu": WEBGPU_TILE}
SHARED_BYTES = 40 * 1024  # of CUDA's 48 KiB a thread block may use without opting in


def _whole_tiles(rows: int, out_len: int) -> int:
    return DEFAULT_TILE.cols


def _unpadded(rows: int, out_len: int) -> int:
    return 1


LEGALIZATIONS = {
    "relax.nn.conv1d": conv1d_legalization(_whole_tiles),
    "relax.nn.conv1d_transpose": conv1d_transpose_legalization(_unpadded),
}


def schedule_contraction(func: tvm.tirx.PrimFunc, shared_bytes: int = SHARED_BYTES,
                         tile: Tile = DEFAULT_TILE) -> s_tir.Schedule | None:
    """The GPU schedule (``tile``, whose columns the legalization pads to) of a function holding
    one of our contractions, or None if it holds none or something else this schedule cannot
    place (a reduction besides the contraction). Input channels per step are the most, up to
    the tile's, whose staged tiles fit ``shared_bytes``; where none does (Metal's 32 KiB), the
    tile's rows per thread are halved until they fit (the legalization's padding is of time, so
    it stays whole)."""
    sch = s_tir.Schedule(func)
    found = find_contraction(sch)
    if found is None:
        return None
    block, _ = found
    iters = sch.get(block).iter_vars
    if sum(iv.iter_type != iv.DataPar for iv in iters) != 2:
        return None
    group = int(iters[-2].dom.extent)
    fits = None
    for row_micro in (tile.row_micro, 4, 2, 1):
        tried = dataclasses.replace(tile, row_micro=min(row_micro, tile.row_micro))
        for channels in sorted((d for d in range(1, min(group, tried.channels) + 1)
                                if group % d == 0), reverse=True):
            sch, staged = _schedule(func, tried, channels)
            if 4 * staged <= shared_bytes:
                fits = sch
                break
        if fits is not None:
            break
    sch = fits or sch
    if any(not _thread_bound(sch, b) for b in root_blocks(sch)):
        return None
    return sch


def _schedule(func: tvm.tirx.PrimFunc, tile: Tile, channels: int
              ) -> tuple[s_tir.Schedule, int]:
    """The schedule with ``channels`` input channels per step, and the float32 elements it
    stages in shared memory."""
    sch = s_tir.Schedule(func)
    block, axes = find_contraction(sch)
    loops = sch.get_loops(block)
    iters = sch.get(block).iter_vars
    spatial = [lp for lp, iv in zip(loops, iters) if iv.iter_type == iv.DataPar]
    channel, tap = [lp for lp, iv in zip(loops, iters) if iv.iter_type != iv.DataPar]
    row, vec = spatial[axes["row"]], spatial[axes["vec"]]
    outer = [lp for lp in spatial if lp not in (row, vec)]
    rows = int(sch.get(row).extent)
    # Row tiles divide the rows, so that the weight tile never runs past the weight.
    row_micro = divisor_at_most(rows, tile.row_micro)
    thread_rows = divisor_at_most(rows // row_micro, tile.thread_rows)

    row_o, ty, ri = sch.split(row, [None, thread_rows, row_micro])
    vec_o, vx, tx, vi = sch.split(vec, [None, tile.vthreads, tile.thread_cols, tile.col_micro])
    ko, ki = sch.split(channel, [None, channels])
    sch.reorder(*outer, row_o, vec_o, vx, ty, tx, ko, ki, tap, ri, vi)
    sch.bind(sch.fuse(*outer, row_o), "blockIdx.y")
    sch.bind(vec_o, "blockIdx.x")
    sch.bind(vx, "vthread.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.annotate(tx, ann_key="pragma_auto_unroll_max_step", ann_val=tile.unroll)
    sch.annotate(tx, ann_key="pragma_unroll_explicit", ann_val=1)

    consumers = sch.get_consumers(block)
    if len(consumers) == 1 and sch.get(consumers[0]).name_hint == "crop":
        # The padded contraction stays in registers; the crop writes what is inside.
        sch.set_scope(block, 0, "local")
        write_back = consumers[0]
    else:
        write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, tx, preserve_unit_loops=True)
    staged_elements = 0
    for operand in (0, 1):
        staged = sch.cache_read(block, operand, "shared")
        sch.compute_at(staged, ko, preserve_unit_loops=True)
        ndim = len(sch.get(staged).iter_vars)
        region = sch.get_loops(staged)[-ndim:]
        staged_elements += math.prod(int(sch.get(lp).extent) for lp in region)
        fetch = sch.fuse(*region)
        _, fty, ftx = sch.split(fetch, [None, thread_rows, tile.thread_cols])
        sch.bind(fty, "threadIdx.y")
        sch.bind(ftx, "threadIdx.x")
        auto_inline_producers(sch, staged)
    auto_inline_consumer_chain(sch, write_back)
    sch.decompose_reduction(block, ko)
    return sch, staged_elements


def _thread_bound(sch: s_tir.Schedule, block) -> bool:
    return any(sch.get(lp).thread_binding is not None for lp in sch.get_loops(block))


class Contraction(dl.ScheduleRule):
    """dlight rule: ``schedule_contraction`` for GPU functions holding our contraction."""

    def apply(self, func, target, _tunable):
        if not isinstance(func, tvm.tirx.PrimFunc) or target.kind.name not in GPU_KINDS:
            return None
        # Metal's threadgroup memory is 32 KiB (TVM's target says so).
        limit = int(target.attrs.get("max_shared_memory_per_block", SHARED_BYTES))
        return schedule_contraction(func, min(SHARED_BYTES, limit),
                                    TILES.get(target.kind.name, DEFAULT_TILE))
