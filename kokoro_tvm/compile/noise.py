"""SineGen's random draws on the device: a ``noise`` function in every decoder library
(``abi.NOISE_FUNCTION``).

On a GPU the decoder's noise (one standard normal per audio sample, 1.2 million for a 45 s
sentence, and the nine harmonics' initial phases) would otherwise be drawn on the host and
copied; ``noise(key)`` draws it where the decoder runs, in the shapes its ``source`` function
takes. The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
1, 2, 3", SC11), counter-based: the four 32-bit words of counter ``(i, stream, 0, 0)`` under
the 64-bit key depend on nothing else, so every sample is drawn independently (a thread or loop
iteration per counter), a seed gives the same values on every target, bucket and call, and the
noise of fewer frames is a prefix of the noise of more (a stream's lead hears what the whole
chunk hears). Normals come from the words in pairs by the Box-Muller transform, on 24 bits of
each word (float32's precision); phases are a word's 24 bits over 2**24.

The kernel is written out with every intermediate value bound once (TVM's expression
inlining repeated each round's inputs, docs/gpu.md): a CPU form (a parallel loop over counters)
and a GPU form (a thread per counter), both marked scheduled. The CPU runtime keeps numpy's
draws (runtime/engine.py); validation checks each library's ``noise`` against the numpy
implementation of the same generator (measure/philox.py).
"""
from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.script import tirx as T

from kokoro_tvm.abi import (
    NOISE_FUNCTION,
    NOISE_INPUTS,
    NOISE_KEY,
    PHASE_STREAM,
    PHILOX_KEY_STEPS,
    PHILOX_MULTIPLIERS,
    PHILOX_ROUNDS,
    PHILOX_WORDS,
    SAMPLE_STREAM,
)
from kokoro_tvm.compile import fastmath
from kokoro_tvm.compile.library_functions import add_kernel_function, input_types
from kokoro_tvm.facts import HARMONICS

KERNEL_PREFIX = "philox_noise_"
THREADS_PER_BLOCK = 256
_TWO_PI = 2.0 * math.pi
_UNIT = 2.0 ** -24  # a word's top 24 bits as a float in [0, 1)


@T.macro
def _product(multiplier, word, mix, words, at):
    """``words[at]`` = the high half of ``multiplier * word`` (64 bits) ^ ``mix``, and
    ``words[at + 1]`` its low half, in uint32 alone (WebGPU has no 64-bit integers): the
    product of the 16-bit halves, each of which fits in 32 bits, carried by hand."""
    lo: T.let[T.uint32] = word & T.uint32(0xFFFF)
    hi: T.let[T.uint32] = T.shift_right(word, T.uint32(16))
    lo_lo: T.let[T.uint32] = T.uint32(multiplier & 0xFFFF) * lo
    hi_lo: T.let[T.uint32] = T.uint32(multiplier >> 16) * lo
    lo_hi: T.let[T.uint32] = T.uint32(multiplier & 0xFFFF) * hi
    middle: T.let[T.uint32] = (T.shift_right(lo_lo, T.uint32(16)) + (hi_lo & T.uint32(0xFFFF))
                               + (lo_hi & T.uint32(0xFFFF)))
    words[at] = (T.uint32(multiplier >> 16) * hi + T.shift_right(hi_lo, T.uint32(16))
                 + T.shift_right(lo_hi, T.uint32(16)) + T.shift_right(middle, T.uint32(16))) ^ mix
    words[at + 1] = T.uint32(multiplier) * word


@T.macro
def _philox(key, counter, stream, words, webgpu):
    """Philox4x32-10 of counter ``(counter, stream, 0, 0)`` under ``key`` into ``words``: the
    rounds' products in uint64, or for WebGPU in 16-bit halves (``_product``)."""
    words[0] = T.uint32(counter)
    words[1] = T.uint32(stream)
    words[2] = T.uint32(0)
    words[3] = T.uint32(0)
    for r in range(PHILOX_ROUNDS):
        k0: T.let[T.uint32] = key[0] + T.uint32(r) * T.uint32(PHILOX_KEY_STEPS[0])
        k1: T.let[T.uint32] = key[1] + T.uint32(r) * T.uint32(PHILOX_KEY_STEPS[1])
        w0: T.let[T.uint32] = words[0]
        w1: T.let[T.uint32] = words[1]
        w2: T.let[T.uint32] = words[2]
        w3: T.let[T.uint32] = words[3]
        if not webgpu:
            p0: T.let[T.uint64] = T.uint64(PHILOX_MULTIPLIERS[0]) * T.Cast("uint64", w0)
            p1: T.let[T.uint64] = T.uint64(PHILOX_MULTIPLIERS[1]) * T.Cast("uint64", w2)
            words[0] = T.Cast("uint32", T.shift_right(p1, T.uint64(32))) ^ w1 ^ k0
            words[1] = T.Cast("uint32", p1)
            words[2] = T.Cast("uint32", T.shift_right(p0, T.uint64(32))) ^ w3 ^ k1
            words[3] = T.Cast("uint32", p0)
        else:
            _product(PHILOX_MULTIPLIERS[1], w2, w1 ^ k0, words, 0)
            _product(PHILOX_MULTIPLIERS[0], w0, w3 ^ k1, words, 2)


def _unit(word):
    """A word's top 24 bits in [0, 1)."""
    return T.Cast("float32", T.shift_right(word, T.uint32(8))) * T.float32(_UNIT)


def _log(x, webgpu: bool):
    """The device's log, or for WebGPU the arithmetic form (fastmath.py): WGSL allows log an
    absolute error of 2^-21 on [0.5, 2], which near 1 is most of the value (and of a small
    radius)."""
    return fastmath.log(x) if webgpu else T.log(x)


def _circular(name: str, angle, webgpu: bool):
    """``name`` (sin or cos) of an angle in [0, 2 pi): the device's, or for WebGPU the
    arithmetic form (WGSL allows sin and cos 2^-11 absolute error; SwiftShader is off by
    2e-4)."""
    return getattr(fastmath, name)(angle, wide=False) if webgpu else getattr(T, name)(angle)


@T.macro
def _normals(key, counter, samples, words, noise, webgpu):
    """The four standard normals of ``counter`` (samples 4 * counter ..), Box-Muller on the
    word pairs (0, 1) and (2, 3); those past ``samples`` are not written."""
    _philox(key, counter, SAMPLE_STREAM, words, webgpu)
    for pair in range(2):
        # 1 - u is in (0, 1]: the logarithm stays finite.
        radius: T.let[T.float32] = T.sqrt(
            T.float32(-2.0) * _log(T.float32(1.0) - _unit(words[2 * pair]), webgpu))
        angle: T.let[T.float32] = T.float32(_TWO_PI) * _unit(words[2 * pair + 1])
        if counter * PHILOX_WORDS + 2 * pair < samples:
            noise[0, counter * PHILOX_WORDS + 2 * pair, 0] = (
                radius * _circular("cos", angle, webgpu))
        if counter * PHILOX_WORDS + 2 * pair + 1 < samples:
            noise[0, counter * PHILOX_WORDS + 2 * pair + 1, 0] = (
                radius * _circular("sin", angle, webgpu))


@T.macro
def _phases(key, words, phases, webgpu):
    for counter in range((HARMONICS + PHILOX_WORDS - 1) // PHILOX_WORDS):
        _philox(key, counter, PHASE_STREAM, words, webgpu)
        for w in range(PHILOX_WORDS):
            if counter * PHILOX_WORDS + w < HARMONICS:
                phases[0, counter * PHILOX_WORDS + w] = _unit(words[w])


def noise_kernel(samples: int, gpu: bool = False, webgpu: bool = False) -> tvm.tirx.PrimFunc:
    """key [2] uint32 -> phases [1, HARMONICS] in [0, 1), noise [1, samples, 1] standard
    normals; the CPU form (counters in parallel), or the GPU form (a thread per counter).
    ``webgpu``: WebGPU's form, without 64-bit integers (int32 counters, the products in 16-bit
    halves) and without WGSL's loose log, sin and cos."""
    counters = -(-samples // PHILOX_WORDS)
    blocks = -(-counters // THREADS_PER_BLOCK)

    @T.prim_func(private=True)
    def philox_noise(key: T.Buffer((2,), "uint32"),
                     phases: T.Buffer((1, HARMONICS), "float32"),
                     noise: T.Buffer((1, samples, 1), "float32")):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        if gpu:
            for block in T.thread_binding(blocks, thread="blockIdx.x"):
                for thread in T.thread_binding(THREADS_PER_BLOCK, thread="threadIdx.x"):
                    words = T.alloc_buffer((PHILOX_WORDS,), "uint32", scope="local")
                    if not webgpu:
                        counter: T.let[T.int64] = (T.int64(block) * THREADS_PER_BLOCK
                                                   + T.int64(thread))
                        if counter < counters:
                            _normals(key, counter, samples, words, noise, webgpu)
                    else:
                        counter32: T.let[T.int32] = block * THREADS_PER_BLOCK + thread
                        if counter32 < counters:
                            _normals(key, counter32, samples, words, noise, webgpu)
                    if block == 0 and thread == 0:
                        _phases(key, words, phases, webgpu)
        else:
            for counter in T.parallel(counters):
                words = T.alloc_buffer((PHILOX_WORDS,), "uint32", scope="local")
                _normals(key, T.int64(counter), samples, words, noise, webgpu)
            words = T.alloc_buffer((PHILOX_WORDS,), "uint32", scope="local")
            _phases(key, words, phases, webgpu)

    return philox_noise


def add_noise_function(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """``mod`` with ``noise(key)`` added where a function takes the noise inputs (the decoder's
    source), in the shapes it takes them, drawn by the target's form of the kernel."""
    found = input_types(mod, NOISE_INPUTS)
    if set(found) != set(NOISE_INPUTS):
        return mod
    harmonics, samples = (int(found[name].shape[1]) for name in NOISE_INPUTS)
    if harmonics != HARMONICS:
        raise ValueError(f"{NOISE_INPUTS[0]} has {harmonics} harmonics, the generator draws "
                         f"{HARMONICS}")
    return add_kernel_function(
        mod, NOISE_FUNCTION, [relax.Var(NOISE_KEY, relax.TensorType((2,), "uint32"))],
        noise_kernel(samples, gpu="gpu" in target.keys,
                     webgpu=target.kind.name == "webgpu"), f"{KERNEL_PREFIX}{samples}",
        [relax.TensorType((1, HARMONICS), "float32"),
         relax.TensorType((1, samples, 1), "float32")])
