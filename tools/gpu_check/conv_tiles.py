"""The decoder's heaviest convolutions, alone, under dlight's schedule and under our GPU
contraction schedule with several tiles (compile/gpu/contraction.py): which tile is fastest on
the GPU, beside PyTorch's cuDNN, in one run.

prepare.py builds one library per (shape, variant) into the bundle's ``tiles/``; check.py runs
each on seeded inputs against ``torch.nn.functional.conv1d`` / ``conv_transpose1d`` on the GPU
(TF32 off), with the same relative-error bar as the libraries, and times both.
"""
from __future__ import annotations

import dataclasses
from unittest import mock

# (name, kind, in channels, out channels, kernel, stride, dilation, padding, length): the
# generator's convolutions at the decoder's largest bucket (2048 frames), heaviest first.
SHAPES = (
    ("res2_k11", "conv1d", 128, 128, 11, 1, 1, 5, 245761),
    ("res2_k3_d5", "conv1d", 128, 128, 3, 1, 5, 5, 245761),
    ("res1_k7_d3", "conv1d", 256, 256, 7, 1, 3, 9, 40960),
    ("up1", "conv1d_transpose", 512, 256, 20, 10, 1, 5, 4096),
)
# dlight's own schedule of TVM's legalization, then tiles of ours.
VARIANTS = {
    "dlight": None,
    "t16x16_m4x4_v2": dict(thread_rows=16, thread_cols=16, row_micro=4, col_micro=4, vthreads=2),
    "t16x16_m8x4_v2": dict(thread_rows=16, thread_cols=16, row_micro=8, col_micro=4, vthreads=2),
    "t8x32_m8x4_v1": dict(thread_rows=8, thread_cols=32, row_micro=8, col_micro=4, vthreads=1),
    "t8x32_m8x4_v1_c16": dict(thread_rows=8, thread_cols=32, row_micro=8, col_micro=4,
                              vthreads=1, channels=16),
    "t8x32_m8x4_v2": dict(thread_rows=8, thread_cols=32, row_micro=8, col_micro=4, vthreads=2),
    "t16x16_m8x8_v1": dict(thread_rows=16, thread_cols=16, row_micro=8, col_micro=8, vthreads=1),
}


def module(shape: tuple):
    """A Relax module whose ``main`` is the one convolution of ``shape`` (input, weight)."""
    from tvm import relax

    _, kind, c_in, c_out, kernel, stride, dilation, padding, length = shape
    x = relax.Var("x", relax.TensorType((1, c_in, length), "float32"))
    weight_shape = (c_out, c_in, kernel) if kind == "conv1d" else (c_in, c_out, kernel)
    w = relax.Var("w", relax.TensorType(weight_shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            op = relax.op.nn.conv1d if kind == "conv1d" else relax.op.nn.conv1d_transpose
            y = bb.emit_output(bb.emit(op(x, w, strides=stride, padding=padding,
                                          dilation=dilation)))
        bb.emit_func_output(y)
    return bb.get()


def lowered(shape: tuple, variant: str, target):
    """``module(shape)`` through the cuda pipeline, with ``variant``'s schedule."""
    from tvm import relax

    from kokoro_tvm.compile.gpu import contraction
    from kokoro_tvm.compile.lower import lower

    mod = module(shape)
    tile = VARIANTS[variant]
    if tile is None:
        with target:
            return relax.backend.cuda.pipeline.get_default_pipeline(target)(mod)
    with mock.patch.object(contraction, "DEFAULT_TILE",
                           dataclasses.replace(contraction.DEFAULT_TILE, **tile)):
        return lower(mod, target)


def flops(shape: tuple) -> float:
    """Multiply-adds x 2 of the convolution (the useful ones: no zero-stuffing)."""
    from kokoro_tvm.compile.schedules.conv1d import output_length

    _, kind, c_in, c_out, kernel, stride, dilation, padding, length = shape
    if kind == "conv1d":
        out = output_length(length, kernel, stride, (padding, padding), dilation)
        return 2.0 * c_in * c_out * kernel * out
    return 2.0 * c_in * c_out * kernel * length
