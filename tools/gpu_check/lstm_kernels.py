"""The LSTM recurrence alone at the real model's largest sequences, in each GPU form of
compile/gpu/lstm.py: one thread block per direction (the default) and a kernel per step with
several block shapes; which is fastest on the GPU, beside PyTorch's cuDNN LSTM, in one run.

prepare.py builds one library per (shape, variant) into the bundle's ``lstm/``; each holds the
recurrence between two copies, so that it sits inside the captured CUDA graph as it does in a
component. check.py runs each on seeded inputs, lengths a little under the sequence, against
the packed_lstm op (model/packed_lstm.py: PyTorch's packed LSTM, cuDNN's on the GPU; the
projected inputs fed through identity input weights), with the same relative-error bar as the
libraries, and times both.
"""
from __future__ import annotations

from unittest import mock

# (name, sequence length, hidden units): Kokoro's LSTMs all have 256 hidden units; duration
# runs four of them over 512 tokens at its largest bucket, f0n one over 2048 frames.
SHAPES = (
    ("duration_b512", 512, 256),
    ("f0n_b2048", 2048, 256),
)
# None: one block per direction; otherwise StepKernels(units_per_block, k_slices).
VARIANTS = {
    "block": None,
    "steps_u32_k8": (32, 8),
    "steps_u16_k16": (16, 16),
    "steps_u8_k32": (8, 32),
    "steps_u16_k8": (16, 8),
    "steps_u8_k16": (8, 16),
}
# The share of the sequence that is valid: the rest is padding, as in a bucket.
VALID = 0.9


def module(shape: tuple):
    """A Relax module whose ``main`` (xproj [1, T, 2, 4H], w_hh_t [2, H, 4H], lengths [1]) runs
    tir_vec's recurrence kernel on copies of its inputs and returns a copy of its output (a
    kernel that reads a call's inputs or writes its output is not captured in the graph)."""
    from tvm import relax

    from kokoro_tvm.compile.lstm import VEC_KERNEL_PREFIX, recurrence_kernel_vec

    name, steps, hidden = shape
    xproj = relax.Var("xproj", relax.TensorType((1, steps, 2, 4 * hidden), "float32"))
    w_hh_t = relax.Var("w_hh_t", relax.TensorType((2, hidden, 4 * hidden), "float32"))
    lengths = relax.Var("lengths", relax.TensorType((1,), "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [xproj, w_hh_t, lengths]):
        with bb.dataflow():
            kernel = bb.add_func(recurrence_kernel_vec(1, steps, hidden),
                                 f"{VEC_KERNEL_PREFIX}{name}")
            # copies, as negated negations (TVM drops multiplications by one)
            inner = [bb.emit(relax.op.negative(relax.op.negative(v)))
                     for v in (xproj, w_hh_t, lengths)]
            out = bb.emit(relax.call_tir(kernel, inner,
                                         relax.TensorType((1, steps, 2 * hidden), "float32")))
            y = bb.emit_output(relax.op.negative(relax.op.negative(out)))
        bb.emit_func_output(y)
    return bb.get()


def lowered(shape: tuple, variant: str, target):
    """``module(shape)`` through our cuda pipeline with ``variant``'s recurrence kernel."""
    from kokoro_tvm.compile.gpu import lstm as gpu_lstm
    from kokoro_tvm.compile.lower import lower

    form = VARIANTS[variant]
    with mock.patch.object(gpu_lstm, "DEFAULT_KERNEL",
                           None if form is None else gpu_lstm.StepKernels(*form)):
        return lower(module(shape), target)


def flops(shape: tuple) -> float:
    """Multiply-adds x 2 of the recurrent products over the valid steps, both directions."""
    _, steps, hidden = shape
    return 2.0 * 2 * int(VALID * steps) * 4 * hidden * hidden
