"""What our graphs compute in float64, for GPUs that have none (Metal).

The sine generator's phase is a cumulative sum summed in float64 (model/patches.py: float32 sums
put ten times PyTorch's phase error into the source at 768 frames). Without float64 it is summed
in fixed point instead: each float32 increment (a fraction of a turn, below 2) times 2^40,
rounded to an int64, summed exactly, and the sum turned back into float32 with one rounding, as
PyTorch's float64 sum is. Each increment is off by at most 2^-41 turns, the sum of 4,096 (the
longest bucket's) by at most 2^-29: far below float32's rounding of the phase itself. The other
float64 computations have float32 forms chosen where they are made: sin and cos
(schedules/math.py, WITHOUT_FLOAT64) and the InstanceNorm's sums (gpu/instance_norm.py).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

FIXED_POINT_BITS = 40


def _fixed_point_cumsum(x: relax.Expr, axis) -> relax.Expr:
    scale = relax.const(float(2 ** FIXED_POINT_BITS), "float32")
    steps = relax.op.astype(relax.op.round(relax.op.multiply(x, scale)), "int64")
    sums = relax.op.cumsum(steps, axis=axis)
    return relax.op.multiply(relax.op.astype(sums, "float32"),
                             relax.const(2.0 ** -FIXED_POINT_BITS, "float32"))


@tvm.transform.module_pass(opt_level=0, name="FixedPointCumsum")
def fixed_point_cumsum(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Every float32 -> float64 cumsum -> float32 of ``mod``'s Relax functions summed in fixed
    point."""
    increments = wildcard()
    widened = is_op("relax.astype")(increments)
    summed = is_op("relax.cumsum")(widened)
    pattern = is_op("relax.astype")(summed)

    def rewrite(call: relax.Call, matches) -> relax.Expr:
        x, cumsum = matches[increments], matches[summed]
        if (x.ty.dtype != "float32" or matches[widened].ty.dtype != "float64"
                or call.ty.dtype != "float32" or cumsum.attrs.exclusive):
            return call
        return _fixed_point_cumsum(x, cumsum.attrs.axis)

    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            mod[gvar] = rewrite_call(pattern, rewrite, func)
    return mod
