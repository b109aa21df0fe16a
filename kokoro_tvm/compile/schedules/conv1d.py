"""conv1d (NCW, OIW, any stride, dilation, padding and groups) as a padded contraction.

Legalization: the input is zero-padded (``xpad``, also covering the vec tile's overrun), the
contraction ``y[n, f, t] = sum_{c, k} xpad[n, group(f) + c, t*stride + k*dilation] *
w[f, c, k]`` runs over time padded to whole tiles, and ``crop`` trims it to the true length
(FuseOps then fuses bias and activations after the crop). Scheduled by ``contraction``: rows are
output channels, vec is time; ``xpad`` is its ``tile_input``, padded per vec tile where time
has many tiles.
"""
from __future__ import annotations

from typing import Callable

import tvm
from tvm import relax, te, tirx

from kokoro_tvm.compile.schedules.common import round_up, static_shapes, tvm_legalization
from kokoro_tvm.compile.schedules.contraction import annotation, vec_multiple
from kokoro_tvm.compile.schedules.cpu import cpu_facts

# How a legalization pads time: (output rows, output length) -> the multiple it pads to.
TimeMultiple = Callable[[int, int], int]


def output_length(length: int, kernel: int, stride: int, padding: tuple[int, int],
                  dilation: int) -> int:
    return (length + sum(padding) - dilation * (kernel - 1) - 1) // stride + 1


def cpu_time_multiple(rows: int, out_len: int) -> int:
    """The CPU contraction's vec tile for the current target."""
    return vec_multiple(cpu_facts(tvm.target.Target.current(allow_none=False)), rows, out_len)


def conv1d_compute(x: te.Tensor, w: te.Tensor, stride: int, padding: tuple[int, int],
                   dilation: int, groups: int, multiple: int) -> te.Tensor:
    n, c_in, length = (int(d) for d in x.shape)
    c_out, c_group, kernel = (int(d) for d in w.shape)
    left = padding[0]
    out_len = output_length(length, kernel, stride, padding, dilation)
    padded = round_up(out_len, multiple)
    span = (padded - 1) * stride + dilation * (kernel - 1) + 1
    per_group = c_out // groups
    xpad = te.compute(
        (n, c_in, span),
        lambda b, c, t: tirx.if_then_else(tirx.all(t >= left, t < left + length),
                                          x[b, c, t - left], tirx.const(0, x.dtype)),
        name="xpad")
    rc = te.reduce_axis((0, c_group), "rc")
    rk = te.reduce_axis((0, kernel), "rk")
    y = te.compute(
        (n, c_out, padded),
        lambda b, f, t: te.sum(
            xpad[b, (f // per_group) * c_group + rc, t * stride + rk * dilation]
            * w[f, rc, rk], axis=[rc, rk]),
        name="conv1d", attrs=annotation(row_axis=1, vec_axis=2, tile_input="xpad"))
    if padded == out_len:
        return y
    return te.compute((n, c_out, out_len), lambda b, f, t: y[b, f, t], name="crop")


def static_float32_ncw(call: relax.Call, kernel_layout: str) -> bool:
    """Whether a 1-d (transposed) convolution is what our contractions cover: NCW data, the
    given kernel layout, float32 throughout, static shapes."""
    attrs, (x, w) = call.attrs, call.args
    return (attrs.data_layout == "NCW" and attrs.kernel_layout == kernel_layout
            and attrs.out_layout == "NCW" and x.ty.dtype == w.ty.dtype == "float32"
            and str(attrs.out_dtype) in ("", "None", "float32")
            and static_shapes(x, w))


def conv1d_legalization(time_multiple: TimeMultiple):
    """A relax.nn.conv1d legalization into the contraction, time padded to ``time_multiple``'s
    multiple (TVM's own legalization where unsupported)."""
    def legalize_conv1d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        attrs = call.attrs
        x, w = call.args
        if not static_float32_ncw(call, kernel_layout="OIW"):
            return tvm_legalization(bb, call)
        stride, dilation = int(attrs.strides[0]), int(attrs.dilation[0])
        padding = (int(attrs.padding[0]), int(attrs.padding[1]))
        out_len = output_length(int(x.ty.shape[2]), int(w.ty.shape[2]), stride, padding,
                                dilation)
        return bb.call_te(conv1d_compute, x, w, stride, padding, dilation, int(attrs.groups),
                          time_multiple(int(w.ty.shape[0]), out_len),
                          primfunc_name_hint="conv1d")

    return legalize_conv1d


legalize_conv1d = conv1d_legalization(cpu_time_multiple)



