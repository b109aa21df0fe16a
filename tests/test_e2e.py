"""Speech from real-weight compiled libraries, end to end, against the PyTorch reference.

Built once per session by the README's main command with conftest's REAL_BUCKETS (the real
Kokoro-82M weights, one token bucket, two frame buckets, the smaller one also the lead's): the
TVM runtime must be heard as well as PyTorch by an offline recogniser, and must give PyTorch's
exact-length result whichever bucket pads it.
"""
from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest
import soundfile
from conftest import BIN, REAL_BUCKETS, model_folder
from transcribe import transcribe, word_error_rate

from kokoro_tvm import paths
from kokoro_tvm.facts import SAMPLE_RATE, SAMPLES_PER_FRAME
from kokoro_tvm.measure.metrics import INT8_SNR_DB_CAP, snr_db
from kokoro_tvm.model.reference import TorchEngine
from kokoro_tvm.runtime.engine import TvmEngine
from kokoro_tvm.runtime.g2p import phonemizer, token_ids
from kokoro_tvm.runtime.model_folder import AssetFolder, ModelFolder
from kokoro_tvm.runtime.speech import speak, speak_chunks
from kokoro_tvm.runtime.voices import load_voice, style_for

pytestmark = pytest.mark.slow

VOICES = ("af_heart", "am_adam")
FRAME_BUCKETS = REAL_BUCKETS["decoder"]
SENTENCES = [
    "Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back when you get home tonight.",
    "We will meet at the station at seven in the morning.",
]
SHORT_SENTENCE = "Hello there."  # under a second: fits the smallest frame bucket
# pocketsphinx hears the PyTorch reference imperfectly too; the TVM runtime may be worse by at
# most this much: five points of word error rate.
WER_MARGIN = 0.05
# The decoder waveform against PyTorch at exact length given the same noise draws
# (docs/fidelity.md): float32 rounding through the iSTFT generator gives 39-44 dB;
# the bar is 30 dB.
MIN_SNR_DB = 30.0


def _spoken(engine, speaker, voice: str) -> list[np.ndarray]:
    return [speak(engine, s, voice, speaker=speaker) for s in SENTENCES]


def _heard(engine, speaker, voice: str) -> list[str]:
    return [transcribe(audio) for audio in _spoken(engine, speaker, voice)]


def _corpus_wer(heard: list[str]) -> float:
    errors = sum(word_error_rate(s, h) * len(s.split()) for s, h in zip(SENTENCES, heard))
    return errors / sum(len(s.split()) for s in SENTENCES)


@pytest.fixture(scope="module")
def tvm_engine(real_built) -> TvmEngine:
    return TvmEngine(model_folder(real_built))


@pytest.fixture(scope="module")
def torch_spoken(real_built) -> dict[str, tuple[list[np.ndarray], list[str]]]:
    """Per voice, the PyTorch reference's audio of each sentence (the build's checkpoint) and
    what the recogniser hears of it: the baseline the TVM runtime's word error is held to."""
    engine, assets = TorchEngine(real_built), AssetFolder.of_build(real_built)
    spoken = {voice: _spoken(engine, assets, voice) for voice in VOICES}
    return {voice: (audio, [transcribe(a) for a in audio]) for voice, audio in spoken.items()}


@pytest.mark.parametrize("voice", VOICES)
def test_reference_speech_is_recognised(torch_spoken, voice):
    """The recovered real weights speak the words they are given: pocketsphinx's word error
    rate on the PyTorch reference's audio, at most 25% per sentence."""
    _, heard = torch_spoken[voice]
    for sentence, words in zip(SENTENCES, heard):
        assert word_error_rate(sentence, words) <= 0.25, (voice, sentence, words)


@pytest.fixture(scope="module")
def tvm_heard(tvm_engine) -> dict[str, list[str]]:
    """Per voice, what the recogniser hears of each sentence spoken whole by the TVM runtime
    (the word-error tests' shared baseline)."""
    return {voice: _heard(tvm_engine, tvm_engine.folder, voice) for voice in VOICES}


@pytest.mark.parametrize("voice", VOICES)
def test_tvm_speech_is_recognised_as_well_as_pytorch(tvm_heard, torch_spoken, voice):
    """The compiled libraries from the model folder, PyTorch on the build's checkpoint."""
    tvm_heard = tvm_heard[voice]
    tvm_wer = _corpus_wer(tvm_heard)
    _, torch_heard = torch_spoken[voice]
    torch_wer = _corpus_wer(torch_heard)
    print(f"{voice}: WER TVM {tvm_wer:.3f} {tvm_heard}, PyTorch {torch_wer:.3f} {torch_heard}")
    assert tvm_wer <= torch_wer + WER_MARGIN, (tvm_heard, torch_heard)


@pytest.mark.parametrize("voice", VOICES)
def test_int8_speech_is_recognised_as_well_as_pytorch(real_int8_built, torch_spoken, voice):
    """The int8 target's libraries (validated by the spectral bars in the build) must be heard
    as well as PyTorch too: the word-error bar that stands for them instead of the tight one.
    (real_int8_built is real_built with another target: the same checkpoint.)"""
    tvm = TvmEngine(model_folder(real_int8_built, "llvm_int8"))
    tvm_heard = _heard(tvm, tvm.folder, voice)
    _, torch_heard = torch_spoken[voice]
    tvm_wer, torch_wer = _corpus_wer(tvm_heard), _corpus_wer(torch_heard)
    print(f"{voice}: WER int8 {tvm_wer:.3f} {tvm_heard}, PyTorch {torch_wer:.3f} {torch_heard}")
    assert tvm_wer <= torch_wer + WER_MARGIN, (tvm_heard, torch_heard)
    validation = paths.VALIDATION.format(target="llvm_int8", component="decoder", lstm="none",
                                         bucket=max(FRAME_BUCKETS))
    report = json.loads((real_int8_built / validation).read_text())
    assert report["passed"] and "body.audio.relative_error" in report["metrics"]
    assert report["metrics"]["body.audio.relative_error"]["tolerance"] is None
    assert report["metrics"]["chained.audio.snr_db"]["tolerance"] <= INT8_SNR_DB_CAP


def test_streamed_speech_is_recognised_within_two_points_of_whole_sentences(tvm_engine,
                                                                             tvm_heard):
    """The stream's lead costs no intelligibility (runtime/speech.py): each sentence streamed as
    a text of its own, so that every one starts with a window decode of its first words, is heard
    within 2 points of word error of the same sentences spoken whole (both voices, 70 words)."""
    tvm = tvm_engine
    words = len(VOICES) * sum(len(s.split()) for s in SENTENCES)
    whole = streamed = 0.0
    for voice in VOICES:
        for sentence, heard_whole in zip(SENTENCES, tvm_heard[voice]):
            chunks = list(speak_chunks(tvm, sentence, voice, speaker=tvm.folder,
                                       per_sentence=True))
            assert len(chunks) == 2  # the lead and the rest: every sentence is over 64 frames
            heard = transcribe(np.concatenate([c.samples for c in chunks]))
            print(f"{voice}: {heard!r} streamed, {heard_whole!r} whole")
            streamed += word_error_rate(sentence, heard) * len(sentence.split()) / words
            whole += word_error_rate(sentence, heard_whole) * len(sentence.split()) / words
    print(f"word error: streamed {streamed:.3f}, whole {whole:.3f}")
    assert streamed <= whole + 0.02


def test_either_bucket_gives_pytorchs_exact_length_result(real_built):
    """One short utterance through each frame bucket's f0n and decoder libraries (a near fit,
    then padded more than twice over): durations identical to PyTorch at exact length, audio
    within MIN_SNR_DB of it (same SineGen noise draws)."""
    assets = AssetFolder.of_build(real_built)
    ids = token_ids(phonemizer("en-us")(SHORT_SENTENCE), assets.vocab)
    ref_s = style_for(load_voice("af_heart", assets), len(ids))
    torch_engine = TorchEngine(real_built, disable_complex=True)
    want, want_frames = torch_engine.synthesize_with_durations(ids, ref_s, 1.0, 7)
    assert want_frames.sum() <= min(FRAME_BUCKETS)  # fits every bucket
    for bucket in FRAME_BUCKETS:
        engine = TvmEngine(model_folder(real_built), noise=torch_engine.noise)
        for component in ("f0n", "decoder"):  # only this bucket left to choose from
            buckets = engine.components[component]
            buckets.entries = {bucket: buckets.entries[bucket]}
        got, frames = engine.synthesize_with_durations(ids, ref_s, 1.0, 7)
        np.testing.assert_array_equal(frames, want_frames)
        snr = snr_db(got, want)
        print(f"frame bucket {bucket}: {want_frames.sum()} frames, SNR {snr:.1f} dB")
        assert got.shape == want.shape and snr >= MIN_SNR_DB, (bucket, snr)


def test_spectrogram_figure(real_built, tmp_path):
    from kokoro_tvm.measure.spectrogram import spectrogram_comparison

    out = tmp_path / "spectrogram.png"
    figures = spectrogram_comparison(real_built, "llvm", SENTENCES[0], "af_heart", out)
    assert out.read_bytes().startswith(b"\x89PNG")
    assert figures["snr_db"] >= MIN_SNR_DB and figures["seconds"] > 1


def test_console_script_speaks_a_text_file_longer_than_any_bucket(real_built, tmp_path):
    """`kokoro-tvm say --file` with the default (TVM) engine: a text longer than the largest
    token and frame buckets, at speed 0.7, is split into pieces that fit and is still heard."""
    text = tmp_path / "long.txt"
    text.write_text(" ".join(SENTENCES), encoding="utf-8")
    out = tmp_path / "long.flac"
    done = subprocess.run([str(BIN / "kokoro-tvm"), "say", "--file", str(text), "--speed", "0.7",
                           "--model", str(model_folder(real_built)), "-o", str(out), "--verbose"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    audio, rate = soundfile.read(out, dtype="float32")
    chunks = [line for line in done.stderr.splitlines() if line.strip().startswith("chunk ")]
    # Longer than one bucket.
    assert rate == SAMPLE_RATE and len(audio) > max(FRAME_BUCKETS) * SAMPLES_PER_FRAME
    assert len(chunks) >= 2
    # --verbose counts the decoder's frames: the audio's, and the buckets they were padded to.
    (frames,) = re.findall(r"decoder frames: (\d+), padded to (\d+)", done.stderr)
    asked, computed = map(int, frames)
    assert asked * SAMPLES_PER_FRAME == len(audio) and asked <= computed
    heard = transcribe(audio)
    assert word_error_rate(" ".join(SENTENCES), heard) <= 0.3, heard


def test_stream_writes_each_sentence_as_raw_pcm(real_built):
    done = subprocess.run([str(BIN / "kokoro-tvm"), "say", "-", "--stream", "-o", "-",
                           "--model", str(model_folder(real_built))],
                          input=b"Hello there. How are you today?", capture_output=True)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "chunk 1 at 0.00 s" in stderr and "chunk 2 at" in stderr
    pcm = np.frombuffer(done.stdout, dtype="<i2")
    assert 2.0 < len(pcm) / SAMPLE_RATE < 5.0
    heard = transcribe(pcm.astype(np.float32) / 32767)
    assert word_error_rate("Hello there. How are you today?", heard) <= 0.4, heard


def test_torch_engine_of_the_cli_is_the_validated_reference(real_built, torch_spoken,
                                                             tmp_path):
    """`--engine torch` builds KModel from the model folder's own params: the same audio as
    the build's checkpoint gives (the reference validation compares against)."""
    out = tmp_path / "torch.wav"
    done = subprocess.run([str(BIN / "kokoro-tvm"), "say", SENTENCES[0], "--engine", "torch",
                           "--model", str(model_folder(real_built)), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    folder = ModelFolder(model_folder(real_built))
    from_folder = speak(TorchEngine.of_model_folder(folder), SENTENCES[0], "af_heart",
                        speaker=folder)
    (from_checkpoint, *_), _ = torch_spoken["af_heart"]
    np.testing.assert_array_equal(from_folder, from_checkpoint)
    written, _ = soundfile.read(out, dtype="float32")
    np.testing.assert_allclose(written, from_folder, atol=1 / 32767)  # 16-bit PCM


def test_validation_report_has_berts_exact_length_check_passed(real_built):
    """The build's validation report for bert at real weights holds the exact-length check (the
    library on a padded utterance against Kokoro's BERT on the utterance alone), within the
    tight bar (1e-4 of the scale), and passed. This reads what the validate stage recorded; the
    check itself runs in tests/test_lstm.py (bert, method none, on the tiny weights)."""
    report = json.loads((real_built / paths.VALIDATION.format(
        target="llvm", component="bert", lstm="none", bucket=64)).read_text())
    metrics = report["metrics"]
    length = metrics["exact_length.length"]["value"]
    error = metrics["exact_length.d_en.relative_error"]
    print(f"bert b64, {length} valid tokens: relative error {error['value']:.2e}")
    assert length < 64 and error["tolerance"] == 1e-4 and error["value"] <= 1e-4
    assert report["passed"]
