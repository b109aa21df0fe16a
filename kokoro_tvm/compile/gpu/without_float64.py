"""What our graphs compute in float64, for GPUs that have none (Metal, WebGPU).

The sine generator's phase is a cumulative sum summed in float64 (model/patches.py: float32 sums
put ten times PyTorch's phase error into the source at 768 frames). Without float64 it is summed
in fixed point instead, in int32 alone (WGSL has no 64-bit integers): each float32 increment (a
fraction of a turn, below 2) is split exactly into its multiples of 2^-17 and the rest, rounded
to multiples of 2^-35; both parts are summed exactly in int32, the second's carries moved into
the first, and the sum turned back into float32 as PyTorch's float64 sum is, within one
rounding. Each increment is off by at most 2^-36 turns, the sum of 4,096 (the longest bucket's)
by at most 2^-24; int32 holds the sums of up to ``MAX_STEPS`` increments. The other float64
computations have float32 forms chosen where they are made: sin and cos (schedules/math.py,
WITHOUT_FLOAT64) and the InstanceNorm's sums (gpu/instance_norm.py).
"""
from __future__ import annotations

import tvm
from tvm import relax, te
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from kokoro_tvm.compile.branch_joins import OPAQUE

WHOLE_BITS = 17  # the first part: multiples of 2^-17 turns (increments below 2: under 2^18)
REST_BITS = 18  # the rest, below 2^-17, in multiples of 2^-35
# Increments whose parts' sums stay inside int32 (each part under 2^18).
MAX_STEPS = 2 ** (31 - 18)


def _combine(shape) -> tvm.tirx.PrimFunc:
    """The phase from the summed parts (int32 wholes of 2^-17 and rests of 2^-35): a kernel
    of its own, kept out of fusion. Fused into its consumer (the upsampling's neighbour
    selection, then sin), every branch repeated this expression: megabytes of WGSL."""
    wholes = te.placeholder(shape, "int32", "wholes")
    rests = te.placeholder(shape, "int32", "rests")

    def phase(*i):
        carried = wholes(*i) + tvm.tirx.shift_right(rests(*i), REST_BITS)
        remainder = rests(*i) & (2 ** REST_BITS - 1)
        return (carried.astype("float32") * tvm.tirx.const(2.0 ** -WHOLE_BITS, "float32")
                + remainder.astype("float32")
                * tvm.tirx.const(2.0 ** -(WHOLE_BITS + REST_BITS), "float32"))

    out = te.compute(shape, phase, "phase")
    return (te.create_prim_func([wholes, rests, out]).without_attr("global_symbol")
            .with_attr("op_pattern", OPAQUE))


def _fixed_point_cumsum(x: relax.Expr, axis, combine: tvm.ir.GlobalVar) -> relax.Expr:
    op, const = relax.op, relax.const
    scaled = op.multiply(x, const(float(2 ** WHOLE_BITS), "float32"))
    whole = op.floor(scaled)
    rest = op.astype(op.round(op.multiply(op.subtract(scaled, whole),
                                          const(float(2 ** REST_BITS), "float32"))), "int32")
    wholes = op.cumsum(op.astype(whole, "int32"), axis=axis, dtype="int32")
    rests = op.cumsum(rest, axis=axis, dtype="int32")
    return relax.call_tir(combine, [wholes, rests], relax.TensorType(x.ty.shape, "float32"))


@tvm.transform.module_pass(opt_level=0, name="FixedPointCumsum")
def fixed_point_cumsum(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Every float32 -> float64 cumsum -> float32 of ``mod``'s Relax functions summed in fixed
    point."""
    increments = wildcard()
    widened = is_op("relax.astype")(increments)
    summed = is_op("relax.cumsum")(widened)
    pattern = is_op("relax.astype")(summed)
    builder = relax.BlockBuilder(mod)  # adds the combining kernels, typed for call_tir
    combines: dict[tuple, tvm.ir.GlobalVar] = {}

    def rewrite(call: relax.Call, matches) -> relax.Expr:
        x, cumsum = matches[increments], matches[summed]
        if (x.ty.dtype != "float32" or matches[widened].ty.dtype != "float64"
                or call.ty.dtype != "float32" or cumsum.attrs.exclusive):
            return call
        if int(x.ty.shape[int(cumsum.attrs.axis)]) > MAX_STEPS:
            raise ValueError(f"the fixed-point phase sum holds at most {MAX_STEPS} steps, "
                             f"not {x.ty.shape[int(cumsum.attrs.axis)]}: use smaller buckets")
        shape = tuple(int(n) for n in x.ty.shape)
        if shape not in combines:
            combines[shape] = builder.add_func(_combine(shape), "fixed_point_phase")
        return _fixed_point_cumsum(x, cumsum.attrs.axis, combines[shape])

    rewritten = {gvar: rewrite_call(pattern, rewrite, func)
                 for gvar, func in mod.functions_items() if isinstance(func, relax.Function)}
    mod = builder.get()
    for gvar, func in rewritten.items():
        mod[mod.get_global_var(gvar.name_hint)] = func
    return mod
