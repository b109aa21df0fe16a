"""The int8 convolutions of ``precision: int8`` (compile/quantize.py), each part in isolation.

The integer product must be exact (it is integer arithmetic); the activation kernels must
quantize as numpy does, padding included; the pass must take the generator's convolutions and
nothing else; and a CPU without VNNI must be refused with the fix named.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, te

from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.devices import INT8_MAX_FRAMES, library_precision
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.quantize import (
    activation_qparams_kernel,
    conv1d_int8_compute,
    missing_features,
    quantize_activations_kernel,
    quantize_convs,
)
from kokoro_tvm.compile.schedules.contraction import apply_contraction
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.measure.metrics import snr_db
from kokoro_tvm.runtime.library import Library, Weights

HOST = make_target({"kind": "llvm", "mcpu": "host", "num-cores": 2})
needs_vnni = pytest.mark.skipif(bool(missing_features(HOST)),
                                reason="this CPU has no AVX-512 VNNI: int8 libraries cannot run")
# On Gaussian inputs one int8 convolution (uint8 activations per tensor, int8 weights per
# channel) measured 40 dB against float32; a wrong zero point or scale gives far less.
MIN_CONV_SNR_DB = 35.0
GENERATOR_WEIGHT = "decoder.generator.resblocks.0.convs1.0.weight"
OTHER_WEIGHT = "decoder.decode.0.conv1.weight"


def _tensors(*arrays):
    return [tvm.runtime.tensor(a) for a in arrays]


@needs_vnni
@pytest.mark.parametrize("out_ch, in_ch, length, kernel, dilation",
                         [(48, 64, 200, 3, 2), (16, 8, 37, 7, 1), (32, 32, 1000, 11, 5)])
def test_int8_product_is_exact(out_ch, in_ch, length, kernel, dilation):
    """The scheduled, tensorized contraction against numpy's integer convolution, ragged
    time tiles included; with unit scales the dequantized result is an exact integer."""
    rng = np.random.default_rng(0)
    span = length + 64 + dilation * (kernel - 1)  # room for the padded tiles
    xq = te.placeholder((1, in_ch // 4, span, 4), "uint8", name="xq")
    wq = te.placeholder((out_ch, in_ch // 4, kernel, 4), "int8", name="wq")
    zero_sums = te.placeholder((out_ch,), "int32", name="zero_sums")
    wscale = te.placeholder((out_ch,), "float32", name="wscale")
    y = conv1d_int8_compute(xq, wq, zero_sums, wscale, dilation, length,
                            padded=-(-length // 64) * 64)
    func = te.create_prim_func([xq, wq, zero_sums, wscale, y]).with_attr("global_symbol", "conv")
    sch = apply_contraction(func, HOST)
    assert sch is not None
    assert "vpdpbusd" in sch.mod.script()
    library = tvm.tirx.build(sch.mod, target=HOST)
    x = rng.integers(0, 256, (1, in_ch // 4, span, 4), dtype=np.uint8)
    w = rng.integers(-127, 128, (out_ch, in_ch // 4, kernel, 4), dtype=np.int8)
    zero_sums = rng.integers(-10**5, 10**5, out_ch).astype(np.int32)
    out = np.zeros((1, out_ch, length), np.float32)
    args = _tensors(x, w, zero_sums, np.ones(out_ch, np.float32), out)
    library["conv"](*args)
    xs, ws = x.astype(np.int64), w.astype(np.int64)
    expected = np.zeros((out_ch, length), np.int64)
    for k in range(kernel):
        window = xs[0, :, k * dilation:k * dilation + length, :]
        expected += np.einsum("gti,ogi->ot", window, ws[:, :, k, :])
    expected -= zero_sums[:, None].astype(np.int64)
    np.testing.assert_array_equal(args[-1].numpy()[0], expected.astype(np.float32))


@needs_vnni
@pytest.mark.parametrize("channels, length, left, span",
                         [(8, 37, 3, 64), (64, 1000, 5, 1040), (4, 16, 0, 16)])
def test_activation_kernels_quantize_as_numpy(channels, length, left, span):
    """Per channel, scale and zero point over its range and zero (channels of different
    ranges, one all positive); uint8 values packed [C/4, span, 4], the zero point on the
    padding before and after (ragged vectors at both edges)."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((1, channels, length))
         * rng.uniform(0.1, 10, (1, channels, 1)) + 1).astype(np.float32)
    x[0, 0] = np.abs(x[0, 0])
    qparams = tvm.runtime.tensor(np.zeros((channels, 2), np.float32))
    ranges = tvm.tirx.build(activation_qparams_kernel(channels, length)
                            .with_attr("global_symbol", "f"), target=HOST)
    ranges["f"](tvm.runtime.tensor(x), qparams)
    low = np.minimum(x[0].min(axis=1), 0.0)
    high = np.maximum(x[0].max(axis=1), 0.0)
    scale, zero = qparams.numpy().T
    np.testing.assert_allclose(scale, (high - low) / 255, rtol=1e-6)
    np.testing.assert_array_equal(zero, np.round(-low / scale))
    assert zero[0] == 0

    packed = tvm.runtime.tensor(np.full((1, channels // 4, span, 4), 255, np.uint8))
    quantize = tvm.tirx.build(quantize_activations_kernel(channels, length, left, span)
                              .with_attr("global_symbol", "f"), target=HOST)
    quantize["f"](tvm.runtime.tensor(x), qparams, packed)
    expected = np.repeat(zero[:, None], span, axis=1)
    expected[:, left:left + length] = np.clip(np.round(x[0] / scale[:, None]) + zero[:, None],
                                              0, 255)
    got = packed.numpy()[0].transpose(0, 2, 1).reshape(channels, span)
    np.testing.assert_array_equal(got, expected.astype(np.uint8))


def _two_convs(length: int, first: str = GENERATOR_WEIGHT,
               second: str = OTHER_WEIGHT) -> tvm.IRModule:
    """x -> conv (weight ``first``: a generator residual block's) -> conv (weight ``second``:
    another decoder weight), both with padding."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 32, length), "float32"))
    w1 = relax.Var(first, relax.TensorType((32, 32, 3), "float32"))
    w2 = relax.Var(second, relax.TensorType((32, 32, 3), "float32"))
    with bb.function("main", [x, w1, w2], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv1d(x, w1, padding=3, dilation=3))
            y = bb.emit(relax.op.nn.conv1d(y, w2, padding=1))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _int8_kernels(mod: tvm.IRModule) -> list[str]:
    return [g.name_hint for g, f in mod.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and "vpdpbusd" in f.script()]


@pytest.mark.parametrize("first, second, quantized", [
    (GENERATOR_WEIGHT, OTHER_WEIGHT, 1),
    (GENERATOR_WEIGHT, "decoder.generator.noise_res.1.convs2.0.weight", 2),
    (OTHER_WEIGHT, "decoder.generator.conv_post.weight", 0),
])
def test_pass_quantizes_the_generator_convolutions_only(first, second, quantized):
    """Chosen by weight name: the generator's residual and noise blocks, not its conv_post nor
    the decode blocks; and nothing at float32."""
    target = make_target({"kind": "llvm", "mcpu": "znver4"})
    mod = _two_convs(100, first, second)
    assert len(_int8_kernels(lower(mod, target, precision="int8"))) == quantized
    assert _int8_kernels(lower(mod, target)) == []


@needs_vnni
def test_quantized_library_is_close_to_float32(tmp_path):
    """Built and run as the pipeline does (weights quantized by the weight transform): the
    int8 convolution's output against the float32 library's."""
    rng = np.random.default_rng(2)
    length = 300
    weights = {GENERATOR_WEIGHT: rng.standard_normal((32, 32, 3)).astype(np.float32) / 10,
               OTHER_WEIGHT: rng.standard_normal((32, 32, 3)).astype(np.float32) / 10}
    x = rng.standard_normal((1, 32, length)).astype(np.float32)
    outs = {}
    for precision in ("float32", "int8"):
        so = tmp_path / f"{precision}.so"
        build_library(lower(_two_convs(length), HOST, precision=precision), HOST, so)
        library = Library(so, Weights(weights, tvm.cpu()))
        result = library.bind("main", {"x": x})()
        outs[precision] = (result if hasattr(result, "numpy") else result[0]).numpy()
    ref, out = outs["float32"], outs["int8"]
    snr = snr_db(out, ref)
    assert snr >= MIN_CONV_SNR_DB, snr


def test_cpu_without_vnni_is_refused_with_the_fix():
    target = make_target({"kind": "llvm", "mcpu": "skylake-avx512"})
    with pytest.raises(ValueError, match="avx512vnni.*float32"):
        quantize_convs(target)


def test_int8_covers_the_decoder_up_to_its_frame_limit_only():
    """Longer decoder buckets and the other components of an int8 target stay float32."""
    int8 = {"kind": "llvm", "mcpu": "host", "precision": "int8"}
    assert library_precision(int8, "decoder", INT8_MAX_FRAMES) == "int8"
    assert library_precision(int8, "decoder", INT8_MAX_FRAMES + 1) == "float32"
    assert library_precision(int8, "bert", 64) == "float32"
    assert library_precision({"kind": "llvm", "mcpu": "host"}, "decoder", 128) == "float32"
