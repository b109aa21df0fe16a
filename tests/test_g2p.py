"""Offline G2P, chunking under the token limit, and voice blends."""
from __future__ import annotations

import numpy as np
import pytest

from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.voices import VoiceError, load_voice, parse_blend


def test_english_g2p_offline():
    phonemes = g2p.phonemizer("en-us")("Hello world.")
    assert phonemes.replace(" ", "").startswith("həlˈO"), phonemes
    assert "wˈɜɹld" in phonemes


def test_split_keeps_sentences_whole_and_respects_the_limit():
    sentence = "ðɪs ɪz ɐ tˈɛst, wɪð ɐ klˈɔz."
    text = " ".join([sentence] * 60)
    pieces = g2p.split_phonemes(text, limit=100)
    assert all(len(p) <= 100 for p in pieces)
    assert all(p.endswith(".") for p in pieces)  # cut at sentence ends only
    assert " ".join(pieces) == text


def test_split_falls_back_to_clauses_then_words():
    clause = "wˈʌn tˈu θɹˈi fˈɔɹ,"
    pieces = g2p.split_phonemes(" ".join([clause] * 20), limit=60)
    assert all(len(p) <= 60 and p.endswith(",") for p in pieces)
    words = g2p.split_phonemes(" ".join(["wˈʌn"] * 100), limit=30)
    assert all(len(p) <= 30 for p in words) and sum(p.count("wˈʌn") for p in words) == 100


def test_blend_weights_are_normalised(tiny_assets):
    heart = load_voice("af_heart", tiny_assets)
    half = load_voice("af_heart:0.5,af_heart:0.5", tiny_assets)
    np.testing.assert_allclose(half, heart, rtol=1e-6)
    assert parse_blend("a:0.7,b:0.3") == [("a", 0.7), ("b", 0.3)]
    with pytest.raises(VoiceError, match="not a number"):
        parse_blend("a:x")
    with pytest.raises(VoiceError, match="unknown voice 'zz_none'"):
        load_voice("zz_none", tiny_assets)


def test_japanese_g2p_offline():
    phonemes = g2p.phonemizer("ja")("こんにちは、世界。")
    assert phonemes.startswith("koɲɲiʨiβa") and "sekai" in phonemes, phonemes


def test_halving_prefers_sentences_then_clauses_and_keeps_words_whole():
    assert g2p.halve_phonemes("ɐ bˈi. sˈi dˈi, ˈi ɛf.") == ["ɐ bˈi.", "sˈi dˈi, ˈi ɛf."]
    assert g2p.halve_phonemes("wˈʌn tˈu, θɹˈi fˈɔɹ") == ["wˈʌn tˈu,", "θɹˈi fˈɔɹ"]
    assert g2p.halve_phonemes("ɐ vˈɛɹi lˈɔŋ") == ["ɐ vˈɛɹi", "lˈɔŋ"]
    assert g2p.halve_phonemes("sˈɪŋɡəl") == ["sˈɪŋɡəl"]
