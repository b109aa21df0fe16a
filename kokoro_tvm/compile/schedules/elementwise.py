"""Parallel, vectorized loops for everything that is not a contraction: elementwise and
injective kernels (activations, Snake, padding, interleaves, copies) and reductions (norms,
sums), including the side blocks of contraction functions.

Each block at the function's root is scheduled on its own: a spatial block gets its innermost
loop vectorized (split by the vector lanes) and all outer loops fused into one parallel loop; a
reduction block gets its leading spatial loops fused and parallel (the reduction itself stays
serial: each output is one thread's sum). A block that a primitive refuses keeps what was done
so far, which is always a valid schedule.
"""
from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from kokoro_tvm.compile.schedules.common import loop_extent, root_blocks, vectorize_innermost
from kokoro_tvm.compile.schedules.cpu import CpuFacts, cpu_facts

# Below this many iterations a parallel loop costs more than it saves.
MIN_PARALLEL_WORK = 4096
# Outer loops are fused into the parallel loop until it has this many iterations; inner loops
# stay nested (fusing everything costs a division per element to recover the indices). TVM
# hands each thread one contiguous range of a parallel loop, so spare iterations cost nothing
# on 2 threads and keep 8-16 busy: the library does not depend on the building machine's
# cores, and the thread count is the running process's (TVM_NUM_THREADS).
PARALLEL_CHUNKS = 128


def _parallel_outer(sch, loops, extents) -> None:
    count, taken = 1, 0
    for extent in extents:
        if count >= PARALLEL_CHUNKS:
            break
        count *= extent
        taken += 1
    outer = loops[:taken]
    sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])


def _vectorizable(stmt) -> bool:
    """TVM cannot vectorize stores or loads of bool buffers (they are i8 vectors in LLVM)."""
    regions = [*stmt.reads, *stmt.writes]
    return all(str(r.source.dtype) != "bool" for r in regions)


def schedule_block(sch: s_tir.Schedule, block, facts: CpuFacts) -> None:
    """Parallel outer loop and vectorized inner loop for one root block."""
    loops = sch.get_loops(block)
    kinds = [iv.iter_type for iv in sch.get(block).iter_vars]
    if not loops or len(loops) != len(kinds):
        return
    extents = [loop_extent(sch, loop) for loop in loops]
    if any(e is None for e in extents):
        return
    total = 1
    for e in extents:
        total *= e
    if all(k == tirx.IterVar.DataPar for k in kinds):
        lanes = facts.lanes()
        if _vectorizable(sch.get(block)):
            inner = vectorize_innermost(sch, block, lanes)
            loops, extents = loops[:-1], extents[:-1]
            if inner is not None:
                loops, extents = [*loops, inner], [*extents, loop_extent(sch, inner)]
        if total >= MIN_PARALLEL_WORK and loops:
            _parallel_outer(sch, loops, extents)
        return
    leading = []
    for loop, kind in zip(loops, kinds):
        if kind != tirx.IterVar.DataPar:
            break
        leading.append(loop)
    if leading and total >= MIN_PARALLEL_WORK:
        _parallel_outer(sch, leading, extents[:len(leading)])


def schedule_root_blocks(sch: s_tir.Schedule, facts: CpuFacts, skip=()) -> None:
    """``schedule_block`` for each root block but those in ``skip`` (blocks or names)."""
    skipped = {b if isinstance(b, str) else sch.get(b).name_hint for b in skip}
    for block in root_blocks(sch):
        if sch.get(block).name_hint in skipped:
            continue
        try:
            schedule_block(sch, block, facts)
        except Exception:  # noqa: BLE001 - keep the partial, valid schedule
            continue


def inline_spatial(sch: s_tir.Schedule, block) -> None:
    """Inlines a spatial (elementwise, injective) block into its consumers where TVM can;
    reductions, outputs and blocks that refuse stay passes of their own."""
    if any(iv.iter_type != tirx.IterVar.DataPar for iv in sch.get(block).iter_vars):
        return
    try:
        sch.compute_inline(block)
    except Exception:  # noqa: BLE001 - outputs and multi-consumer blocks stay
        pass


def apply_elementwise(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """Parallel/vectorized loops for a function's root blocks, or None if there are none."""
    sch = s_tir.Schedule(func)
    blocks = root_blocks(sch)
    if not blocks:
        return None
    for block in blocks[:-1]:  # intermediates into their consumers: one pass over memory
        inline_spatial(sch, block)
    schedule_root_blocks(sch, cpu_facts(target))
    return sch
