"""Offline G2P, chunking under the token limit, and voice blends."""
from __future__ import annotations

import numpy as np
import pytest

from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.model_folder import AssetFolder
from kokoro_tvm.runtime.voices import VoiceError, load_voice, parse_blend


def test_english_g2p_offline():
    phonemes = g2p.phonemizer("en-us")("Hello world.")
    assert phonemes.replace(" ", "").startswith("həlˈO"), phonemes
    assert "wˈɜɹld" in phonemes


def _words(text: str) -> int:
    """A stand-in size: one token per word."""
    return len(text.split())


def test_split_keeps_sentences_whole_and_respects_the_limit():
    text = " ".join(["This is a test, with a clause."] * 60)
    pieces = g2p.split_text(text, _words, limit=20)
    assert all(_words(p) <= 20 for p in pieces)
    assert all(p.endswith(".") for p in pieces)  # cut at sentence ends only
    assert " ".join(pieces) == text


def test_split_falls_back_to_clauses_then_words_then_characters():
    clauses = g2p.split_text(" ".join(["one two three four,"] * 20), _words, limit=6)
    assert all(_words(p) <= 6 and p.endswith(",") for p in clauses)
    words = g2p.split_text(" ".join(["one"] * 100), _words, limit=7)
    assert all(_words(p) <= 7 for p in words) and sum(p.count("one") for p in words) == 100
    characters = g2p.split_text("x" * 50, len, limit=8)
    assert all(len(p) <= 8 for p in characters) and "".join(characters) == "x" * 50
    japanese = g2p.split_text("今日は晴れ。明日は雨。", len, limit=6)
    assert japanese == ["今日は晴れ。", "明日は雨。"]


def _texts(found) -> list[str]:
    return [piece.text for piece, _ in found]


def test_pieces_join_whole_sentences_up_to_the_limit_unless_streaming():
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,", 1)}
    text = "one two. three four. five six seven eight nine ten eleven."
    joined = list(g2p.pieces(text, str.lower, vocab, limit=40))
    last = "five six seven eight nine ten eleven."
    assert _texts(joined) == ["one two. three four.", last]
    assert joined[0][0].phonemes == "one two. three four."
    assert [done for _, done in joined] == [2, 3]  # sentences spoken once each piece is
    streamed = list(g2p.pieces(text, str.lower, vocab, per_sentence=True, limit=40))
    assert _texts(streamed) == ["one two.", "three four.", last]
    assert [done for _, done in streamed] == [1, 2, 3]
    long = list(g2p.pieces("aaaa bbbb, cccc dddd, eeee. ff.", str.lower, vocab, limit=12))
    assert _texts(long) == ["aaaa bbbb,", "cccc dddd,", "eeee.", "ff."]  # clauses
    assert [done for _, done in long] == [0, 0, 1, 2]  # a sentence is done at its last clause


def test_a_long_first_sentence_starts_with_its_first_clauses():
    """The first piece: the most whole clauses within the limit, else the first clause alone; never
    a cut between words (docs/decisions.md, First audio when streaming)."""
    assert g2p.first_clauses("one two, three four, five six.", _words, limit=4) == [
        "one two, three four,", "five six."]
    assert g2p.first_clauses("one two three, four five, six.", _words, limit=2) == [
        "one two three,", "four five, six."]  # the first clause is over the limit: alone
    assert g2p.first_clauses("one two three four five six.", _words, limit=2) == [
        "one two three four five six."]  # no clause mark: whole
    assert g2p.first_clauses("one two, three.", _words, limit=3) == ["one two, three."]
    japanese = g2p.first_clauses("今日は、晴れて、暖かい。", len, limit=8)
    assert japanese == ["今日は、晴れて、", "暖かい。"]


def test_streamed_pieces_start_with_the_first_clauses_of_the_first_sentence_only():
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,", 1)}
    text = "aaaa bbbb, cccc dddd, eeee. ffff gggg, hhhh iiii, jjjj."
    streamed = list(g2p.pieces(text, str.lower, vocab, per_sentence=True, first_piece=22))
    assert _texts(streamed) == ["aaaa bbbb, cccc dddd,", "eeee.", "ffff gggg, hhhh iiii, jjjj."]
    assert [done for _, done in streamed] == [0, 1, 2]
    assert " ".join(_texts(streamed)) == text  # nothing dropped, order kept
    joined = list(g2p.pieces(text, str.lower, vocab, first_piece=22))
    assert _texts(joined) == [text]  # cut only when streaming
    uncut = list(g2p.pieces(text, str.lower, vocab, per_sentence=True, first_piece=None))
    assert _texts(uncut) == g2p.sentences(text)
    punctuation_first = list(g2p.pieces("*. " + text, lambda t: "" if "*" in t else t, vocab,
                                        per_sentence=True, first_piece=22))
    assert _texts(punctuation_first) == _texts(streamed)  # the cut is in the first spoken piece


def test_pieces_phonemize_a_sentence_only_when_they_reach_it():
    """The first piece of a long text waits for its own G2P, not the whole text's: streaming
    needs no look ahead, joining looks one sentence ahead."""
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,", 1)}
    text = " ".join(f"sentence {word}." for word in ("one", "two", "three", "four", "five"))
    for per_sentence, phonemized_by_first in ((True, 1), (False, 2)):
        asked: list[str] = []

        def phonemize(part: str) -> str:
            asked.append(part)
            return part.lower()

        found = g2p.pieces(text, phonemize, vocab, per_sentence=per_sentence, limit=20)
        first, _ = next(found)
        assert first.text == "sentence one."
        assert len(set(asked)) == phonemized_by_first
        rest = [piece.text for piece, _ in found]
        assert [first.text, *rest] == g2p.sentences(text)  # nothing dropped, order kept
        assert len(set(asked)) == 5


def test_language_follows_the_voice_as_in_kokoro():
    assert g2p.language_of_voice("af_heart") == "en-us"
    assert g2p.language_of_voice("bf_emma:0.5,af_heart:0.5") == "en-gb"
    assert g2p.language_of_voice("jf_alpha") == "ja"
    with pytest.raises(g2p.G2PError, match="a Mandarin Chinese voice.*--lang"):
        g2p.language_of_voice("zf_xiaobei")


class TwoVoices:
    """A VoiceFolder (runtime/voices.py) of two random style tables, in ``folder``."""

    def __init__(self, folder):
        rng = np.random.default_rng(0)
        self.tables = {name: rng.standard_normal((510, 1, 256)).astype(np.float32)
                       for name in ("af_one", "am_two")}
        for name, table in self.tables.items():
            np.save(folder / f"{name}.npy", table)
        self.folder = folder

    @property
    def voices(self) -> list[str]:
        return sorted(self.tables)

    def voice_file(self, name: str):
        return self.folder / f"{name}.npy"


def test_blend_weights_are_normalised(tiny_assets, tmp_path):
    assets = AssetFolder.of_build(tiny_assets)
    heart = load_voice("af_heart", assets)
    # Weights adding up to 4: without normalisation this would be 4 x af_heart.
    np.testing.assert_allclose(load_voice("af_heart:2,af_heart:2", assets), heart, rtol=1e-6)
    two = TwoVoices(tmp_path)
    one, other = two.tables["af_one"], two.tables["am_two"]
    np.testing.assert_allclose(load_voice("af_one:3,am_two:1", two), 0.75 * one + 0.25 * other,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(load_voice("af_one:0,am_two:5", two), other)
    assert parse_blend("a:0.7,b:0.3") == [("a", 0.7), ("b", 0.3)]
    with pytest.raises(VoiceError, match="not a number"):
        parse_blend("a:x")
    for weight in ("nan", "inf", "-0.5"):
        with pytest.raises(VoiceError, match="must be a finite number of 0 or more"):
            parse_blend(f"a:{weight},b:1")
    with pytest.raises(VoiceError, match="unknown voice 'zz_none'"):
        load_voice("zz_none", assets)


def test_japanese_g2p_offline():
    phonemes = g2p.phonemizer("ja")("こんにちは、世界。")
    assert phonemes.startswith("koɲɲiʨiβa") and "sekai" in phonemes, phonemes


def test_halving_prefers_sentences_then_clauses_and_keeps_words_whole():
    def halves(text):
        return [p.text for p in g2p.halve(g2p.Piece(text, text), str.lower)]

    assert halves("A bee. See dee, ee eff.") == ["A bee.", "See dee, ee eff."]
    assert halves("one two, three four") == ["one two,", "three four"]
    assert halves("a very long") == ["a very", "long"]
    assert halves("single") == ["single"]
