"""conv1d by Winograd's minimal filtering: the generator's convolutions in about half the
multiplications.

F(m, r) computes m outputs of an r-tap correlation from ``alpha = m + r - 1`` products, by
Toom-Cook over ``POINTS`` (and infinity): ``y = at @ ((g @ taps) * (bt @ window))`` for an input
window of alpha samples (``Form``). 3-tap kernels take F(6, 3). Longer ones take F(4, 4) with the
kernel split into ``ceil(K / 4)`` chunks of 4 (zero taps past K): chunk q of output tile T reads
the input window of tile T + q, so one input transform per tile serves every chunk and the
chunks add up inside the contraction, before the output transform. ``FORMS`` lists the kernel
sizes taken and the multiplications each saves.

Dilation d keeps the same tiles on the dilated grid: tile ``T = b * d + p`` computes outputs
``b * m * d + p + d * j`` (j < m), so chunk q's window is tile ``T + q * d``. Stages, in
three calls, so that the two full-length buffers between them are activations in the Relax
memory plan, not workspace inside a kernel, which TVM's per-thread pool keeps at its largest
size for the life of the process (docs/memory.md):

- ``winograd_planes``: ``planes[c, i, T] = xpad[c, (T // d) * m * d + T % d + d * i]`` (i < m),
  zero-padded: a gather pass, after which every window read is contiguous in T;
- ``winograd_products``, one PrimFunc:
  ``input_transform[xi, c, T] = sum_i bt[xi, i] * window_i`` (the contraction's tile input);
  ``winograd_weights``: ``u = g @ chunk`` per point, from the weight alone, computed in each
  call rather than lifted into the library's weight transform: kept, u would hold 1.9-2.7
  times the kernel's memory for the life of the process (docs/cpu-speed.md, Winograd
  convolutions); the contraction ``winograd[xi, f, T] = sum_{c, q} u[xi, f, q, c] *
  input_transform[xi, c, T + q * d]``, the points inside each register tile; and
  ``output_transform[f, j, T] = sum_xi at[j, xi] * winograd[xi, f, T]``, per register tile;
- ``winograd_interleave`` back to time, with FuseOps' epilogue (bias, activation) in the same
  pass.

Where it is used (``covers``): stride 1, no groups, a kernel size in ``FORMS``, at least
``MIN_CHANNELS`` output channels and ``MIN_STEPS`` output steps; the rest keeps the direct
contraction (conv1d.py). Results are within a few 1e-6 of the direct sum relative to
the output's scale.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import tvm
from tvm import relax, te, tirx

from kokoro_tvm.compile.schedules.common import ceil_div, round_up
from kokoro_tvm.compile.schedules.contraction import annotation, register_tile
from kokoro_tvm.compile.schedules.conv1d import legalize_conv1d, output_length, static_float32_ncw
from kokoro_tvm.compile.schedules.cpu import cpu_facts

# Toom-Cook points, the first ``alpha - 1`` of them (and infinity) for F(m, r): small
# magnitudes keep the transforms well conditioned in float32.
POINTS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)
# Below this many output channels the transforms cost more than the products they save.
MIN_CHANNELS = 64
# Below this many output steps the direct contraction is faster, whatever the channels: each
# call's point-weight pass, its transforms and the padding of time to whole vec tiles (on
# AVX-512, 48 tiles of 4 or 6 steps) cost more than the products saved (measured on Zen 4:
# docs/cpu-speed.md, Winograd convolutions).
MIN_STEPS = 1024


@dataclass(frozen=True)
class Form:
    """F(outputs, taps): ``outputs`` results of a ``taps``-tap correlation from ``alpha``
    products, ``y = at @ ((g @ taps) * (bt @ window))``. Longer kernels are split into chunks
    of ``taps``; chunk q then reads the window of tile T + q, which needs ``taps == outputs``."""
    outputs: int
    taps: int

    @property
    def alpha(self) -> int:
        return self.outputs + self.taps - 1

    def _vandermonde(self, columns: int) -> np.ndarray:
        """Rows p**0 .. p**(columns-1) for each point, and infinity's (the leading term)."""
        rows = [[p ** i for i in range(columns)] for p in POINTS[:self.alpha - 1]]
        return np.array([*rows, [0.0] * (columns - 1) + [1.0]])

    @cached_property
    def at(self) -> np.ndarray:  # [outputs, alpha]
        return self._vandermonde(self.outputs).T

    @cached_property
    def g(self) -> np.ndarray:  # [alpha, taps]
        return self._vandermonde(self.taps)

    @cached_property
    def bt(self) -> np.ndarray:  # [alpha, alpha]
        return np.linalg.inv(self._vandermonde(self.alpha)).T

    def chunks(self, kernel: int) -> int:
        return ceil_div(kernel, self.taps)


# Per kernel size: multiplications per output and channel pair, against the kernel's taps.
FORMS = {
    3: Form(6, 3),  # 8/6 = 1.33 against 3
    **{k: Form(4, 4) for k in range(7, 16)},  # 7/4 per chunk: 3.5 for 7 taps, 5.25 for 11
}


def _entry(matrix: np.ndarray, row: tirx.PrimExpr, col: tirx.PrimExpr) -> tirx.PrimExpr:
    """``matrix[row, col]`` for index expressions, as selects over the constants: they fold
    where the schedule unrolls the index, and are loop-invariant in the vectorized loop
    otherwise (a constant table would stop vectorization)."""
    def pick(index, values):
        out = tirx.const(float(values[-1]), "float32")
        for i in range(len(values) - 2, -1, -1):
            out = tirx.Select(index == i, tirx.const(float(values[i]), "float32"), out)
        return out

    if isinstance(col, int):
        return pick(row, matrix[:, col])
    out = pick(row, matrix[:, -1])
    for c in range(matrix.shape[1] - 2, -1, -1):
        out = tirx.Select(col == c, pick(row, matrix[:, c]), out)
    return out


def winograd_weights(w: te.Tensor) -> te.Tensor:
    """``u[xi, f, q, c] = sum_k g[xi, k] * w[f, c, q * taps + k]``, taps past the kernel zero."""
    _, _, kernel = (int(d) for d in w.shape)
    form = FORMS[kernel]

    def tap(f, c, k):
        return tirx.if_then_else(k < kernel, w[f, c, tirx.min(k, kernel - 1)],
                                 tirx.const(0, w.dtype))

    return te.compute(
        (form.alpha, int(w.shape[0]), form.chunks(kernel), int(w.shape[1])),
        lambda xi, f, q, c: sum(_entry(form.g, xi, k) * tap(f, c, q * form.taps + k)
                                for k in range(form.taps)),
        name="winograd_weights")


@dataclass(frozen=True)
class Tiling:
    """How a convolution's time is cut into Winograd tiles (module docstring): ``tiles``
    output tiles on the dilated grid, padded to the contraction's vec multiple, for a kernel of
    ``chunks`` chunks of ``form.taps``."""
    form: Form
    dilation: int
    chunks: int
    tiles: int

    @classmethod
    def of(cls, kernel: int, out_len: int, dilation: int, multiple: int) -> "Tiling":
        form = FORMS[kernel]
        tiles = round_up(ceil_div(out_len, form.outputs * dilation) * dilation, multiple)
        return cls(form, dilation, form.chunks(kernel), tiles)

    @property
    def span(self) -> int:
        """Outputs of ``dilation`` tiles side by side: one stretch of the dilated grid."""
        return self.form.outputs * self.dilation

    @property
    def transformed(self) -> int:
        """Input windows transformed: chunk q of tile T reads window T + q * dilation."""
        return self.tiles + (self.chunks - 1) * self.dilation

    @property
    def reach(self) -> int:
        """Further tiles a window reaches into."""
        return (self.form.alpha - 1) // self.form.outputs


def winograd_planes(x: te.Tensor, tiling: Tiling, left: int) -> te.Tensor:
    """``planes[c, i, T]``: the input sample that window position i of tile T reads, zero
    outside the input (a gather, after which every window read is contiguous in T)."""
    n, c_in, length = (int(d) for d in x.shape)
    m, d = tiling.form.outputs, tiling.dilation

    def plane(b, c, i, t):
        pos = (t // d) * tiling.span + t % d + d * i - left
        return tirx.if_then_else(tirx.all(pos >= 0, pos < length),
                                 x[b, c, tirx.max(tirx.min(pos, length - 1), 0)],
                                 tirx.const(0, x.dtype))

    return te.compute((n, c_in, m, tiling.transformed + tiling.reach * d), plane, name="planes")


def winograd_products(planes: te.Tensor, w: te.Tensor, tiling: Tiling) -> te.Tensor:
    """``output_transform[f, j, T]``: output j of tile T, from each tile's input transform of
    ``planes``, the points' weights, their contraction and the output transform (the input
    transform per vec tile where the tiles are many, the output transform per register tile:
    schedules/contraction.py)."""
    n, c_in, m, _ = (int(d) for d in planes.shape)
    c_out = int(w.shape[0])
    form, d = tiling.form, tiling.dilation
    u = winograd_weights(w)

    def window(b, xi, c, t):
        return sum(_entry(form.bt, xi, i) * planes[b, c, i % m, t + (i // m) * d]
                   for i in range(form.alpha) if np.any(form.bt[:, i]))

    v = te.compute((n, form.alpha, c_in, tiling.transformed), window, name="input_transform")
    rc = te.reduce_axis((0, c_in), "rc")
    rq = te.reduce_axis((0, tiling.chunks), "rq")
    products = te.compute(
        (n, form.alpha, c_out, tiling.tiles),
        lambda b, xi, f, t: te.sum(u[xi, f, rq, rc] * v[b, xi, rc, t + rq * d], axis=[rc, rq]),
        name="winograd", attrs=annotation(row_axis=2, vec_axis=3, points_axis=1,
                                          tile_input="input_transform",
                                          tile_output="output_transform"))
    rp = te.reduce_axis((0, form.alpha), "rp")
    return te.compute((n, c_out, m, tiling.tiles),
                      lambda b, f, j, t: te.sum(_entry(form.at, j, rp) * products[b, rp, f, t],
                                                axis=[rp]),
                      name="output_transform")


def winograd_interleave(z: te.Tensor, tiling: Tiling, out_len: int) -> te.Tensor:
    """The tiles' outputs back in time order (FuseOps adds the epilogue to this pass)."""
    n, c_out, _, _ = (int(d) for d in z.shape)
    span, d = tiling.span, tiling.dilation
    return te.compute((n, c_out, out_len),
                      lambda b, f, o: z[b, f, (o % span) // d, (o // span) * d + o % d],
                      name="interleave")


def _geometry(call: relax.Call) -> tuple[int, tuple[int, int], int, int]:
    """A conv1d call's kernel size, padding, dilation and output length (stride 1)."""
    attrs, x, w = call.attrs, call.args[0], call.args[1]
    kernel, dilation = int(w.ty.shape[2]), int(attrs.dilation[0])
    padding = (int(attrs.padding[0]), int(attrs.padding[1]))
    return kernel, padding, dilation, output_length(int(x.ty.shape[2]), kernel, 1, padding,
                                                    dilation)


def covers(call: relax.Call) -> bool:
    if not static_float32_ncw(call, kernel_layout="OIW"):
        return False
    attrs, w = call.attrs, call.args[1]
    if int(attrs.strides[0]) != 1 or int(attrs.groups) != 1 or int(w.ty.shape[2]) not in FORMS:
        return False
    *_, steps = _geometry(call)
    return int(w.ty.shape[0]) >= MIN_CHANNELS and steps >= MIN_STEPS


def legalize_conv1d_winograd(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """relax.nn.conv1d by Winograd where ``covers`` says so, else the direct contraction."""
    if not covers(call):
        return legalize_conv1d(bb, call)
    x, w = call.args
    kernel, padding, dilation, out_len = _geometry(call)
    facts = cpu_facts(tvm.target.Target.current(allow_none=False))
    vectors = register_tile(facts, int(w.ty.shape[0]),
                            ceil_div(out_len, FORMS[kernel].outputs))[1]
    tiling = Tiling.of(kernel, out_len, dilation, vectors * facts.lanes())
    # Three calls (module docstring): the memory plan reuses their full-length buffers.
    planes = bb.emit_te(partial(winograd_planes, tiling=tiling, left=padding[0]), x,
                        primfunc_name_hint="conv1d_winograd_planes")
    z = bb.emit_te(partial(winograd_products, tiling=tiling), planes, w,
                   primfunc_name_hint="conv1d_winograd")
    return bb.call_te(partial(winograd_interleave, tiling=tiling, out_len=out_len), z,
                      primfunc_name_hint="conv1d_winograd_interleave")
