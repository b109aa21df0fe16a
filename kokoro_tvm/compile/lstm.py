"""How LSTMs are lowered, keyed by method name.

The method is a dimension of every LSTM artifact (``results/relax/{component}/{lstm}.json``), so
each method is one entry here: what emits the op for static shapes. Components without an LSTM
use ``none``, which lives in the importer: this module is what only LSTM artifacts depend on
(stages/code_inputs.LSTM_ONLY).

Kokoro's LSTMs reach the importer as one ``kokoro_tvm::packed_lstm`` node each (the op of
kokoro_tvm/model/packed_lstm.py: bidirectional, batch first, per-sequence lengths, nn.LSTM's
packed semantics), which leaves a placeholder naming the method (``converters``); once the length
is a bucket's, ``compile/specialize.py`` emits the method's form in its place. Every method
computes the input projection of both directions as one matmul over all time steps, reading each
weight once (TVM's own route copied the input weight once per step, docs/tvm.md); they differ in
the recurrence:

- ``unroll``: per-step Relax ops (matvec, gates, and ``where`` on the step's mask keeping the
  state of finished sequences and zeroing their outputs). IR and import time grow linearly with
  the bucket.
- ``tir``: one TIR PrimFunc (``call_tir``) with a loop over time; scalar loops, directions one
  after the other. The IR size does not depend on the bucket.
- ``tir_vec``: as ``tir``, with the recurrent weight transposed so that the gate update runs on
  register-held chunks of gates (vector FMAs), a vectorised cell update, and the two directions
  on two threads.

In both TIR kernels a step ``t`` of sequence ``b`` runs only when ``t < lengths[b]``: the
forward direction walks t = 0..T-1, the reverse one T-1..0 from a zero state, so it starts at the
sequence's last valid step; outputs of steps beyond the length are zeros.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import tvm
from tvm import relax
from tvm.script import tirx as T

from kokoro_tvm.compile import fastmath
from kokoro_tvm.compile.deferred import placeholder
from kokoro_tvm.facts import LSTM_METHOD_NAMES
from kokoro_tvm.model.custom_ops import PACKED_LSTM, converter_key

if TYPE_CHECKING:  # lowering loads this module without PyTorch (stages/common.without_torch)
    from torch import fx

CONVERTER_KEY = converter_key(PACKED_LSTM)

# The name prefix of tir_vec's recurrence kernels (GPU targets swap them: compile/gpu/lstm.py).
VEC_KERNEL_PREFIX = "packed_lstm_recurrence_vec_"
# Gate accumulators per chunk in the vectorised recurrence, in vectors of up to 16 floats: 8 of
# AVX-512's 32 registers, leaving room for the weight vectors and the broadcast of h[k]. The
# kernel is written at import, before the target is known, so it is sized for AVX-512; LLVM
# splits each vector on narrower targets (on AVX2 or NEON the accumulators then spill).
CHUNK_VECTORS = 8


def op_name(method: str) -> str:
    """The name of the op's placeholder for ``method`` (compile/specialize.py)."""
    return f"packed_lstm.{method}"


def converters(method: str) -> dict[str, Callable]:
    """The importer's converters for ``method``: the op's placeholder, the lengths as int64."""

    def convert(node: fx.Node, importer) -> relax.Expr:
        bb = importer.block_builder
        x, lengths, *weights = [importer.env[a] for a in node.args]
        if lengths.ty.dtype != "int64":
            lengths = bb.emit(relax.op.astype(lengths, "int64"))
        batch, steps, _ = x.ty.shape
        hidden = weights[1].ty.shape[1]
        return placeholder(bb, op_name(method), [x, lengths, *weights],
                           relax.TensorType((batch, steps, 2 * hidden), "float32"))

    return {CONVERTER_KEY: convert}


# --------------------------------------------------------------------------------------------
# The op's arguments, and the input projection every method shares.
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Args:
    x: relax.Expr         # [B, T, I] float32
    lengths: relax.Expr   # [B] int64
    weights: list         # w_ih, w_hh, b_ih, b_hh, then the same for the reverse direction
    batch: int
    steps: int
    hidden: int

    def direction(self, d: int) -> list:
        return self.weights[4 * d:4 * d + 4]


def _args(x: relax.Expr, lengths: relax.Expr, weights: tuple) -> _Args:
    batch, steps, _ = (int(v) for v in x.ty.shape)
    return _Args(x, lengths, list(weights), batch, steps, int(weights[1].ty.shape[1]))


def _projection_relax(bb: relax.BlockBuilder, a: _Args) -> relax.Expr:
    """x @ [W_ih; W_ih_reverse]^T + both biases: [B, T, 8H] in one Relax matmul."""
    op = relax.op
    w_ih = op.concat([a.weights[0], a.weights[4]], axis=0)
    bias = op.concat([op.add(a.weights[2], a.weights[3]), op.add(a.weights[6], a.weights[7])],
                     axis=0)
    return bb.emit(op.add(op.matmul(a.x, op.permute_dims(w_ih)), bias))


# --------------------------------------------------------------------------------------------
# unroll: per-step Relax ops.
# --------------------------------------------------------------------------------------------

def _step(bb, gates, state, mask, hidden):
    """One LSTM cell step on precomputed gates [B, 4H] (torch's order i, f, g, o); sequences
    whose mask is False keep their state and output zeros."""
    op = relax.op
    h, c = state
    i, f, g, o = (bb.emit(op.strided_slice(gates, [1], [k * hidden], [(k + 1) * hidden]))
                  for k in range(4))
    c_new = bb.emit(op.add(op.multiply(op.sigmoid(f), c),
                           op.multiply(op.sigmoid(i), op.tanh(g))))
    h_new = bb.emit(op.multiply(op.sigmoid(o), op.tanh(c_new)))
    out = bb.emit(op.where(mask, h_new, op.zeros_like(h_new)))
    return (bb.emit(op.where(mask, h_new, h)), bb.emit(op.where(mask, c_new, c))), out


def emit_unroll(bb: relax.BlockBuilder, x: relax.Expr, lengths: relax.Expr, *weights
                ) -> relax.Expr:
    """packed_lstm as per-time-step Relax ops with masks."""
    op = relax.op
    a = _args(x, lengths, weights)
    H, G = a.hidden, 4 * a.hidden
    xproj = _projection_relax(bb, a)
    steps = op.arange(0, a.steps, 1, "int64")  # a kernel, not a table (lower.py)
    mask = bb.emit(op.less(op.expand_dims(steps, 0), op.expand_dims(a.lengths, 1)))  # [B, T]
    zeros = relax.const(0.0, "float32")
    outputs = []
    for d in range(2):
        w_hh_t = bb.emit(op.permute_dims(a.direction(d)[1]))  # [H, 4H]
        state = (bb.emit(op.full((a.batch, H), zeros)),) * 2
        per_step = [None] * a.steps
        for t in (range(a.steps) if d == 0 else reversed(range(a.steps))):
            x_t = op.strided_slice(xproj, [1, 2], [t, d * G], [t + 1, (d + 1) * G])
            gates = bb.emit(op.add(op.reshape(x_t, (a.batch, G)),
                                   op.matmul(state[0], w_hh_t)))
            m_t = bb.emit(op.strided_slice(mask, [1], [t], [t + 1]))  # [B, 1]
            state, per_step[t] = _step(bb, gates, state, m_t, H)
        outputs.append(bb.emit(op.stack(per_step, axis=1)))  # [B, T, H]
    return bb.emit(op.concat(outputs, axis=2))


# --------------------------------------------------------------------------------------------
# TIR kernels.
# --------------------------------------------------------------------------------------------

def _lanes(n: int, widest: int = 16) -> int:
    """The widest vector (a power of two up to ``widest``) that divides ``n``."""
    lanes = widest
    while n % lanes:
        lanes //= 2
    return lanes


@T.macro
def _reset_state(H, h, c):
    """Zero hidden and cell state before each sequence."""
    for j in range(H):
        h[j] = T.float32(0)
        c[j] = T.float32(0)


@T.macro
def _zero_step(H, out, b, t, d):
    """A padded step's output (packed-sequence semantics: zeros beyond the length)."""
    for j in range(H):
        out[b, t, d * H + j] = T.float32(0)


@T.macro
def _cell_update(H, L, gates, c, h, out, b, t, d):
    """One step's cell and hidden state from the gate pre-activations (torch's i, f, g, o
    order), written to ``out``, ``L`` hidden units at a time (vector lanes); shared by both
    recurrence kernels. Arithmetic-only tanh and sigmoid (compile/fastmath.py), so it vectorizes."""
    for j0 in range(H // L):
        for j1 in T.vectorized(L):
            c[j0 * L + j1] = (fastmath.sigmoid(gates[H + j0 * L + j1]) * c[j0 * L + j1]
                              + fastmath.sigmoid(gates[j0 * L + j1])
                              * fastmath.tanh(gates[2 * H + j0 * L + j1]))
            h[j0 * L + j1] = (fastmath.sigmoid(gates[3 * H + j0 * L + j1])
                              * fastmath.tanh(c[j0 * L + j1]))
            out[b, t, d * H + j0 * L + j1] = h[j0 * L + j1]


@T.macro
def _recurrence(B, S, H, G, L, xproj, w, lengths, out, d, update_gates):
    """Direction ``d`` of every sequence, shared by both recurrence kernels: a zero state, then
    per valid step the gates (``update_gates``, a macro of the kernel) and the cell update;
    zeros beyond the sequence's length."""
    h = T.alloc_buffer((H,), "float32")
    c = T.alloc_buffer((H,), "float32")
    gates = T.alloc_buffer((G,), "float32")
    for b in range(B):
        _reset_state(H, h, c)
        for s in range(S):
            t: T.let[T.int64] = T.Select(d == 0, T.int64(s), T.int64(S - 1 - s))
            if t < lengths[b]:
                update_gates(gates, h, xproj, w, b, t, d)
                _cell_update(H, L, gates, c, h, out, b, t, d)
            else:
                _zero_step(H, out, b, t, d)


def recurrence_kernel(batch: int, steps: int, hidden: int) -> tvm.tirx.PrimFunc:
    """Scalar recurrence: xproj [B, T, 2, 4H], w_hh [2, 4H, H] (torch's layout), lengths [B]
    -> out [B, T, 2H]. Shapes are constants, so the IR has the same size at every bucket."""
    B, S, H, G = batch, steps, hidden, 4 * hidden

    @T.macro
    def dot_gates(gates, h, xproj, w_hh, b, t, d):
        for g in range(G):
            gates[g] = xproj[b, t, d, g]
            for k in range(H):
                gates[g] = gates[g] + w_hh[d, g, k] * h[k]

    @T.prim_func(private=True)
    def packed_lstm_recurrence(xproj: T.Buffer((B, S, 2, G), "float32"),
                               w_hh: T.Buffer((2, G, H), "float32"),
                               lengths: T.Buffer((B,), "int64"),
                               out: T.Buffer((B, S, 2 * H), "float32")):
        T.func_attr({"tirx.noalias": True})
        for d in range(2):
            _recurrence(B, S, H, G, 1, xproj, w_hh, lengths, out, d, dot_gates)

    return packed_lstm_recurrence


def recurrence_kernel_vec(batch: int, steps: int, hidden: int) -> tvm.tirx.PrimFunc:
    """As ``recurrence_kernel`` with w_hh transposed ([2, H, 4H]) and each direction on its own
    thread. The gate update runs over chunks of ``C`` gates held in registers (accumulators)
    while k walks the hidden units: per k one broadcast of h[k] and C / V contiguous weight
    vectors, so gates are loaded and stored once per step, not once per k. The cell update is
    vectorised too."""
    B, S, H, G = batch, steps, hidden, 4 * hidden
    V = _lanes(G)
    U = max(u for u in range(1, CHUNK_VECTORS + 1) if (G // V) % u == 0)
    C = U * V
    L = _lanes(H)

    @T.macro
    def chunked_gates(gates, h, xproj, w_hh_t, b, t, d):
        for chunk in range(G // C):
            acc = T.alloc_buffer((C,), "float32", scope="local")
            for u in T.unroll(U):
                for v in T.vectorized(V):
                    acc[u * V + v] = xproj[b, t, d, chunk * C + u * V + v]
            for k in range(H):
                for u in T.unroll(U):
                    for v in T.vectorized(V):
                        acc[u * V + v] = (acc[u * V + v] + h[k]
                                          * w_hh_t[d, k, chunk * C + u * V + v])
            for u in T.unroll(U):
                for v in T.vectorized(V):
                    gates[chunk * C + u * V + v] = acc[u * V + v]

    @T.prim_func(private=True)
    def packed_lstm_recurrence_vec(xproj: T.Buffer((B, S, 2, G), "float32"),
                                   w_hh_t: T.Buffer((2, H, G), "float32"),
                                   lengths: T.Buffer((B,), "int64"),
                                   out: T.Buffer((B, S, 2 * H), "float32")):
        T.func_attr({"tirx.noalias": True})
        for d in T.parallel(2):
            _recurrence(B, S, H, G, L, xproj, w_hh_t, lengths, out, d, chunked_gates)

    return packed_lstm_recurrence_vec


def _call_kernel(bb, kernel: tvm.tirx.PrimFunc, name: str, args: list, shape, dtype="float32"):
    """``call_tir`` of ``kernel``, added to the module under a name carrying its shapes (one copy
    per distinct shape: the five LSTMs of duration share one)."""
    gvar = bb.add_func(kernel, name)
    return bb.emit(relax.call_tir(gvar, args, relax.TensorType(shape, dtype)))


def _shape_tag(a: _Args, inputs: int) -> str:
    return f"b{a.batch}_t{a.steps}_i{inputs}_h{a.hidden}"


def _emit_recurrence(bb: relax.BlockBuilder, a: _Args, vectorised: bool) -> relax.Expr:
    """packed_lstm as a Relax matmul (the input projection of both directions, scheduled like
    every matmul) and one TIR recurrence kernel."""
    op = relax.op
    G = 4 * a.hidden
    xproj = bb.emit(op.reshape(_projection_relax(bb, a), (a.batch, a.steps, 2, G)))
    w_hh = op.stack([a.weights[1], a.weights[5]], axis=0)  # [2, 4H, H]
    tag = _shape_tag(a, int(a.x.ty.shape[2]))
    if vectorised:
        w_hh = op.permute_dims(w_hh, [0, 2, 1])  # [2, H, 4H]
        kernel, name = recurrence_kernel_vec, f"{VEC_KERNEL_PREFIX}{tag}"
    else:
        kernel, name = recurrence_kernel, f"packed_lstm_recurrence_{tag}"
    return _call_kernel(bb, kernel(a.batch, a.steps, a.hidden), name,
                        [xproj, bb.emit(w_hh), a.lengths], (a.batch, a.steps, 2 * a.hidden))


def emit_tir(bb: relax.BlockBuilder, x: relax.Expr, lengths: relax.Expr, *weights
             ) -> relax.Expr:
    """packed_lstm with the scalar recurrence."""
    return _emit_recurrence(bb, _args(x, lengths, weights), vectorised=False)


def emit_tir_vec(bb: relax.BlockBuilder, x: relax.Expr, lengths: relax.Expr, *weights
                 ) -> relax.Expr:
    """packed_lstm with the vectorised, two-thread recurrence."""
    return _emit_recurrence(bb, _args(x, lengths, weights), vectorised=True)


# Method name -> what emits the op: ``emit(block_builder, x, lengths, *weights)``.
LSTM_METHODS: dict[str, Callable[..., relax.Expr]] = {
    "unroll": emit_unroll,
    "tir": emit_tir,
    "tir_vec": emit_tir_vec,
}
assert set(LSTM_METHODS) == set(LSTM_METHOD_NAMES)
