"""The PyTorch reference's own behaviour on the recovered real weights: its seed and its speed.
(That it speaks the words it is given is tests/test_e2e.py's baseline for the TVM runtime.)"""
from __future__ import annotations

import numpy as np
import pytest

from kokoro_tvm.model.reference import TorchEngine
from kokoro_tvm.runtime.model_folder import AssetFolder
from kokoro_tvm.runtime.speech import speak

pytestmark = pytest.mark.slow

SHORT_SENTENCE = "Hello there."  # the seed's effect shows in any audio: the shortest is quickest
SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def assets(real_assets):
    return AssetFolder.of_build(real_assets)


@pytest.fixture(scope="module")
def engine(real_assets):
    return TorchEngine(real_assets)


def test_seed_makes_audio_repeatable(engine, assets):
    first = speak(engine, SHORT_SENTENCE, "af_heart", seed=3, speaker=assets)
    again = speak(engine, SHORT_SENTENCE, "af_heart", seed=3, speaker=assets)
    other = speak(engine, SHORT_SENTENCE, "af_heart", seed=4, speaker=assets)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_speed_shortens_audio(engine, assets):
    normal = speak(engine, SENTENCE, "af_heart", speaker=assets)
    fast = speak(engine, SENTENCE, "af_heart", speed=1.5, speaker=assets)
    assert 0.55 < len(fast) / len(normal) < 0.8
