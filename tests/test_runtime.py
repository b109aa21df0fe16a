"""The TVM runtime on the tiny build: same durations and audio as PyTorch, helpful errors."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import TINY_IDS as IDS
from conftest import TINY_SPEED as SPEED
from conftest import model_folder

from kokoro_tvm import paths
from kokoro_tvm.facts import SAMPLES_PER_FRAME
from kokoro_tvm.measure import bench_folders
from kokoro_tvm.measure.metrics import snr_db
from kokoro_tvm.model.reference import TorchEngine
from kokoro_tvm.runtime.engine import LIBRARY_NOISE, TvmEngine, buckets_within
from kokoro_tvm.runtime.library import Library, Weights
from kokoro_tvm.runtime.model_folder import ModelFolder, ModelFolderError
from kokoro_tvm.runtime.voices import style_for


def af_heart(built, ids: list[int]) -> np.ndarray:
    """The build's af_heart style for an utterance of ``ids`` (Kokoro's ref_s: one row)."""
    return style_for(np.load(paths.artifact(paths.ASSET_VOICE, built, voice="af_heart")),
                     len(ids))


@pytest.mark.parametrize("ids", [IDS, IDS[:9]], ids=["exact fit", "padded"])
def test_runtime_matches_pytorch_at_exact_length(built, ids):
    """Durations identical; audio at >= 100 dB SNR against KModel at exact length given the same
    noise draws, whether the chunk fills the 16-token and 16-frame buckets or is padded (11
    tokens, fewer frames: every component masks its padding)."""
    voice = af_heart(built, ids)
    torch_engine = TorchEngine(built, disable_complex=True)
    engine = TvmEngine(model_folder(built), noise=torch_engine.noise)
    tvm_audio, tvm_frames = engine.synthesize_with_durations(ids, voice, SPEED, 3)
    torch_audio, torch_frames = torch_engine.synthesize_with_durations(ids, voice, SPEED, 3)
    np.testing.assert_array_equal(tvm_frames, torch_frames)
    if len(ids) + 2 == 16:
        assert tvm_frames.sum() == 16  # SPEED's purpose: the exact fit fills the frame bucket
    else:
        assert tvm_frames.sum() < 16  # the padded case pads frames too
    assert tvm_audio.shape == torch_audio.shape == (600 * tvm_frames.sum(),)
    snr = snr_db(tvm_audio, torch_audio)
    print(f"{len(ids) + 2} tokens, {tvm_frames.sum()} frames: {snr:.1f} dB")
    assert snr >= 100  # measured 110.5 dB (exact fit), 110.8 dB (padded)


def test_missing_bucket_names_the_snakemake_target(built):
    engine = TvmEngine(model_folder(built))
    voice = af_heart(built, IDS)
    with pytest.raises(ModelFolderError, match=r"buckets.f0n in config.yaml and rebuild the "
                                               r"folder: snakemake --cores 2 results/dist/llvm"):
        engine.synthesize(IDS, voice, 1.0, 0)


def test_changed_library_is_refused_when_loaded(built, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(model_folder(built), copy)
    folder = ModelFolder(copy)
    library = copy / folder.libraries[0]["library"]
    library.write_bytes(library.read_bytes() + b"\0")
    with pytest.raises(ModelFolderError, match="does not match the model folder's sha256"):
        folder.file(folder.libraries[0]["library"])


@pytest.mark.parametrize("function, noise", [("align", None), ("noise", LIBRARY_NOISE)])
def test_a_folder_whose_libraries_lack_a_function_is_refused(built, tmp_path, function, noise):
    """A folder built before the alignment (or the noise) moved into the libraries: refused
    when the engine starts, naming the function and the rebuild, before any utterance."""
    copy = tmp_path / "model"
    shutil.copytree(model_folder(built), copy)
    manifest = json.loads((copy / paths.MODEL_MANIFEST).read_text())
    for entry in manifest["libraries"]:
        entry["transforms"].pop(function, None)
    (copy / paths.MODEL_MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ModelFolderError, match=rf"lacks {function}: it was built by an older "
                                               r"kokoro-tvm; rebuild the folder with: snakemake"):
        TvmEngine(copy, noise=noise)


def test_only_ids_style_and_small_control_arrays_cross_to_the_device(built):
    """Per chunk with the libraries' own noise (as on a GPU): to the device the token ids, their
    masks and the style (text side), each frame's token and the frame mask (f0n, decoder), the
    noise key; back the durations and the audio, nothing else: the token side's features, F0, N,
    the noise and the harmonic source stay where the libraries run."""
    engine = TvmEngine(model_folder(built), noise=LIBRARY_NOISE)
    voice = af_heart(built, IDS)
    engine.copies.clear()
    audio, durations = engine.synthesize_with_durations(IDS, voice, SPEED, 0)
    copies = {stage: engine.copies[stage] for stage in ("text", "f0n", "noise", "decoder")}
    assert [copies[s].to_device for s in copies] == [5, 2, 1, 2]
    assert [copies[s].to_host for s in copies] == [1, 0, 0, 1]
    bucket = 16
    assert copies["text"].to_device_bytes == 2 * 128 * 4 + bucket * (8 + 1 + 8)
    assert copies["noise"].to_device_bytes == 8  # the key: two uint32
    assert copies["f0n"].to_device_bytes == copies["decoder"].to_device_bytes == bucket * (4 + 1)
    assert copies["decoder"].to_host_bytes == SAMPLES_PER_FRAME * bucket * 4  # the audio
    assert len(audio) == SAMPLES_PER_FRAME * durations.sum()


def test_a_chunks_device_tensors_outlive_the_next_chunks_calls(built):
    """A stream makes the next chunk's prosody before it decodes this one: the device tensors
    a prosody keeps (the text encoder's features, F0, N) must not be overwritten by the next
    calls of the same libraries."""
    engine = TvmEngine(model_folder(built), noise=LIBRARY_NOISE)
    voice = af_heart(built, IDS)
    alone = engine.synthesize(IDS, voice, SPEED, 4)
    first = engine.prosody(IDS, voice, SPEED, 4)
    engine.prosody(IDS[:9], af_heart(built, IDS[:9]), SPEED * 0.9, 5)  # another chunk
    np.testing.assert_array_equal(engine.decode(first), alone)


def test_equal_prepared_weights_are_kept_once(built):
    """Two libraries of the decoder (the llvm and llvm_generic builds: other vector widths, so
    some prepared weights differ) on one Weights: a prepared tensor is shared exactly when its
    contents equal the other library's, and each library's prepared weights are those it
    prepares alone."""
    manifest = json.loads((built / "results/manifest/llvm.json").read_text())
    entry = next(e for e in manifest["libraries"] if e["component"] == "decoder")
    libraries = [built / entry["library"],
                 built / entry["library"].replace("/llvm/", "/llvm_generic/", 1)]
    params = built / paths.PARAMS.format(component="decoder")
    weights = Weights(params)
    first, second = (Library(p, weights).prepared("body") for p in libraries)
    assert len(first) == len(second)
    pairs = [(a.same_as(b), a.shape == b.shape and np.array_equal(a.numpy(), b.numpy()))
             for a, b in zip(first, second)]
    assert all(shared == equal for shared, equal in pairs)
    assert any(shared for shared, _ in pairs)
    assert not all(equal for _, equal in pairs)  # so unequal ones were seen not to be shared
    alone = Library(libraries[0], Weights(params)).prepared("body")
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(first, alone))


def test_a_frame_bound_keeps_the_buckets_up_to_the_first_that_holds_it():
    """A folder's frame buckets under ``max_frames``: a bound between two buckets keeps the
    larger (coarse buckets lose none a chunk of that length needs); one past the largest keeps
    all; one below the smallest keeps the smallest."""
    buckets = [256, 32, 64, 160]
    assert buckets_within(buckets, 160) == [32, 64, 160]
    assert buckets_within(buckets, 100) == [32, 64, 160]
    assert buckets_within(buckets, 2000) == [32, 64, 160, 256]
    assert buckets_within(buckets, 10) == [32]


def test_missing_model_folder_says_how_to_build(tmp_path):
    with pytest.raises(ModelFolderError, match="snakemake --cores 2 results/dist/llvm"):
        TvmEngine(tmp_path / "results/dist/llvm")


def test_numpy_noise_is_fixed_by_the_seed_not_the_threads(monkeypatch):
    """SineGen's noise as the engine draws it (seeded chunks over several threads): the same
    for a seed whatever the thread count, another for another seed, standard normal, with
    initial phases in [0, 1)."""
    from kokoro_tvm.runtime import engine

    frames = 300  # 180,000 samples: several chunks, the last one partial
    monkeypatch.setattr(engine, "NOISE_THREADS", 1)
    phases, noise = engine.numpy_noise(7, frames)
    monkeypatch.setattr(engine, "NOISE_THREADS", 4)
    again = engine.numpy_noise(7, frames)
    assert np.array_equal(phases, again[0]) and np.array_equal(noise, again[1])
    assert noise.shape == (1, 600 * frames, 1) and noise.dtype == np.float32
    assert not np.array_equal(noise, engine.numpy_noise(8, frames)[1])
    assert abs(float(noise.mean())) < 0.01 and abs(float(noise.std()) - 1) < 0.01
    # Chunks are independent streams: no chunk repeats another.
    chunk = engine.NOISE_CHUNK
    assert not np.array_equal(noise[0, :chunk], noise[0, chunk:2 * chunk])
    assert phases.shape == (1, 9) and 0 <= phases.min() and phases.max() < 1
    # Fewer frames draw a prefix of these: a chunk's start decoded alone hears the same noise.
    few_phases, few = engine.numpy_noise(7, 120)  # 72,000 samples: a chunk and part of one
    assert np.array_equal(few_phases, phases) and np.array_equal(few, noise[:, :600 * 120])


def test_a_chunks_start_decodes_alone_as_pytorchs_decoder_does(built):
    """speech.LeadingEngine, for a stream's lead: prosody then decode is synthesize, in both
    engines, and decoding the first frames alone agrees with KModel's decoder on those frames
    (>= 100 dB given the same noise draws) in a bucket larger than them."""
    voice = af_heart(built, IDS)
    tvm, torch_engine = TvmEngine(model_folder(built)), TorchEngine(built, disable_complex=True)
    prosody = tvm.prosody(IDS, voice, SPEED, 3)
    np.testing.assert_array_equal(tvm.decode(prosody), tvm.synthesize(IDS, voice, SPEED, 3))
    reference = torch_engine.prosody(IDS, voice, SPEED, 3)
    np.testing.assert_array_equal(torch_engine.decode(reference),
                                  torch_engine.synthesize(IDS, voice, SPEED, 3))
    np.testing.assert_array_equal(prosody.durations, reference.durations)

    frames = 10  # of 16, in the 16-frame bucket
    assert (tvm.decode_frames(frames), torch_engine.decode_frames(frames)) == (16, frames)
    # KModel draws the window's noise after the seed, as TorchEngine.noise does for that many
    # frames.
    window_noise = TvmEngine(model_folder(built),
                             noise=lambda seed, _: torch_engine.noise(seed, frames))
    window = window_noise.decode(window_noise.prosody(IDS, voice, SPEED, 3), frames)
    expected = torch_engine.decode(reference, frames)
    assert window.shape == expected.shape == (600 * frames,)
    assert snr_db(window, expected) >= 100  # measured 110.5 dB
    # Not the whole's start, noise alike: the decoder normalises over the frames it is given
    # (measured 19.4 dB; the bar is 10 dB above).
    assert snr_db(tvm.decode(prosody, frames), tvm.decode(prosody)[:600 * frames]) < 29


@pytest.mark.parametrize("ids", [IDS, IDS[:9]], ids=["exact fit", "padded"])
def test_engine_counts_the_decoders_frames_and_their_padding(built, ids):
    """decoder_frames: the frames of the audio, and those of the bucket they were padded to
    (the tiny build has one, 16 frames)."""
    voice = af_heart(built, ids)
    engine = TvmEngine(model_folder(built))
    audio = engine.synthesize(ids, voice, SPEED, seed=0)
    assert engine.decoder_frames == {"asked": len(audio) // SAMPLES_PER_FRAME, "computed": 16}
    engine.synthesize(ids, voice, SPEED, seed=0)
    assert engine.decoder_frames == {"asked": 2 * len(audio) // SAMPLES_PER_FRAME,
                                     "computed": 32}


def test_bench_folders_compares_a_folder_with_its_baseline(built, tmp_path):
    """bench_folders on one folder against itself: the same frames on both sides, and the
    padding share they imply."""
    folder = model_folder(built)
    text = tmp_path / "text.txt"
    text.write_text("Hi. Go on.")
    figures = bench_folders.main([str(folder), str(folder), "--text", str(text), "--speed",
                                  str(SPEED), "--rounds", "1"])
    baseline, same = figures["baseline"], figures["folder"]
    assert (baseline["frames_asked"], baseline["frames_computed"]) == (
        same["frames_asked"], same["frames_computed"])
    assert 0 < same["frames_asked"] <= same["frames_computed"]
    assert same["frames_computed"] % 16 == 0  # whole buckets
    assert same["frames_computed_vs_baseline"] == 1
    assert same["padding_share"] == pytest.approx(
        1 - same["frames_asked"] / same["frames_computed"])


def test_the_naive_allocator_gives_the_same_audio(built):
    """allocator="naive" (a server's: each call frees its activations) computes what the
    pooled allocator does, call after call."""
    voice = af_heart(built, IDS)
    pooled = TvmEngine(model_folder(built)).synthesize(IDS, voice, SPEED, 3)
    naive = TvmEngine(model_folder(built), allocator="naive")
    for _ in range(2):
        np.testing.assert_array_equal(naive.synthesize(IDS, voice, SPEED, 3), pooled)


def test_the_pool_holds_one_decoder_bucket_and_is_released_when_it_changes(real_built,
                                                                             monkeypatch):
    """With the pooled allocator, TVM's pool is released when the decoder's bucket changes (a
    stream's lead, then its whole chunk), not between calls at the same bucket, and the audio
    is the same bit for bit after a release (the chunk's device tensors outlive it); with the
    naive allocator the release (then the C heap's trim alone) follows the bucket likewise. On
    the real-weight folder, whose decoder has two buckets."""
    import kokoro_tvm.runtime.engine as engine_module

    released = []
    release = engine_module.release_pooled_memory
    monkeypatch.setattr(engine_module, "release_pooled_memory",
                        lambda: (released.append(True), release()))
    folder = model_folder(real_built)
    engine = TvmEngine(folder)
    small, large = sorted(engine.components["decoder"].entries)[:2]
    ids = list(range(16, 36))
    voice = af_heart(real_built, ids)
    frames = len(engine.prosody(ids, voice, 1.0, 0).frame_token)
    prosody = engine.prosody(ids, voice, frames / ((small + large) / 2), 0)
    assert small < len(prosody.frame_token) <= large
    whole = engine.decode(prosody)
    np.testing.assert_array_equal(engine.decode(prosody), whole)
    assert len(released) == 1
    lead = engine.decode(prosody, small)
    assert len(released) == 2
    np.testing.assert_array_equal(engine.decode(prosody), whole)
    np.testing.assert_array_equal(engine.decode(prosody, small), lead)
    assert len(released) == 4

    naive = TvmEngine(folder, allocator="naive")
    for _ in range(2):
        naive.decode(prosody)
    assert len(released) == 5
