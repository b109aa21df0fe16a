"""Word timestamps without a model: KPipeline's timing of given durations, the words each G2P
gives, and subtitles from timed words (the real engines: tests/test_timestamps_e2e.py; chunk
joins and paced streams: tests/test_speech.py)."""
from __future__ import annotations

import html
import os

import numpy as np
import pytest
import srt
import webvtt

from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.audio_file import OutputError
from kokoro_tvm.runtime.model_folder import AssetFolder
from kokoro_tvm.runtime.speech import FRAME_SECONDS, Word, word_frames
from kokoro_tvm.runtime.subtitles import (
    CUE_CHARS,
    CUE_SECONDS,
    Cues,
    SubtitleStream,
    check_subtitles,
    write_subtitles,
)

# Punctuation, quotes, numbers, currency, abbreviations, contractions: one KPipeline chunk each.
SENTENCES = [
    "Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog!",
    "It costs $5.50, Dr. Smith said.",
    "I have 1,234 cats; 2nd place went to them in 2024.",
    "“Hi,” she said — don't go (please).",
    "Wait... what?",
    "Is it 45 or 415 now?",
    "Please call me back when you get home tonight.",
    "We'll meet at the station at seven in the morning, won't we?",
    "A B C.",
    "Prices rose 12% in Q3; analysts were surprised.",
    "He said: \"No!\"",
]


def kpipeline_words(tokens) -> list[tuple[str, float, float]]:
    """KPipeline's timed tokens (join_timestamps) as the text's words: tokens with no
    whitespace between them are one word, from the first's start to the last's end."""
    words, text, start, end = [], "", None, None
    for token in tokens:
        text += token.text
        if start is None:
            start = token.start_ts
        end = token.end_ts if token.end_ts is not None else end
        if token.whitespace or token is tokens[-1]:
            words.append((text.strip(), start, end))
            text, start = "", None
    return words


@pytest.fixture(scope="module")
def kpipeline():
    """kokoro's KPipeline for American English with no model (its G2P and timing only)."""
    pipeline = pytest.importorskip("kokoro.pipeline")
    with g2p._spacy_model_alias():
        return pipeline.KPipeline(lang_code="a", repo_id="hexgrad/Kokoro-82M", model=False)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_word_times_are_kpipelines_for_the_same_durations(sentence, kpipeline, tiny_assets):
    """For durations drawn at random (the leading pad under and over KPipeline's 3 frames),
    every word's start and end is what KPipeline.join_timestamps gives its tokens, from the
    same G2P call's phonemes."""
    vocab = AssetFolder.of_build(tiny_assets).vocab
    words = g2p.word_phonemizer("en-us")(sentence)
    [(_, phonemes, tokens)] = list(kpipeline.en_tokenize(kpipeline.g2p(sentence)[1]))
    assert g2p.phonemes_of(words) == phonemes
    ids = g2p.token_ids(phonemes, vocab)
    assert len(ids) == len(phonemes)  # KPipeline counts characters, Kokoro tokens
    rng = np.random.default_rng(len(sentence))
    for leading in (0, 2, 3, 11):
        durations = np.array([leading, *rng.integers(1, 12, len(ids)), rng.integers(0, 5)])
        kpipeline.join_timestamps(tokens, durations)
        expected = kpipeline_words(tokens)
        timed = word_frames(words, durations, vocab)
        assert [w.text for w in words] == [text for text, _, _ in expected]
        found = [(start * FRAME_SECONDS, end * FRAME_SECONDS) for _, start, end in timed]
        np.testing.assert_allclose(found, [(s, e) for _, s, e in expected], atol=1e-9)


def test_a_word_without_phonemes_takes_the_halves_of_the_spaces_around_it(tiny_assets):
    """misaki reads no phonemes for a word it does not know (no fallback): the word is timed
    between its neighbours' ends, and the words after it keep their own phonemes' times."""
    vocab = AssetFolder.of_build(tiny_assets).vocab
    words = g2p.word_phonemizer("en-us")("Go Zyxqvb now.")
    assert [(w.text, len(w.phonemes)) for w in words] == [("Go", 3), ("Zyxqvb", 0), ("now.", 4)]
    # the pad, Go's 3 phonemes and space, Zyxqvb's space, now.'s 4 phonemes, the pad
    durations = np.array([5, 1, 1, 2, 4, 2, 1, 1, 3, 2, 1])
    timed = word_frames(words, durations, vocab)
    assert timed == [(5, 2.0, 8.0), (13, 8.0, 11.0), (15, 11.0, 19.0)]


def test_other_languages_map_phoneme_words_to_the_texts_where_they_match():
    same = g2p.words_of("Hola, ¿cómo estás?", "ˈola, ¿kˈomo estˈas?")
    assert [(w.text, w.phonemes, w.whitespace) for w in same] == [
        ("Hola,", "ˈola,", " "), ("¿cómo", "¿kˈomo", " "), ("estás?", "estˈas?", "")]
    # No spaces in the text: its clauses match the phonemes' one to one.
    clauses = g2p.words_of("こんにちは、世界。今日は晴れです。",
                           "koɲɲiʨiβa, sekai. kʲoː βa haɾe desɨ.")
    assert [(w.text, w.phonemes) for w in clauses] == [
        ("こんにちは、", "koɲɲiʨiβa,"), ("世界。", "sekai."),
        ("今日は晴れです。", "kʲoː βa haɾe desɨ.")]
    whole = g2p.words_of("a b c", "x y")
    assert [(w.text, w.phonemes) for w in whole] == [("a b c", "x y")]
    for words in (same, clauses, whole):
        assert g2p.phonemes_of(words) in ("ˈola, ¿kˈomo estˈas?",
                                          "koɲɲiʨiβa, sekai. kʲoː βa haɾe desɨ.", "x y")


def _words(texts: str, seconds: float = 0.3) -> list[Word]:
    """A word every ``seconds``, each from the last one's end."""
    return [Word(text, i * seconds, (i + 1) * seconds) for i, text in enumerate(texts.split())]


def test_cues_are_short_lines_cut_between_words_that_cover_the_audio():
    words = _words("Hello there! " + "word " * 30 + "a" * 50 + " end.")
    cues = Cues()
    made = [*cues.add(words[:5]), *cues.add(words[5:]), *cues.close(12.0)]
    assert made[0].text == "Hello there!" and made[0].start == 0
    assert all(len(cue.text) <= CUE_CHARS for cue in made if " " in cue.text)
    assert all(cue.end - cue.start <= CUE_SECONDS + 0.3 for cue in made)
    assert " ".join(cue.text for cue in made).split() == [w.text for w in words]
    assert all(a.end == b.start for a, b in zip(made, made[1:])) and made[-1].end == 12.0
    slow = [*Cues().add(_words("one two three four five six seven eight", 1.0))]
    assert [cue.text for cue in slow] == ["one two three four five six"]  # 6 s; the rest open


@pytest.mark.parametrize("suffix", [".srt", ".vtt"])
def test_subtitle_files_parse_back_whole_or_streamed(tmp_path, suffix):
    words = _words("Hello there! This line has <odd> & marks, and goes on for a while. Bye.")

    def parsed(path):
        text = path.read_text(encoding="utf-8")
        if suffix == ".srt":
            return [(s.start.total_seconds(), s.end.total_seconds(), s.content)
                    for s in srt.parse(text)]
        return [(c.start_time.in_milliseconds() / 1000, c.end_time.in_milliseconds() / 1000,
                 html.unescape(c.text)) for c in webvtt.from_string(text)]

    whole = tmp_path / f"whole{suffix}"
    count = write_subtitles(whole, words, 5.0)
    cues = parsed(whole)
    assert len(cues) == count > 2 and cues[0][0] == 0 and cues[-1][1] == 5.0
    assert " ".join(text for _, _, text in cues).split() == [w.text for w in words]
    streamed = tmp_path / f"streamed{suffix}"
    stream = SubtitleStream(streamed)
    stream.add(words[:6])
    assert 0 < len(parsed(streamed)) < count  # the cues finished so far, already on disk
    stream.add(words[6:])
    assert stream.close(5.0) == count
    assert parsed(streamed) == cues


def test_subtitles_are_checked_and_an_existing_file_is_left_on_failure(tmp_path):
    with pytest.raises(OutputError, match=r"cannot write subtitles as '\.txt' files"):
        check_subtitles(tmp_path / "x.txt")
    with pytest.raises(OutputError, match="a file name without an extension"):
        check_subtitles(tmp_path / "subtitles")
    with pytest.raises(OutputError, match="is a folder: give a file name such as"):
        check_subtitles(tmp_path)
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    with pytest.raises(OutputError, match="not a writable folder"):
        check_subtitles(tmp_path / "notes.txt" / "x.srt")
    existing = tmp_path / "old.srt"
    existing.write_text("earlier subtitles")

    def failing():
        yield Word("one", 0.0, 0.5)
        raise RuntimeError("synthesis failed")

    with pytest.raises(RuntimeError):
        write_subtitles(existing, failing(), 1.0)
    assert existing.read_text() == "earlier subtitles"
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "old.srt"]  # no temporary left
