"""The masked InstanceNorm on CUDA: a form dlight's GeneralReduction schedules, at lowering.

The imported kernel (compile/instance_norm.py) sums each row in interleaved partial sums that
CPU schedules turn into vector lanes; on a GPU no rule takes that structure, and dlight's
Fallback ran each partial sum as one serial thread: the decoder's 21 AdaINs at 2048 frames
spent most of its time there. This form sums each row plainly (float64, as on the CPU), with
the valid count per row, so that GeneralReduction gives each row one thread block whose threads
share every sum (a cross-thread reduction), then normalise the row and apply the epilogue
FuseOps fuses after it (AdaIN's affine, Snake) in the same kernel.
"""
from __future__ import annotations

import tvm
from tvm import s_tir, te
from tvm.s_tir import dlight as dl

from kokoro_tvm.compile.devices import GPU_KINDS
from kokoro_tvm.compile.instance_norm import EPS_ATTR
from kokoro_tvm.compile.schedules.common import root_blocks

# Block annotation of the GPU form's blocks (kept through FuseTIR), so that its rule finds them.
NORM_BLOCK = "kokoro_tvm.gpu_instance_norm"
# dlight unrolls up to 256 iterations explicitly: every row loop of a short bucket became
# straight-line code (the decoder's library grew from 6 to 30 MB).
UNROLL = 8


def masked_instance_norm_gpu(x: te.Tensor, valid: te.Tensor, eps: float,
                             accumulator: str = "float64") -> te.Tensor:
    """compile/instance_norm.py's ``masked_instance_norm``, each statistic a plain row sum in
    ``accumulator`` (float32 where the device has no float64: a cross-thread tree sum of a
    row's at most 8,192 values, the variance of the centred values)."""
    batch, channels, length = (int(d) for d in x.shape)
    rows = (batch, channels)

    def row_sum(value, name: str) -> te.Tensor:
        k = te.reduce_axis((0, length), f"{name}_k")
        return te.compute(rows, lambda b, c: te.sum(value(b, c, k), axis=k), name=name,
                          attrs={NORM_BLOCK: 1})

    count = row_sum(lambda b, c, i: valid[b, 0, i].astype(accumulator), "count")
    total = row_sum(lambda b, c, i: (x[b, c, i] * valid[b, 0, i]).astype(accumulator), "total")

    def squared(b, c, i):
        centred = ((x[b, c, i].astype(accumulator) - total[b, c] / count[b, c])
                   * valid[b, 0, i].astype(accumulator))
        return centred * centred

    squares = row_sum(squared, "squares")
    return te.compute(
        x.shape, lambda b, c, i: (x[b, c, i] - (total[b, c] / count[b, c]).astype(x.dtype))
        * (1.0 / te.sqrt(squares[b, c] / count[b, c] + eps)).astype(x.dtype),
        name="normalised", attrs={NORM_BLOCK: 1})


def _gpu_form(func: tvm.tirx.PrimFunc, accumulator: str) -> tvm.tirx.PrimFunc:
    x, valid, out = (p.ty for p in func.params)  # buffer types carry shape and dtype
    # The imported kernel's own shapes (int64 extents), so that the call sites match.
    x_t = te.placeholder(list(x.shape), x.dtype, "x")
    valid_t = te.placeholder(list(valid.shape), valid.dtype, "valid")
    result = masked_instance_norm_gpu(x_t, valid_t, float(func.attrs[EPS_ATTR]), accumulator)
    if [int(d) for d in out.shape] != [int(d) for d in result.shape]:
        raise ValueError("masked InstanceNorm kernel with an unexpected output shape")
    return te.create_prim_func([x_t, valid_t, result]).without_attr("global_symbol").with_attrs(
        {"tirx.noalias": True, EPS_ATTR: func.attrs[EPS_ATTR]})


def gpu_instance_norm(accumulator: str = "float64") -> tvm.transform.Pass:
    """Every masked InstanceNorm kernel of a module replaced by its GPU form, summing in
    ``accumulator``."""
    @tvm.transform.module_pass(opt_level=0, name="GpuInstanceNorm")
    def replace(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gvar, func in list(mod.functions_items()):
            if isinstance(func, tvm.tirx.PrimFunc) and func.attrs and EPS_ATTR in func.attrs:
                mod[gvar] = _gpu_form(func, accumulator)
        return mod

    return replace


class RowNorm(dl.ScheduleRule):
    """dlight's GeneralReduction for the functions holding the GPU form (a thread block per
    row), unrolling at most ``UNROLL`` iterations."""

    def apply(self, func, target, tunable):
        if not isinstance(func, tvm.tirx.PrimFunc) or target.kind.name not in GPU_KINDS:
            return None
        unscheduled = s_tir.Schedule(func)
        if not any(NORM_BLOCK in unscheduled.get(b).annotations for b in root_blocks(unscheduled)):
            return None
        sch = dl.gpu.GeneralReduction().apply(func, target, tunable)
        if sch is None:
            return None
        for block in root_blocks(sch):
            for loop in sch.get_loops(block):
                if "pragma_auto_unroll_max_step" in sch.get(loop).annotations:
                    sch.unannotate(loop, "pragma_auto_unroll_max_step")
                    sch.annotate(loop, "pragma_auto_unroll_max_step", UNROLL)
        return sch
