"""conv1d by Winograd's minimal filtering: the generator's long convolutions in about half the
multiplications.

F(m, r) computes m outputs of an r-tap correlation from ``ALPHA = m + r - 1`` products, by
Toom-Cook over ``POINTS`` (and infinity): ``y = AT @ ((G @ g) * (BT @ x))`` for an input window
``x`` of ALPHA samples and taps ``g``. Here m = r = 4; a kernel of K taps is split into
``ceil(K / 4)`` chunks of 4 (zero taps past K), and chunk q of output tile T reads the input
window of tile T + q, so one input transform per tile serves every chunk and the chunks add
up inside the contraction, before the output transform. Multiplications per output and
channel pair: 7/4 per chunk, i.e. 5.25 for 11 taps and 3.5 for 7 (against 11 and 7).

Dilation d keeps the same tiles on the dilated grid: tile ``T = b * d + p`` computes outputs
``b * 4d + p + d * j`` (j < 4), so chunk q's window is tile ``T + q * d``. Stages, one PrimFunc:

- ``planes[c, i, T] = xpad[c, (T // d) * 4d + T % d + d * i]`` (i < 4), zero-padded: a gather
  pass, after which every window read is contiguous in T;
- ``input_transform[xi, c, T] = sum_i BT[xi, i] * window_i`` (the contraction's tile input);
- the contraction ``winograd[xi, f, T] = sum_{c, q} u[xi, f, c, q] * input_transform[xi, c,
  T + q * d]``, with ``u = G @ chunk`` per point from the weight alone (lifted into the
  library's weight transform), points inside each register tile;
- ``output_transform[f, j, T] = sum_xi AT[j, xi] * winograd[xi, f, T]``, per register tile;
- ``interleave`` back to time, where FuseOps' epilogue (bias, activation) follows.

Where it is used (``covers``): stride 1, no groups, at least ``MIN_TAPS`` taps and
``MIN_CHANNELS`` output channels; the rest keeps the direct contraction (conv1d.py). The
points give float32 results within a few 1e-6 of the direct sum relative to the output's scale.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, tirx

from kokoro_tvm.compile.schedules.contraction import annotation, register_tile
from kokoro_tvm.compile.schedules.conv1d import legalize_conv1d, output_length, static_float32_ncw
from kokoro_tvm.compile.schedules.cpu import cpu_facts

OUTPUTS, TAPS = 4, 4  # m and r of F(m, r)
POINTS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5)  # and infinity: ALPHA points in all
ALPHA = OUTPUTS + TAPS - 1
# Below these the transforms cost more than the products they save (docs/decisions.md).
MIN_TAPS = 7
MIN_CHANNELS = 64


def _vandermonde(columns: int) -> np.ndarray:
    """Rows p**0 .. p**(columns-1) for each point, and infinity's row (the leading term)."""
    rows = [[p ** i for i in range(columns)] for p in POINTS]
    return np.array([*rows, [0.0] * (columns - 1) + [1.0]])


AT = _vandermonde(OUTPUTS).T  # [OUTPUTS, ALPHA]
G = _vandermonde(TAPS)  # [ALPHA, TAPS]
BT = np.linalg.inv(_vandermonde(ALPHA)).T  # [ALPHA, ALPHA]


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
    """``u[xi, f, c, q] = sum_k G[xi, k] * w[f, c, 4q + k]``, taps past the kernel zero."""
    _, _, kernel = (int(d) for d in w.shape)
    chunks = -(-kernel // TAPS)

    def tap(f, c, k):
        return tirx.if_then_else(k < kernel, w[f, c, tirx.min(k, kernel - 1)],
                                 tirx.const(0, w.dtype))

    return te.compute(
        (ALPHA, int(w.shape[0]), int(w.shape[1]), chunks),
        lambda xi, f, c, q: sum(_entry(G, xi, k) * tap(f, c, q * TAPS + k) for k in range(TAPS)),
        name="winograd_weights")


def winograd_compute(x: te.Tensor, u: te.Tensor, left: int, out_len: int, dilation: int,
                     multiple: int) -> te.Tensor:
    n, c_in, length = (int(d) for d in x.shape)
    _, c_out, _, chunks = (int(d) for d in u.shape)
    d, span = dilation, OUTPUTS * dilation
    tiles = -(-(-(-out_len // span) * d) // multiple) * multiple
    transformed = tiles + (chunks - 1) * d
    windows = ALPHA // OUTPUTS + 1  # plane tiles each window spans

    def plane(b, c, i, t):
        pos = (t // d) * span + t % d + d * i - left
        return tirx.if_then_else(tirx.all(pos >= 0, pos < length),
                                 x[b, c, tirx.max(tirx.min(pos, length - 1), 0)],
                                 tirx.const(0, x.dtype))

    planes = te.compute((n, c_in, OUTPUTS, transformed + (windows - 1) * d), plane,
                        name="planes")

    def window(b, xi, c, t):
        return sum(_entry(BT, xi, i) * planes[b, c, i % OUTPUTS, t + (i // OUTPUTS) * d]
                   for i in range(ALPHA) if np.any(BT[:, i]))

    v = te.compute((n, ALPHA, c_in, transformed), window, name="input_transform")
    rc = te.reduce_axis((0, c_in), "rc")
    rq = te.reduce_axis((0, chunks), "rq")
    products = te.compute(
        (n, ALPHA, c_out, tiles),
        lambda b, xi, f, t: te.sum(u[xi, f, rc, rq] * v[b, xi, rc, t + rq * d], axis=[rc, rq]),
        name="winograd", attrs=annotation(row_axis=2, vec_axis=3, points_axis=1,
                                          tile_input="input_transform",
                                          tile_output="output_transform"))
    rp = te.reduce_axis((0, ALPHA), "rp")
    z = te.compute((n, c_out, OUTPUTS, tiles),
                   lambda b, f, j, t: te.sum(_entry(AT, j, rp) * products[b, rp, f, t], axis=[rp]),
                   name="output_transform")
    return te.compute((n, c_out, out_len),
                      lambda b, f, o: z[b, f, (o % span) // d, (o // span) * d + o % d],
                      name="interleave")


def covers(call: relax.Call) -> bool:
    attrs, w = call.attrs, call.args[1]
    return (static_float32_ncw(call, kernel_layout="OIW") and int(attrs.strides[0]) == 1
            and int(attrs.groups) == 1 and int(w.ty.shape[2]) >= MIN_TAPS
            and int(w.ty.shape[0]) >= MIN_CHANNELS)


def legalize_conv1d_winograd(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """relax.nn.conv1d by Winograd where ``covers`` says so, else the direct contraction."""
    if not covers(call):
        return legalize_conv1d(bb, call)
    x, w = call.args
    attrs = call.attrs
    dilation = int(attrs.dilation[0])
    padding = (int(attrs.padding[0]), int(attrs.padding[1]))
    out_len = output_length(int(x.ty.shape[2]), int(w.ty.shape[2]), 1, padding, dilation)
    facts = cpu_facts(tvm.target.Target.current(allow_none=False))
    vectors = register_tile(facts, int(w.ty.shape[0]), -(-out_len // OUTPUTS))[1]
    u = bb.emit(bb.call_te(winograd_weights, w, primfunc_name_hint="winograd_weights"))
    return bb.call_te(winograd_compute, x, u, padding[0], out_len, dilation,
                      vectors * facts.lanes(), primfunc_name_hint="conv1d_winograd")
