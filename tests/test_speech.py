"""Chunking long text for an engine: splits where a chunk does not fit, joins without clicks."""
from __future__ import annotations

import io

import numpy as np
import pytest

from kokoro_tvm.cli import ProgressBar
from kokoro_tvm.runtime.model_folder import AssetFolder
from kokoro_tvm.runtime.speech import ChunkTooLong, SpeechError, speak, speak_chunks

TEXT = ("The first sentence is here, and it has a clause. The second one follows it closely. "
        "A third sentence ends the paragraph, after a long and winding clause or two.")


class LimitedEngine:
    """Speaks 600 samples of a constant per token, refusing chunks over ``limit`` tokens."""

    def __init__(self, limit: int):
        self.limit, self.calls = limit, []

    def synthesize(self, ids, ref_s, speed, seed):
        if len(ids) > self.limit:
            raise ChunkTooLong(f"{len(ids)} tokens > {self.limit}")
        self.calls.append(len(ids))
        return np.full(600 * len(ids), 0.5, dtype=np.float32)


def test_chunks_that_do_not_fit_are_split_and_nothing_is_lost(tiny_assets):
    whole = LimitedEngine(10_000)
    reference = speak(whole, TEXT, "af_heart", speaker=AssetFolder.of_build(tiny_assets))
    small = LimitedEngine(40)
    audio = speak(small, TEXT, "af_heart", speaker=AssetFolder.of_build(tiny_assets))
    assert max(small.calls) <= 40 and len(small.calls) > len(whole.calls)
    # Splitting drops only the spaces between pieces, never a phoneme.
    assert sum(small.calls) >= sum(whole.calls) - len(small.calls)
    assert len(audio) == 600 * sum(small.calls)
    assert len(reference) == 600 * sum(whole.calls)


def test_a_word_that_never_fits_reports_the_engine_error(tiny_assets):
    with pytest.raises(ChunkTooLong, match="tokens > 2"):
        speak(LimitedEngine(2), TEXT, "af_heart", speaker=AssetFolder.of_build(tiny_assets))


def test_chunk_edges_are_faded(tiny_assets):
    chunks = [c.samples for c in speak_chunks(LimitedEngine(40), TEXT, "af_heart",
                                               speaker=AssetFolder.of_build(tiny_assets))]
    joined = np.concatenate(chunks)
    assert len(chunks) > 2
    assert all(abs(c[0]) < 1e-6 and abs(c[-1]) < 1e-6 for c in chunks)
    assert np.max(np.abs(np.diff(joined))) < 0.01  # no step at any join


def test_progress_counts_the_sentences_spoken(tiny_assets):
    """Three sentences and a fourth with nothing to say ("*"), which is done with the text:
    streamed, one chunk per sentence; joined, one chunk, after which all four are done."""
    speaker = AssetFolder.of_build(tiny_assets)
    for per_sentence, chunk_count, expected in (
            (True, 3, [(1, 4), (2, 4), (3, 4), (4, 4)]), (False, 1, [(4, 4)])):
        seen = []
        chunks = list(speak_chunks(LimitedEngine(10_000), TEXT + " *", "af_heart",
                                   speaker=speaker, per_sentence=per_sentence,
                                   progress=lambda done, total: seen.append((done, total))))
        assert seen == expected
        assert len(chunks) == chunk_count


def test_chunks_carry_their_text_and_start_in_order(tiny_assets):
    """Every word of the text is in exactly one chunk, in order, and each chunk starts where
    the previous one ended; halved pieces keep their own text."""
    for limit, per_sentence in ((10_000, True), (10_000, False), (12, False)):
        chunks = list(speak_chunks(LimitedEngine(limit), TEXT, "af_heart",
                                   speaker=AssetFolder.of_build(tiny_assets),
                                   per_sentence=per_sentence))
        assert " ".join(c.text for c in chunks).split() == TEXT.split()
        starts = np.cumsum([0] + [len(c.samples) for c in chunks[:-1]]) / 24_000
        np.testing.assert_allclose([c.start_seconds for c in chunks], starts)
        assert all(c.sample_rate == 24_000 for c in chunks)
    assert len(chunks) > 3  # the 12-token engine made the speaker halve pieces


def test_progress_bar_draws_in_place():
    stream = io.StringIO()
    bar = ProgressBar(stream)
    bar(1, 1)  # one piece: no bar
    assert stream.getvalue() == ""
    bar(1, 4)
    bar(4, 4)
    bar.close()
    lines = stream.getvalue().split("\r")[1:]
    assert lines[0].startswith("[" + "#" * 7 + "." * 23 + "] 1/4")
    assert lines[1] == "[" + "#" * 30 + "] 4/4 sentences\n"


def test_text_with_nothing_to_say_is_refused_before_any_synthesis(tiny_assets):
    engine = LimitedEngine(10_000)
    with pytest.raises(SpeechError, match="nothing speakable in '\\*\\*'"):
        list(speak_chunks(engine, "**", "af_heart", speaker=AssetFolder.of_build(tiny_assets)))
    assert engine.calls == []
