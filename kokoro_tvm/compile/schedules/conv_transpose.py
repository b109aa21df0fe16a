"""conv1d_transpose (NCW, IOW, any stride, padding, output padding, groups; dilation 1)
lowered polyphase, without zero-stuffing.

TVM's own legalization dilates the input with stride-1 zeros and runs a dense conv over it:
``stride`` times the arithmetic. Here output sample ``o = q * stride + r`` only receives taps
``k = (r + pad_left) % stride + j * stride``, from input ``q + (r + pad_left) // stride - j``.
So each phase ``r`` is a small conv with ``J = ceil(K / stride)`` taps:

    y[n, c, r, q] = sum_{i, j} xpad[n, group(c) + i, q + shift(r) + J - 1 - j] * wpoly[r, c, i, j]
    out[n, c, o]  = y[n, c, o % stride, o // stride]

``wpoly`` regroups the weight by phase (zeros where a tap falls outside the kernel), in its own
kernel: it reads only the weight, so the lower stage lifts it into the library's weight
transform and it runs once per library, not per call. ``y`` is the contraction (rows: output
channels, vec: q, padded to whole tiles); the interleave is a separate pass.
"""
from __future__ import annotations

from tvm import relax, te, tirx

from kokoro_tvm.compile.schedules.common import ceil_div, round_up, tvm_legalization
from kokoro_tvm.compile.schedules.contraction import annotation
from kokoro_tvm.compile.schedules.conv1d import (
    TimeMultiple,
    cpu_time_multiple,
    static_float32_ncw,
)


def transposed_length(length: int, kernel: int, stride: int, padding: tuple[int, int],
                  output_padding: int) -> int:
    return (length - 1) * stride - padding[0] - padding[1] + kernel + output_padding


def phase_weights(w: te.Tensor, stride: int, left: int, groups: int) -> te.Tensor:
    """``wpoly[r, c, i, j]``: the IOW weight regrouped by output phase ``r``."""
    c_in, c_group_out, kernel = (int(d) for d in w.shape)
    c_out, c_group_in = c_group_out * groups, c_in // groups
    taps = ceil_div(kernel, stride)
    return te.compute(
        (stride, c_out, c_group_in, taps),
        lambda r, c, i, j: tirx.if_then_else(
            (r + left) % stride + j * stride < kernel,
            w[(c // c_group_out) * c_group_in + i, c % c_group_out,
              tirx.min((r + left) % stride + j * stride, kernel - 1)], tirx.const(0, w.dtype)),
        name="wpoly")


def conv1d_transpose_compute(x: te.Tensor, wpoly: te.Tensor, kernel: int,
                             padding: tuple[int, int], output_padding: int, groups: int,
                             multiple: int) -> te.Tensor:
    n, c_in, length = (int(d) for d in x.shape)
    stride, c_out, c_group_in, taps = (int(d) for d in wpoly.shape)
    c_group_out = c_out // groups
    out_len = transposed_length(length, kernel, stride, padding, output_padding)
    left = padding[0]
    padded = round_up(ceil_div(out_len, stride), multiple)
    max_shift = (stride - 1 + left) // stride
    zero = tirx.const(0, x.dtype)
    xpad = te.compute(
        (n, c_in, padded + taps - 1 + max_shift),
        lambda b, c, t: tirx.if_then_else(tirx.all(t >= taps - 1, t < taps - 1 + length),
                                          x[b, c, t - (taps - 1)], zero),
        name="xpad")
    ri = te.reduce_axis((0, c_group_in), "ri")
    rj = te.reduce_axis((0, taps), "rj")
    y = te.compute(
        (n, c_out, stride, padded),
        lambda b, c, r, q: te.sum(
            xpad[b, (c // c_group_out) * c_group_in + ri,
                 q + (r + left) // stride + (taps - 1) - rj]
            * wpoly[r, c, ri, rj], axis=[ri, rj]),
        name="conv1d_transpose_poly", attrs=annotation(row_axis=1, vec_axis=3))
    return te.compute((n, c_out, out_len), lambda b, c, o: y[b, c, o % stride, o // stride],
                      name="interleave")


def conv1d_transpose_legalization(time_multiple: TimeMultiple):
    """A relax.nn.conv1d_transpose legalization, polyphase, each phase's time padded to
    ``time_multiple``'s multiple (TVM's own legalization where unsupported)."""
    def legalize_conv1d_transpose(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        attrs = call.attrs
        x, w = call.args
        supported = (static_float32_ncw(call, kernel_layout="IOW")
                     and int(attrs.dilation[0]) == 1)
        if not supported:
            return tvm_legalization(bb, call)
        stride, groups = int(attrs.strides[0]), int(attrs.groups)
        padding = (int(attrs.padding[0]), int(attrs.padding[1]))
        output_padding = int(attrs.output_padding[0])
        kernel = int(w.ty.shape[2])
        out_len = transposed_length(int(x.ty.shape[2]), kernel, stride, padding, output_padding)
        wpoly = bb.emit(bb.call_te(phase_weights, w, stride, padding[0], groups,
                                   primfunc_name_hint="phase_weights"))
        return bb.call_te(conv1d_transpose_compute, x, wpoly, kernel, padding, output_padding,
                          groups, time_multiple(int(w.ty.shape[1]) * groups,
                                                ceil_div(out_len, stride)),
                          primfunc_name_hint="conv1d_transpose")

    return legalize_conv1d_transpose


legalize_conv1d_transpose = conv1d_transpose_legalization(cpu_time_multiple)
