"""The ``tir_vec`` LSTM recurrence on CUDA: a GPU kernel in place of the CPU one, at lowering.

Relax artifacts are target-independent, so a ``tir_vec`` import holds the CPU recurrence
(compile/lstm.py: ``packed_lstm_recurrence_vec_*``, a loop over time with CPU threads and
vectors) which GPU schedules cannot take. For cuda targets the lower stage swaps each for this
kernel, which has the same signature and meaning (xproj [B, T, 2, 4H], w_hh_t [2, H, 4H],
lengths [B] -> out [B, T, 2H], packed-sequence semantics):

- one thread block per direction, one thread per hidden unit j (H <= 1024 threads);
- per step, thread j accumulates its four gates (i, f, g, o at j, H+j, 2H+j, 3H+j) over the
  previous h, read from shared memory (a broadcast) while the weights w_hh_t[d, k, q*H + j] are
  read coalesced across threads; then it updates its own cell state (a register) and, after a
  barrier (everyone has read h), writes h[j]; the next step's barrier makes it visible;
- a step beyond a sequence's length writes zeros (the branch is the same for the whole block,
  so the barriers inside it are safe).

The kernel is marked scheduled, so dlight leaves it alone. Before this, GPUs could only use the
``unroll`` method, whose IR grows with the bucket (f0n at 2048 frames was out of reach).
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from kokoro_tvm.compile import fastmath
from kokoro_tvm.compile.lstm import VEC_KERNEL_PREFIX

MAX_THREADS = 1024


def recurrence_kernel_gpu(batch: int, steps: int, hidden: int) -> tvm.tirx.PrimFunc:
    """The GPU recurrence for ``batch`` sequences of ``steps`` steps and ``hidden`` units."""
    if hidden > MAX_THREADS:
        raise ValueError(f"the GPU LSTM kernel runs a thread per hidden unit: hidden {hidden} "
                         f"is over {MAX_THREADS}; use the unroll method for this model")
    B, S, H, G = batch, steps, hidden, 4 * hidden

    @T.prim_func(private=True)
    def packed_lstm_recurrence_gpu(xproj: T.Buffer((B, S, 2, G), "float32"),
                                   w_hh_t: T.Buffer((2, H, G), "float32"),
                                   lengths: T.Buffer((B,), "int64"),
                                   out: T.Buffer((B, S, 2 * H), "float32")):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        for d in T.thread_binding(2, thread="blockIdx.x"):
            h = T.alloc_buffer((H,), "float32", scope="shared")
            for j in T.thread_binding(H, thread="threadIdx.x"):
                c = T.alloc_buffer((1,), "float32", scope="local")
                acc = T.alloc_buffer((4,), "float32", scope="local")
                for b in range(B):
                    h[j] = T.float32(0)
                    c[0] = T.float32(0)
                    for s in range(S):
                        t: T.let[T.int64] = T.Select(d == 0, T.int64(s), T.int64(S - 1 - s))
                        if t < lengths[b]:
                            for q in T.unroll(4):
                                acc[q] = xproj[b, t, d, q * H + j]
                            T.tvm_storage_sync("shared")  # the previous step's h is complete
                            for k in range(H):
                                for q in T.unroll(4):
                                    acc[q] = acc[q] + h[k] * w_hh_t[d, k, q * H + j]
                            c[0] = (fastmath.sigmoid(acc[1]) * c[0]
                                    + fastmath.sigmoid(acc[0]) * fastmath.tanh(acc[2]))
                            T.tvm_storage_sync("shared")  # every thread has read h
                            h[j] = fastmath.sigmoid(acc[3]) * fastmath.tanh(c[0])
                            out[b, t, d * H + j] = h[j]
                        else:
                            out[b, t, d * H + j] = T.float32(0)

    return packed_lstm_recurrence_gpu


def _shape(func: tvm.tirx.PrimFunc) -> tuple[int, int, int]:
    """(batch, steps, hidden) of a CPU recurrence kernel, from its xproj and w_hh_t buffers."""
    xproj, w_hh_t = (p.ty for p in func.params[:2])  # buffer types carry the shapes
    batch, steps = (int(v) for v in xproj.shape[:2])
    return batch, steps, int(w_hh_t.shape[1])


@tvm.transform.module_pass(opt_level=0, name="GpuLstmRecurrence")
def gpu_lstm_recurrence(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Every ``tir_vec`` recurrence kernel of ``mod`` replaced by the GPU kernel."""
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, tvm.tirx.PrimFunc) and gvar.name_hint.startswith(VEC_KERNEL_PREFIX):
            mod[gvar] = recurrence_kernel_gpu(*_shape(func))
    return mod
