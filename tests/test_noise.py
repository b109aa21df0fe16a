"""SineGen's noise drawn by the decoder libraries (compile/noise.py): Philox4x32-10 against
Random123's known answers, the kernel against its numpy implementation (measure/philox.py), its
statistics, its CUDA form, and the engine drawing it through the library."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import tvm
from conftest import TINY_IDS, TINY_SPEED, model_folder, needs_nvcc

from kokoro_tvm import paths
from kokoro_tvm.abi import NOISE_FUNCTION, NOISE_INPUTS, noise_key
from kokoro_tvm.compile import gpu
from kokoro_tvm.compile.noise import add_noise_function, noise_kernel
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.facts import HARMONICS, SAMPLES_PER_FRAME
from kokoro_tvm.measure.metrics import snr_db
from kokoro_tvm.measure.philox import device_noise, philox_block
from kokoro_tvm.runtime.engine import LIBRARY_NOISE, TvmEngine
from kokoro_tvm.runtime.voices import style_for

# Random123's tests/kat_vectors, the three philox4x32 10 lines: counter, key, result.
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_philox_gives_random123s_known_answers(counter, key, expected):
    words = philox_block(np.array(key, np.uint32), np.array(counter, np.uint32))
    assert tuple(int(w) for w in words) == expected


@functools.cache
def _kernel(samples: int, webgpu: bool = False):
    """The CPU kernel, built alone for this machine; ``webgpu``: in WebGPU's form (products in
    16-bit halves, log's series near 1, the arithmetic sin and cos)."""
    func = noise_kernel(samples, webgpu=webgpu).with_attr("global_symbol", "noise")
    return tvm.compile(tvm.IRModule({"noise": func}), target=make_target({"kind": "llvm"}))


def _draw(samples: int, seed: int, webgpu: bool = False) -> tuple[np.ndarray, np.ndarray]:
    kernel, device = _kernel(samples, webgpu), tvm.cpu()
    phases = tvm.runtime.empty((1, HARMONICS), "float32", device)
    noise = tvm.runtime.empty((1, samples, 1), "float32", device)
    kernel["noise"](tvm.runtime.tensor(noise_key(seed), device), phases, noise)
    return phases.numpy(), noise.numpy()


@pytest.mark.parametrize("webgpu", [False, True], ids=["native", "webgpu"])
@pytest.mark.parametrize("samples, seed", [(4, 0), (1001, 7), (SAMPLES_PER_FRAME * 32, 2**40 + 3)])
def test_kernel_draws_what_numpy_computes(samples, seed, webgpu):
    """The same Philox words (phases, from 24 bits of a word, are equal bit for bit), then
    Box-Muller in float32 against float64: within a few float32 steps of values up to ~5. Both
    forms: the native one, and WebGPU's (its integer and float32 arithmetic, run here)."""
    phases, noise = _draw(samples, seed, webgpu)
    want_phases, want_noise = device_noise(seed, samples)
    np.testing.assert_array_equal(phases, want_phases)
    assert noise.shape == want_noise.shape == (1, samples, 1)
    assert np.max(np.abs(noise - want_noise)) < 5e-6


def test_a_seed_fixes_the_noise_and_fewer_samples_draw_a_prefix():
    phases, noise = _draw(SAMPLES_PER_FRAME * 20, 5)
    again_phases, again = _draw(SAMPLES_PER_FRAME * 20, 5)
    np.testing.assert_array_equal(noise, again)
    np.testing.assert_array_equal(phases, again_phases)
    few_phases, few = _draw(SAMPLES_PER_FRAME * 7 + 3, 5)  # not a whole counter's four
    np.testing.assert_array_equal(few, noise[:, :few.shape[1]])
    np.testing.assert_array_equal(few_phases, phases)
    other_phases, other = _draw(SAMPLES_PER_FRAME * 20, 6)
    assert not np.any(other == noise) and not np.any(other_phases == phases)
    # The key's high word counts too.
    assert not np.any(_draw(64, 5 + (1 << 32))[1] == noise[:, :64])


def test_noise_is_standard_normal_and_phases_uniform():
    """A million draws: mean, deviation, the normal CDF at seven points (Kolmogorov-Smirnov's
    1% critical distance is 1.63 / sqrt(n) = 0.0016), and no correlation between neighbours
    (the two values of a Box-Muller pair included); 900 phases in [0, 1)."""
    noise = _draw(1 << 20, 11)[1].reshape(-1).astype(np.float64)
    assert abs(noise.mean()) < 0.005 and abs(noise.std() - 1) < 0.005
    for z in (-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5):
        assert abs(np.mean(noise <= z) - 0.5 * (1 + math.erf(z / math.sqrt(2)))) < 0.0016
    for lag in (1, 2, 4):
        assert abs(np.corrcoef(noise[:-lag], noise[lag:])[0, 1]) < 0.005
    phases = np.concatenate([_draw(4, seed)[0] for seed in range(100)]).reshape(-1)
    assert phases.min() >= 0 and phases.max() < 1 and abs(phases.mean() - 0.5) < 0.05


@needs_nvcc
def test_cuda_form_is_a_thread_per_counter_without_fast_math():
    """The GPU form's CUDA source: blocks of threads over the counters, Philox's multipliers,
    and accurate single-precision log, sine and cosine (no fast-math intrinsics)."""
    from tvm import relax

    samples = SAMPLES_PER_FRAME * 64
    bb = relax.BlockBuilder()
    phases = relax.Var(NOISE_INPUTS[0], relax.TensorType((1, HARMONICS), "float32"))
    noise = relax.Var(NOISE_INPUTS[1], relax.TensorType((1, samples, 1), "float32"))
    with bb.function("source", [phases, noise], {"num_input": 2}):
        bb.emit_func_output(relax.op.sum(noise))
    target = make_target({"kind": "cuda", "arch": "sm_90"})
    from kokoro_tvm.compile.lower import lower

    lowered = lower(add_noise_function(bb.get(), target), target)
    assert NOISE_FUNCTION in {gvar.name_hint for gvar in lowered.get_global_vars()}
    source = "\n".join(gpu.cuda_sources(lowered, target))
    kernel = source[source.index("philox_noise"):]
    assert "blockIdx.x" in kernel and "threadIdx.x" in kernel
    assert "3528531795" in kernel and "3449720151" in kernel  # 0xD2511F53, 0xCD9E8D57
    for call in ("logf", "sinf", "cosf", "sqrtf"):
        assert f"{call}(" in kernel
    for fast in ("__logf", "__sinf", "__cosf", "__expf"):
        assert fast not in kernel


def test_engine_draws_the_noise_in_the_decoder_library(built):
    """The runtime with the libraries' generator: the same audio as given those draws from
    numpy (the padding's noise, which only the library draws, does not reach the valid
    samples), and a seed that fixes it."""
    folder = model_folder(built)
    voice = style_for(np.load(paths.artifact(paths.ASSET_VOICE, built, voice="af_heart")),
                      len(TINY_IDS))
    library = TvmEngine(folder, noise=LIBRARY_NOISE)
    audio = library.synthesize(TINY_IDS, voice, TINY_SPEED, 9)
    given = TvmEngine(folder, noise=lambda seed, frames: device_noise(
        seed, SAMPLES_PER_FRAME * frames))
    expected = given.synthesize(TINY_IDS, voice, TINY_SPEED, 9)
    assert audio.shape == expected.shape
    assert snr_db(audio, expected) > 100
    np.testing.assert_array_equal(audio, library.synthesize(TINY_IDS, voice, TINY_SPEED, 9))
    assert snr_db(library.synthesize(TINY_IDS, voice, TINY_SPEED, 10), audio) < 60
