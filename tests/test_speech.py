"""Chunking long text for an engine: splits where a chunk does not fit, joins without clicks."""
from __future__ import annotations

import io
import types

import numpy as np
import pytest

from kokoro_tvm.cli import ProgressBar
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime import speech
from kokoro_tvm.runtime.g2p import token_ids
from kokoro_tvm.runtime.model_folder import AssetFolder
from kokoro_tvm.runtime.speech import (
    ChunkTooLong,
    SpeechError,
    lead_cut,
    speak,
    speak_chunks,
)

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


class LeadingEngine(LimitedEngine):
    """LimitedEngine that can decode a chunk's start alone (speech.LeadingEngine): 4 frames per
    token; the whole decode is a ramp, a window's decode a constant, so each sample tells which
    decode it came from."""

    FRAMES_PER_TOKEN = 4

    def __init__(self, limit: int, buckets: tuple[int, ...] = ()):
        super().__init__(limit)
        self.buckets = buckets  # decoder buckets; none: decodes at exactly the frames given
        self.decoded = []  # frames asked of each decode, None for the whole

    def decode_frames(self, frames):
        return min((b for b in self.buckets if b >= frames), default=frames)

    def prosody(self, ids, ref_s, speed, seed):
        if len(ids) > self.limit:
            raise ChunkTooLong(f"{len(ids)} tokens > {self.limit}")
        self.calls.append(len(ids))
        return types.SimpleNamespace(durations=np.full(len(ids) + 2, self.FRAMES_PER_TOKEN))

    def decode(self, prosody, frames=None):
        self.decoded.append(frames)
        total = int(prosody.durations.sum())
        if frames is None:
            return self.whole(total)
        return np.full(600 * min(frames, total), 0.25, dtype=np.float32)

    @staticmethod
    def whole(frames: int) -> np.ndarray:
        return np.linspace(0.1, 0.2, 600 * frames, dtype=np.float32)

    def synthesize(self, ids, ref_s, speed, seed):
        return self.decode(self.prosody(ids, ref_s, speed, seed))


def test_lead_ends_mid_gap_at_the_last_word_gap_that_leaves_the_context():
    space = 16
    ids = [1, 2, space, 3, space, 4, 5, space, 6]  # pads at both ends: tokens 1..9
    durations = np.array([5, 6, 6, 4, 6, 8, 6, 6, 2, 6, 13])  # 68 frames
    starts = np.cumsum(durations) - durations
    # The gaps (tokens 3, 5, 8) are mid-way at frames 19, 31, 48: the last is just early enough
    # to leave 16 frames of context in a 64-frame window.
    assert [int(starts[i] + durations[i] // 2) for i in (3, 5, 8)] == [19, 31, 48]
    assert speech.LEAD_FRAMES - speech.LEAD_CONTEXT_FRAMES == 48
    assert lead_cut(durations, ids, space) == (48, 3)
    later = durations.copy()
    later[1] += 1  # every gap a frame later: 49 is too late
    assert lead_cut(later, ids, space) == (32, 2)
    fits = durations.copy()
    fits[-1] = 9  # 64 frames: the whole piece fits the lead's bucket
    assert lead_cut(fits, ids, space) is None
    assert lead_cut(np.array([60, 8, 8]), [space], space) is None  # no gap early enough


def test_a_stream_starts_with_a_lead_then_the_rest_of_the_whole(tiny_assets):
    """The first piece's first words come from a window decode, then its whole decode from the
    cut on, crossfaded over one frame; the other pieces are whole, and nothing is lost."""
    speaker = AssetFolder.of_build(tiny_assets)
    engine = LeadingEngine(10_000)
    chunks = list(speak_chunks(engine, TEXT, "af_heart", speaker=speaker, per_sentence=True))
    assert len(chunks) == 4  # the first sentence as lead and rest, then two sentences
    lead, rest = chunks[0], chunks[1]
    first_sentence = 4 * (engine.calls[0] + 2)
    cut = len(lead.samples)
    assert cut % 600 == 0 and 0 < cut // 600 <= 48
    assert engine.decoded[:2] == [cut // 600 + 16, None] and set(engine.decoded[2:]) == {None}
    assert len(lead.samples) + len(rest.samples) == 600 * first_sentence
    np.testing.assert_array_equal(lead.samples[200:], 0.25)  # the window's, fade-in only
    whole = engine.whole(first_sentence)
    np.testing.assert_array_equal(rest.samples[600:-200], whole[cut + 600:-200])
    joined = np.concatenate([lead.samples, rest.samples])
    assert np.max(np.abs(np.diff(joined[cut - 10:cut + 610]))) < 0.01  # no step at the seam
    assert " ".join(c.text for c in chunks).split() == TEXT.split()
    assert len(lead.text.split()) == lead.phonemes.count(" ") + 1  # words cut as phonemes
    spoken = token_ids(f"{lead.phonemes} {rest.phonemes}", speaker.vocab)
    assert len(spoken) == engine.calls[0]  # the piece's phonemes, split at a space
    assert (lead.start_seconds, rest.start_seconds) == (0, cut / SAMPLE_RATE)


def test_no_lead_where_the_window_would_be_padded_past_the_leads_bucket(tiny_assets):
    """A folder without a small decoder bucket: the window would cost about what the whole does,
    so the first sentence is decoded whole, as the others."""
    speaker = AssetFolder.of_build(tiny_assets)
    engine = LeadingEngine(10_000, buckets=(128, 256))
    chunks = list(speak_chunks(engine, TEXT, "af_heart", speaker=speaker, per_sentence=True))
    assert len(chunks) == 3 and set(engine.decoded) == {None}
    leading = LeadingEngine(10_000, buckets=(64, 128, 256))
    assert len(list(speak_chunks(leading, TEXT, "af_heart", speaker=speaker,
                                 per_sentence=True))) == 4


def test_no_lead_unless_streaming(tiny_assets):
    engine = LeadingEngine(10_000)
    chunks = list(speak_chunks(engine, TEXT, "af_heart", speaker=AssetFolder.of_build(tiny_assets)))
    assert len(chunks) == 1 and engine.decoded == [None]


def test_a_halved_first_piece_leads_with_its_first_half(tiny_assets):
    engine = LeadingEngine(30)  # the first sentence (over 30 tokens) is halved at its clause
    chunks = list(speak_chunks(engine, TEXT, "af_heart", speaker=AssetFolder.of_build(tiny_assets),
                               per_sentence=True))
    assert engine.calls[0] <= 30 and 4 * (engine.calls[0] + 2) > speech.LEAD_FRAMES
    windows = [frames for frames in engine.decoded if frames is not None]
    assert len(windows) == 1 and engine.decoded[0] == windows[0]
    assert chunks[0].text == "The first" and chunks[1].text == "sentence is here,"
    assert " ".join(c.text for c in chunks).split() == TEXT.split()


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
        starts = np.cumsum([0] + [len(c.samples) for c in chunks[:-1]]) / SAMPLE_RATE
        np.testing.assert_allclose([c.start_seconds for c in chunks], starts)
        assert all(c.sample_rate == SAMPLE_RATE for c in chunks)
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
