"""Offline G2P, chunking under the token limit, and voice blends."""
from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
from conftest import REPO

from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.kokoro import Kokoro, RequestError, check_request
from kokoro_tvm.runtime.model_folder import AssetFolder
from kokoro_tvm.runtime.voices import (
    VoiceError,
    VoiceInfo,
    describe_voice,
    load_voice,
    parse_blend,
)


def test_english_g2p_offline():
    phonemes = g2p.phonemizer("en-us")("Hello world.")
    assert phonemes.replace(" ", "").startswith("həlˈO"), phonemes
    assert "wˈɜɹld" in phonemes


# A stand-in G2P: the text's letters are its phonemes.
LOWER = g2p.reading(str.lower)


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
    assert g2p.split_text("你好，世界！我今年25岁。你呢？", len, limit=8) == [
        "你好，世界！", "我今年25岁。", "你呢？"]
    assert g2p.split_text("今天是星期一，天气很好；我们去公园吧：好吗？", len, limit=8) == [
        "今天是星期一，", "天气很好；", "我们去公园吧：", "好吗？"]
    assert g2p.sentences("आप कैसे हैं? मेरी उम्र 25 साल है। मैं ठीक हूँ।") == [
        "आप कैसे हैं?", "मेरी उम्र 25 साल है।", "मैं ठीक हूँ।"]  # Hindi's danda ends one


def _texts(found) -> list[str]:
    return [piece.text for piece, _ in found]


def test_pieces_join_whole_sentences_up_to_the_limit_unless_streaming():
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,", 1)}
    text = "one two. three four. five six seven eight nine ten eleven."
    joined = list(g2p.pieces(text, LOWER, vocab, limit=40))
    last = "five six seven eight nine ten eleven."
    assert _texts(joined) == ["one two. three four.", last]
    assert joined[0][0].phonemes == "one two. three four."
    assert [done for _, done in joined] == [2, 3]  # sentences spoken once each piece is
    streamed = list(g2p.pieces(text, LOWER, vocab, per_sentence=True, limit=40))
    assert _texts(streamed) == ["one two.", "three four.", last]
    assert [done for _, done in streamed] == [1, 2, 3]
    long = list(g2p.pieces("aaaa bbbb, cccc dddd, eeee. ff.", LOWER, vocab, limit=12))
    assert _texts(long) == ["aaaa bbbb,", "cccc dddd,", "eeee.", "ff."]  # clauses
    assert [done for _, done in long] == [0, 0, 1, 2]  # a sentence is done at its last clause


def test_a_long_first_sentence_starts_with_its_first_clauses():
    """The first piece: the most whole clauses within the limit, else the first clause alone; never
    a cut between words (docs/streaming.md)."""
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
    streamed = list(g2p.pieces(text, LOWER, vocab, per_sentence=True, first_piece=22))
    assert _texts(streamed) == ["aaaa bbbb, cccc dddd,", "eeee.", "ffff gggg, hhhh iiii, jjjj."]
    assert [done for _, done in streamed] == [0, 1, 2]
    assert " ".join(_texts(streamed)) == text  # nothing dropped, order kept
    joined = list(g2p.pieces(text, LOWER, vocab, first_piece=22))
    assert _texts(joined) == [text]  # cut only when streaming
    uncut = list(g2p.pieces(text, LOWER, vocab, per_sentence=True, first_piece=None))
    assert _texts(uncut) == g2p.sentences(text)
    unspeakable = g2p.reading(lambda t: "" if "*" in t else t)
    punctuation_first = list(g2p.pieces("*. " + text, unspeakable, vocab, per_sentence=True,
                                        first_piece=22))
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

        found = g2p.pieces(text, g2p.reading(phonemize), vocab, per_sentence=per_sentence, limit=20)
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
    assert g2p.language_of_voice("ef_dora") == "es"
    assert g2p.language_of_voice("ff_siwis") == "fr-fr"
    assert g2p.language_of_voice("hm_omega") == "hi"
    assert g2p.language_of_voice("im_nicola") == "it"
    assert g2p.language_of_voice("pf_dora") == "pt-br"
    assert g2p.language_of_voice("zf_xiaobei") == "zh"
    with pytest.raises(g2p.G2PError, match="'xx_custom' is not named as Kokoro names.*--lang"):
        g2p.language_of_voice("xx_custom")


# Sentences with punctuation and numbers in each language the runtime speaks through misaki's
# espeak-ng or Mandarin G2P, spoken by their Kokoro voices.
KPIPELINE_TEXTS = {
    "es": "Hola, ¿cómo estás? Tengo 25 años y vivo en Madrid (España). ¡Qué bien!",
    "fr-fr": "Bonjour, comment ça va ? J'ai 25 ans (presque). Il est 10 h 30 : c'est l'heure !",
    "hi": "नमस्ते, आप कैसे हैं? मेरी उम्र 25 साल है। मैं दिल्ली में रहता हूँ।",
    "it": "Ciao, come stai? Ho 25 anni e vivo a Roma: è bellissima! Costa 3,50 euro.",
    "pt-br": "Olá, tudo bem? Eu tenho 25 anos e moro em São Paulo; é ótimo! São 10h30.",
    "zh": "你好，世界！我今年25岁。你呢？今天是2024年3月5日，天气很好；我们去公园吧：好吗？",
}


@pytest.mark.parametrize("lang", sorted(KPIPELINE_TEXTS))
def test_phonemes_are_kpipelines(lang, monkeypatch):
    """The runtime's pieces (the text cut at sentences, each phonemized alone) carry the
    phonemes kokoro's KPipeline gives the whole text, with no model and nothing downloaded."""
    pipeline = pytest.importorskip("kokoro.pipeline")

    def no_download(*args, **kwargs):
        raise AssertionError(f"KPipeline tried to download {args} {kwargs}")

    monkeypatch.setattr(pipeline, "hf_hub_download", no_download)
    text = KPIPELINE_TEXTS[lang]
    kpipeline = pipeline.KPipeline(lang_code=lang, repo_id="hexgrad/Kokoro-82M", model=False)
    expected = [result.phonemes for result in kpipeline(text)]
    assert len(expected) == 1 and len(expected[0]) > len(text) / 2, expected
    vocab = {p: i for i, p in enumerate(sorted(set(expected[0])), 1)}
    found = list(g2p.pieces(text, g2p.word_phonemizer(lang), vocab))
    assert [piece.phonemes for piece, _ in found] == expected
    assert [done for _, done in found] == [len(g2p.sentences(text))] == [3 + (lang == "zh")]


@pytest.fixture
def without_g2p_caches():
    """Each test builds its G2Ps afresh, and leaves none built while modules were hidden."""
    g2p.word_phonemizer.cache_clear()
    yield
    g2p.word_phonemizer.cache_clear()


class OneVoice:
    """A VoiceFolder (runtime/voices.py) of one voice, for checks that load no table."""

    def __init__(self, name: str):
        self.voices = [name]


@pytest.mark.parametrize("lang,voice,module,extra", [
    ("zh", "zf_xiaobei", "jieba", "zh"), ("es", "ef_dora", "phonemizer", "espeak"),
    ("ja", "jf_alpha", "pyopenjtalk", "ja")])
def test_a_language_not_installed_is_refused_naming_its_extra(
        lang, voice, module, extra, monkeypatch, tmp_path, without_g2p_caches):
    """With one of its G2P's modules not importable, a language is described as unavailable and
    refused before any work, in one line that names the extra to install."""
    folder = OneVoice(voice)
    assert g2p.unavailable_reason(lang) is None
    assert check_request(folder, "Some text.", voice, 1.0, None) == (1.0, lang)
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails
    reason = g2p.unavailable_reason(lang)
    name = g2p.LANGUAGE_TABLE[lang].name
    assert reason == (f"{name} ({lang}) needs {module}, not installed here: "
                      f"pip install 'kokoro-tvm[{extra}]'")
    assert describe_voice(voice).unavailable == reason
    for given in (None, lang):  # the voice's language, or one given
        with pytest.raises(RequestError) as refused:
            check_request(folder, "Some text.", voice, 1.0, given)
        assert str(refused.value) == reason
    with pytest.raises(RequestError) as refused:  # before the model folder is even opened
        Kokoro(tmp_path / "no-model-folder", languages=[lang])
    assert str(refused.value) == reason
    with pytest.raises(g2p.G2PError) as failed:
        g2p.phonemizer(lang)
    assert str(failed.value) == reason


def test_a_g2p_that_fails_to_import_names_the_error_and_the_extra(
        monkeypatch, without_g2p_caches):
    """Its modules are there, but the G2P does not import (a broken install)."""

    def broken(lang: str):
        raise ImportError("cannot import name 'to_tone3' from 'pypinyin.contrib.tone_convert'")

    mandarin = dataclasses.replace(g2p.LANGUAGE_TABLE["zh"], build=broken)
    monkeypatch.setitem(g2p.LANGUAGE_TABLE, "zh", mandarin)
    assert g2p.unavailable_reason("zh") is None
    with pytest.raises(g2p.G2PError) as failed:
        g2p.phonemizer("zh")
    assert str(failed.value) == (
        "Mandarin Chinese (zh): its G2P failed to import (cannot import name 'to_tone3' from "
        "'pypinyin.contrib.tone_convert'): pip install 'kokoro-tvm[zh]'")


def test_each_languages_extra_is_in_pyproject_and_in_the_test_install():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    named = {language.extra for language in g2p.LANGUAGE_TABLE.values()} - {None}
    assert named == {"espeak", "ja", "zh"} and named <= set(extras)
    (tested,) = [r for r in extras["test"] if r.startswith("kokoro-tvm[")]
    assert named <= set(tested.removeprefix("kokoro-tvm[").removesuffix("]").split(","))


def test_voices_are_described_by_their_names():
    assert describe_voice("af_heart") == VoiceInfo("af_heart", "en-us", "American English",
                                                   "female", None)
    assert describe_voice("bm_george") == VoiceInfo("bm_george", "en-gb", "British English",
                                                    "male", None)
    assert describe_voice("pm_santa") == VoiceInfo("pm_santa", "pt-br", "Brazilian Portuguese",
                                                   "male", None)
    assert describe_voice("zf_xiaoxiao").language_name == "Mandarin Chinese"
    assert describe_voice("xx_custom") == VoiceInfo("xx_custom", None, None, None, None)
    assert describe_voice("xm_custom").gender == "male"


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
        return [p.text for p in g2p.halve(g2p.Piece(text, LOWER(text)), LOWER)]

    assert halves("A bee. See dee, ee eff.") == ["A bee.", "See dee, ee eff."]
    assert halves("one two, three four") == ["one two,", "three four"]
    assert halves("a very long") == ["a very", "long"]
    assert halves("single") == ["single"]


def test_english_g2p_loads_only_the_components_misaki_enables():
    """misaki reads the tagger's tags alone: the other components stay unloaded, and the tags
    are those of the whole pipeline."""
    import spacy

    text = ("Read the record that they will record tomorrow; the lead singer led the band, and "
            "the wind will wind the sails. I live here, and the show is live at 8:30 p.m.")
    with g2p._spacy_model_alias():
        whole = spacy.load(g2p.SPACY_MODEL)
        with g2p._spacy_loads_only_enabled():
            lean = spacy.load(g2p.SPACY_MODEL, enable=["tok2vec", "tagger"])
    assert len(whole.component_names) > 2
    assert lean.component_names == ["tok2vec", "tagger"]
    assert [t.tag_ for t in lean(text)] == [t.tag_ for t in whole(text)]
