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
- a step beyond a sequence's length writes zeros and leaves the state as it is; the barriers
  stay outside that branch (WGSL requires barriers in uniform control flow).

A second form (``StepKernels``) launches a kernel per step instead, each spreading the step's
gates over many thread blocks, so that no block streams a whole direction's recurrent weights
(1 MiB at H = 256) from L2 at every step; CUDA graphs replay the launches. The hidden state
passes between launches through ``out`` (step t reads h at t -/+ 1), and the cell state too:
each unit's c is parked in the next step's slot of ``out``, which that step reads before
overwriting it with its h, so the signature stays that of the CPU kernel. Which form is faster
is measured by the GPU check (tools/gpu_check/lstm_kernels.py); ``DEFAULT_KERNEL`` is the one
the lower stage uses.

The kernels are marked scheduled, so dlight leaves them alone. Before this, GPUs could only use
the ``unroll`` method, whose IR grows with the bucket (f0n at 2048 frames was out of reach).
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.script import tirx as T

from kokoro_tvm.compile import fastmath
from kokoro_tvm.compile.lstm import VEC_KERNEL_PREFIX

MAX_THREADS = 1024


@dataclass(frozen=True)
class StepKernels:
    """A kernel launch per step: each of ``hidden / units_per_block`` thread blocks per
    direction computes the four gates of ``units_per_block`` units, its threads splitting the
    sum over the previous h into ``k_slices`` slices (partial sums meet in shared memory)."""

    units_per_block: int = 32
    k_slices: int = 8

    def check(self, hidden: int) -> None:
        threads = self.units_per_block * self.k_slices
        if hidden % self.units_per_block or hidden % self.k_slices or threads > MAX_THREADS:
            raise ValueError(f"{self} does not fit hidden size {hidden}: units per block and k "
                             f"slices must divide it, and their product ({threads}) be at most "
                             f"{MAX_THREADS} threads")


# None: one thread block per direction for the whole sequence (recurrence_kernel_gpu).
DEFAULT_KERNEL: StepKernels | None = None


def recurrence_kernel_gpu(batch: int, steps: int, hidden: int, lengths_dtype: str = "int64"
                          ) -> tvm.tirx.PrimFunc:
    """The GPU recurrence for ``batch`` sequences of ``steps`` steps and ``hidden`` units."""
    if hidden > MAX_THREADS:
        raise ValueError(f"the GPU LSTM kernel runs a thread per hidden unit: hidden {hidden} "
                         f"is over {MAX_THREADS}; use the unroll method for this model")
    B, S, H, G = batch, steps, hidden, 4 * hidden
    # Mesa's lavapipe ends a loop after 65,535 iterations in all (counted across the time
    # loop's steps): the sum over h unrolled by 16 keeps 2,048 steps within it.
    K_UNROLL = 16 if H % 16 == 0 else 1

    @T.prim_func(private=True)
    def packed_lstm_recurrence_gpu(xproj: T.Buffer((B, S, 2, G), "float32"),
                                   w_hh_t: T.Buffer((2, H, G), "float32"),
                                   lengths: T.Buffer((B,), lengths_dtype),
                                   out: T.Buffer((B, S, 2 * H), "float32")):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
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
                        in_sequence: T.let[T.bool] = t < T.Cast("int64", lengths[b])
                        # Barriers outside the branches: WGSL requires them in uniform control
                        # flow, and the lengths are data.
                        T.tvm_storage_sync("shared")  # the previous step's h is complete
                        if in_sequence:
                            for q in T.unroll(4):
                                acc[q] = xproj[b, t, d, q * H + j]
                            for ko in range(H // K_UNROLL):
                                for ki in T.unroll(K_UNROLL):
                                    for q in T.unroll(4):
                                        acc[q] = acc[q] + (h[ko * K_UNROLL + ki] * w_hh_t[
                                            d, ko * K_UNROLL + ki, q * H + j])
                            c[0] = (fastmath.sigmoid(acc[1]) * c[0]
                                    + fastmath.sigmoid(acc[0]) * fastmath.tanh(acc[2]))
                        T.tvm_storage_sync("shared")  # every thread has read h
                        if in_sequence:
                            h[j] = fastmath.sigmoid(acc[3]) * fastmath.tanh(c[0])
                            out[b, t, d * H + j] = h[j]
                        else:
                            out[b, t, d * H + j] = T.float32(0)

    return packed_lstm_recurrence_gpu


def recurrence_kernel_gpu_steps(batch: int, steps: int, hidden: int, kernel: StepKernels,
                                lengths_dtype: str = "int64") -> tvm.tirx.PrimFunc:
    """The GPU recurrence as a kernel per step (``StepKernels``). Each launch runs three phases,
    each a loop over the block's threads (TVM puts a barrier between them): load the previous
    h into shared memory; partial gate sums over the thread's k slice; per unit, the gates'
    total and the cell update."""
    kernel.check(hidden)
    B, S, H, G = batch, steps, hidden, 4 * hidden
    UNITS, SLICES = kernel.units_per_block, kernel.k_slices
    BLOCKS, THREADS, SPAN = H // UNITS, UNITS * SLICES, H // SLICES

    @T.prim_func(private=True)
    def packed_lstm_recurrence_gpu_steps(xproj: T.Buffer((B, S, 2, G), "float32"),
                                         w_hh_t: T.Buffer((2, H, G), "float32"),
                                         lengths: T.Buffer((B,), lengths_dtype),
                                         out: T.Buffer((B, S, 2 * H), "float32")):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        for b in range(B):
            for s in range(S):  # on the host: a launch per step
                for block in T.thread_binding(2 * BLOCKS, thread="blockIdx.x"):
                    h = T.alloc_buffer((H,), "float32", scope="shared")
                    partial = T.alloc_buffer((SLICES, 4, UNITS), "float32", scope="shared")
                    d: T.let[T.int32] = block // BLOCKS
                    t: T.let[T.int64] = T.Select(d == 0, T.int64(s), T.int64(S - 1 - s))
                    before: T.let[T.int64] = T.Select(d == 0, t - 1, t + 1)
                    after: T.let[T.int64] = T.Select(d == 0, t + 1, t - 1)
                    for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                        for i in range((H + THREADS - 1) // THREADS):
                            if i * THREADS + tx < H:
                                h[i * THREADS + tx] = T.if_then_else(
                                    s == 0, T.float32(0), out[b, before, d * H + i * THREADS + tx])
                    for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                        acc = T.alloc_buffer((4,), "float32", scope="local")
                        for q in T.unroll(4):
                            acc[q] = T.float32(0)
                        for k in range(SPAN):
                            for q in T.unroll(4):
                                acc[q] = acc[q] + h[tx // UNITS * SPAN + k] * w_hh_t[
                                    d, tx // UNITS * SPAN + k,
                                    q * H + block % BLOCKS * UNITS + tx % UNITS]
                        for q in T.unroll(4):
                            partial[tx // UNITS, q, tx % UNITS] = acc[q]
                    for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                        if tx < UNITS:
                            gates = T.alloc_buffer((4,), "float32", scope="local")
                            c = T.alloc_buffer((1,), "float32", scope="local")
                            j: T.let[T.int32] = block % BLOCKS * UNITS + tx
                            for q in T.unroll(4):
                                gates[q] = xproj[b, t, d, q * H + j]
                                for r in range(SLICES):
                                    gates[q] = gates[q] + partial[r, q, tx]
                            if t < T.Cast("int64", lengths[b]):
                                # this unit's c, parked here by the step before
                                c[0] = (fastmath.sigmoid(gates[1]) * T.if_then_else(
                                    s == 0, T.float32(0), out[b, t, d * H + j])
                                    + fastmath.sigmoid(gates[0]) * fastmath.tanh(gates[2]))
                                out[b, t, d * H + j] = (fastmath.sigmoid(gates[3])
                                                        * fastmath.tanh(c[0]))
                            else:
                                c[0] = T.float32(0)
                                out[b, t, d * H + j] = T.float32(0)
                            if s < S - 1:
                                out[b, after, d * H + j] = c[0]

    return packed_lstm_recurrence_gpu_steps


def _shape(func: tvm.tirx.PrimFunc) -> tuple[int, int, int]:
    """(batch, steps, hidden) of a CPU recurrence kernel, from its xproj and w_hh_t buffers."""
    xproj, w_hh_t = (p.ty for p in func.params[:2])  # buffer types carry the shapes
    batch, steps = (int(v) for v in xproj.shape[:2])
    return batch, steps, int(w_hh_t.shape[1])


@relax.expr_functor.mutator
class _CallOther(relax.PyExprMutator):
    def __init__(self, renamed: dict):
        super().__init__()
        self.renamed = renamed

    def visit_global_var_(self, gvar):
        return self.renamed.get(gvar, gvar)


def _with_kernels(mod: tvm.IRModule, kernels: dict) -> tvm.IRModule:
    """``mod`` with each of ``kernels``' globals bound to its new kernel. Under a new global of
    the same name: a global keeps the type of its first function, and the kernel's may differ
    (its lengths' dtype)."""
    kept = mod.clone()
    for gvar in kernels:
        del kept[gvar]
    builder = relax.BlockBuilder(kept)
    renamed = {gvar: builder.add_func(kernel, gvar.name_hint) for gvar, kernel in kernels.items()}
    for gvar, func in kept.functions_items():
        if isinstance(func, relax.Function):
            builder.update_func(gvar, _CallOther(renamed).visit_expr(func))
    return builder.get()


def gpu_lstm_recurrence(lengths: str = "int64") -> tvm.transform.Pass:
    """Every ``tir_vec`` recurrence kernel of a module replaced by the GPU kernel
    (``DEFAULT_KERNEL``'s form), taking the sequence lengths as ``lengths`` (int32 where the
    graph has no int64: webgpu/narrow.py)."""

    @tvm.transform.module_pass(opt_level=0, name="GpuLstmRecurrence")
    def swap(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        kernels = {gvar: (recurrence_kernel_gpu(*_shape(func), lengths) if DEFAULT_KERNEL is None
                          else recurrence_kernel_gpu_steps(*_shape(func), DEFAULT_KERNEL, lengths))
                   for gvar, func in mod.functions_items()
                   if isinstance(func, tvm.tirx.PrimFunc)
                   and gvar.name_hint.startswith(VEC_KERNEL_PREFIX)}
        return _with_kernels(mod, kernels)

    return swap
