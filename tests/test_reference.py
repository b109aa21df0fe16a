"""The PyTorch reference on the recovered real weights speaks the words it is given."""
from __future__ import annotations

import numpy as np
import pytest
from transcribe import transcribe, word_error_rate

from kokoro_tvm.model.reference import TorchEngine
from kokoro_tvm.runtime.model_folder import AssetFolder
from kokoro_tvm.runtime.speech import speak

pytestmark = pytest.mark.slow

SENTENCES = [
    "Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back when you get home tonight.",
]


@pytest.fixture(scope="module")
def assets(real_assets):
    return AssetFolder.of_build(real_assets)


@pytest.fixture(scope="module")
def engine(real_assets):
    return TorchEngine(real_assets)


@pytest.mark.parametrize("voice", ["af_heart", "am_adam"])
def test_reference_speech_is_recognised(engine, assets, voice):
    """pocketsphinx's word error rate on the reference audio, at most 25% per sentence."""
    for sentence in SENTENCES:
        audio = speak(engine, sentence, voice, speaker=assets)
        heard = transcribe(audio)
        assert word_error_rate(sentence, heard) <= 0.25, (voice, sentence, heard)


def test_seed_makes_audio_repeatable(engine, assets):
    first = speak(engine, SENTENCES[0], "af_heart", seed=3, speaker=assets)
    again = speak(engine, SENTENCES[0], "af_heart", seed=3, speaker=assets)
    other = speak(engine, SENTENCES[0], "af_heart", seed=4, speaker=assets)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_speed_shortens_audio(engine, assets):
    normal = speak(engine, SENTENCES[1], "af_heart", speaker=assets)
    fast = speak(engine, SENTENCES[1], "af_heart", speed=1.5, speaker=assets)
    assert 0.55 < len(fast) / len(normal) < 0.8
