"""The alignment on the device: an ``align`` function in the f0n and decoder libraries.

Between the token side and the frame side Kokoro repeats each token's features for its
frames (the alignment). The engine used to gather them on the host, then copy the frame
features to the device for every call: 9.4 MB at 2048 frames (f0n's ``en`` and the decoder's
``asr``), after copying the token features back. A library whose input is aligned
(``components.ALIGNED_INPUTS``) now has ``align(source, frame_token)``: the token-side output
as it came out of its library, still on the device, at any token bucket (its token count is
symbolic), and the token of every frame of this library's bucket (int32, -1 on padding, which
gets zeros) -> the input. Only ``frame_token`` (4 bytes a frame) crosses from the host.

One kernel, in a CPU form (channels in parallel) and a GPU form (a thread per output value),
marked scheduled.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.script import tirx as T

from kokoro_tvm.abi import ALIGN_FUNCTION, FRAME_TOKEN
from kokoro_tvm.compile.library_functions import add_kernel_function, input_types
from kokoro_tvm.components import ALIGNED_INPUTS, token_axis
from kokoro_tvm.facts import MAX_TOKENS

KERNEL_PREFIX = "align_frames_"
THREADS_PER_BLOCK = 256


@T.macro
def _gather(source, frame_token, out, c, f, axis):
    """out[0, c, f]: token frame_token[f]'s feature c, zero where it is -1."""
    token: T.let[T.int64] = T.Cast("int64", frame_token[f])
    safe: T.let[T.int64] = T.max(token, T.int64(0))
    out[0, c, f] = T.if_then_else(token >= 0, source[0, safe, c] if axis == 1
                                  else source[0, c, safe], T.float32(0))


def align_kernel(channels: int, frames: int, axis: int, gpu: bool = False,
                 tokens: int | None = None) -> tvm.tirx.PrimFunc:
    """source [1, tokens, channels] (``axis`` 1) or [1, channels, tokens] (``axis`` 2), any
    number of tokens (or ``tokens``); frame_token [frames] int32 -> out [1, channels, frames]:
    the CPU form (channels in parallel) or the GPU form (a thread per value)."""
    blocks = -(-channels * frames // THREADS_PER_BLOCK)

    @T.prim_func(private=True)
    def align_frames(var_source: T.handle, frame_token: T.Buffer((frames,), "int32"),
                     out: T.Buffer((1, channels, frames), "float32")):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        tokens = T.int64()
        source = T.match_buffer(var_source, (1, tokens, channels) if axis == 1
                                else (1, channels, tokens), "float32")
        if gpu:
            for block in T.thread_binding(blocks, thread="blockIdx.x"):
                for thread in T.thread_binding(THREADS_PER_BLOCK, thread="threadIdx.x"):
                    i: T.let[T.int64] = T.int64(block) * THREADS_PER_BLOCK + T.int64(thread)
                    if i < channels * frames:
                        _gather(source, frame_token, out, i // frames, i % frames, axis)
        else:
            for c in T.parallel(channels):
                for f in range(frames):
                    _gather(source, frame_token, out, c, f, axis)

    if tokens is None:
        return align_frames
    shape = (1, tokens, channels) if axis == 1 else (1, channels, tokens)
    return align_frames.specialize({align_frames.params[0]: tvm.tirx.decl_buffer(shape)})


def add_align_function(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """``mod`` with ``align(source, frame_token)`` added where a function takes an aligned
    input, drawn by the target's form of the kernel. Its source takes any number of tokens,
    except on webgpu, whose plans have static shapes: there it takes the largest token bucket
    (``MAX_TOKENS`` and the pads), and the player pads a smaller source (runtime/webgpu.py)."""
    found = input_types(mod, ALIGNED_INPUTS)
    if not found:
        return mod
    ((name, ty),) = found.items()
    source_name = ALIGNED_INPUTS[name]
    axis = token_axis(source_name)
    _, channels, frames = (int(d) for d in ty.shape)
    static = MAX_TOKENS + 2 if target.kind.name == "webgpu" else None
    tokens = tvm.tirx.Var("tokens", "int64") if static is None else static
    source_shape = (1, tokens, channels) if axis == 1 else (1, channels, tokens)
    params = [relax.Var(source_name, relax.TensorType(source_shape, "float32")),
              relax.Var(FRAME_TOKEN, relax.TensorType((frames,), "int32"))]
    return add_kernel_function(
        mod, ALIGN_FUNCTION, params,
        align_kernel(channels, frames, axis, gpu="gpu" in target.keys, tokens=static),
        f"{KERNEL_PREFIX}{source_name}_{frames}", relax.TensorType((1, channels, frames),
                                                                  "float32"))
