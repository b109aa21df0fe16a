"""The PyTorch reference on the recovered real weights speaks the words it is given."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import soundfile
from transcribe import transcribe, word_error_rate

from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.model.reference import TorchEngine
from kokoro_tvm.runtime.speech import speak

pytestmark = pytest.mark.slow

SENTENCES = [
    "Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back when you get home tonight.",
]


@pytest.fixture(scope="module")
def engine(real_assets):
    return TorchEngine(real_assets)


@pytest.mark.parametrize("voice", ["af_heart", "am_adam"])
def test_reference_speech_is_recognised(engine, real_assets, voice):
    """pocketsphinx's word error rate on the reference audio, at most 25% per sentence."""
    for sentence in SENTENCES:
        audio = speak(engine, sentence, voice, root=real_assets)
        heard = transcribe(audio)
        assert word_error_rate(sentence, heard) <= 0.25, (voice, sentence, heard)


def test_seed_makes_audio_repeatable(engine, real_assets):
    first = speak(engine, SENTENCES[0], "af_heart", seed=3, root=real_assets)
    again = speak(engine, SENTENCES[0], "af_heart", seed=3, root=real_assets)
    other = speak(engine, SENTENCES[0], "af_heart", seed=4, root=real_assets)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_speed_shortens_audio(engine, real_assets):
    normal = speak(engine, SENTENCES[1], "af_heart", root=real_assets)
    fast = speak(engine, SENTENCES[1], "af_heart", speed=1.5, root=real_assets)
    assert 0.55 < len(fast) / len(normal) < 0.8


def test_cli_writes_clear_speech(real_assets, tmp_path):
    out = tmp_path / "x.wav"
    done = subprocess.run([sys.executable, "-m", "kokoro_tvm.cli", "say", SENTENCES[0],
                           "--engine", "torch", "--voice", "af_heart:0.7,am_adam:0.3",
                           "-o", str(out), "--root", str(real_assets)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    audio, rate = soundfile.read(out, dtype="float32")
    assert rate == SAMPLE_RATE and 1.0 < len(audio) / rate < 4.0
    assert word_error_rate(SENTENCES[0], transcribe(audio)) <= 0.25


def test_cli_errors_are_one_line_and_leave_no_file(real_assets, tmp_path):
    out = tmp_path / "x.wav"
    for text, voice, message in [("", "af_heart", "empty"), ("Hi.", "zz_none", "unknown voice")]:
        done = subprocess.run([sys.executable, "-m", "kokoro_tvm.cli", "say", text, "--voice",
                               voice, "-o", str(out), "--root", str(real_assets)],
                              capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
        assert not out.exists()


def test_stream_emits_each_sentence_as_raw_pcm(real_assets):
    done = subprocess.run([sys.executable, "-m", "kokoro_tvm.cli", "say",
                           "Hello there. How are you today?", "--engine", "torch", "--stream",
                           "-o", "-", "--verbose", "--root", str(real_assets)],
                          capture_output=True)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "chunk 1:" in stderr and "chunk 2:" in stderr and "first audio after" in stderr
    pcm = np.frombuffer(done.stdout, dtype="<i2")
    assert 2.0 < len(pcm) / SAMPLE_RATE < 5.0
    heard = transcribe(pcm.astype(np.float32) / 32767)
    assert word_error_rate("Hello there. How are you today?", heard) <= 0.4, heard
