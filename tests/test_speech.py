"""Chunking long text for an engine: splits where a chunk does not fit, joins without clicks."""
from __future__ import annotations

import io
import types

import numpy as np
import pytest

from kokoro_tvm.cli import ProgressBar
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.measure.metrics import worst_stall
from kokoro_tvm.runtime import speech
from kokoro_tvm.runtime.g2p import token_ids
from kokoro_tvm.runtime.model_folder import AssetFolder
from kokoro_tvm.runtime.speech import (
    ChunkTooLong,
    Pacing,
    SpeechError,
    lead_cut,
    speak,
    speak_chunks,
    word_gaps,
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


class ClockedEngine(LeadingEngine):
    """LeadingEngine on a clock of its own, which its calls advance: the text side by
    ``prosody_seconds``, a decode by ``seconds_per_frame`` per frame of its bucket. Its decoder
    is local (a window's audio is the start of the whole decode's), so a stream's chunks join
    into the whole decodes."""

    def __init__(self, seconds_per_frame: float, buckets: tuple[int, ...] = (),
                 prosody_seconds: float = 0.05):
        super().__init__(10_000, buckets)
        self.seconds_per_frame, self.prosody_seconds = seconds_per_frame, prosody_seconds
        self.now = 0.0
        self.totals = []  # frames of each piece, in order

    def clock(self) -> float:
        return self.now

    def prosody(self, ids, ref_s, speed, seed):
        self.now += self.prosody_seconds
        prosody = super().prosody(ids, ref_s, speed, seed)
        self.totals.append(int(prosody.durations.sum()))
        return prosody

    def decode(self, prosody, frames=None):
        self.decoded.append(frames)
        total = int(prosody.durations.sum())
        frames = total if frames is None else min(frames, total)
        self.now += self.seconds_per_frame * self.decode_frames(frames)
        return self.whole(total)[:600 * frames]


def _timed_stream(engine: ClockedEngine, text: str, speaker) -> tuple[list, list[float]]:
    """The chunks of ``text`` streamed on ``engine``'s clock, and when each was ready."""
    chunks, ready = [], []
    for chunk in speak_chunks(engine, text, "af_heart", speaker=speaker, per_sentence=True,
                              clock=engine.clock):
        chunks.append(chunk)
        ready.append(engine.now)
    return chunks, ready


def _per_piece(decoded: list) -> list[list]:
    """Each piece's decodes (windows, then None for the whole)."""
    pieces, current = [], []
    for frames in decoded:
        current.append(frames)
        if frames is None:
            pieces.append(current)
            current = []
    return pieces


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


@pytest.mark.parametrize("engine, per_sentence", [
    (LeadingEngine(10_000), True),  # a lead, then whole sentences
    (LeadingEngine(30), True),  # the first sentence halved
    (LimitedEngine(40), False),  # halved pieces, not streamed
    (LimitedEngine(10_000), False)])  # one chunk
def test_only_the_texts_last_chunk_is_marked_last(tiny_assets, engine, per_sentence):
    chunks = list(speak_chunks(engine, TEXT, "af_heart", speaker=AssetFolder.of_build(tiny_assets),
                               per_sentence=per_sentence))
    assert [c.last for c in chunks] == [False] * (len(chunks) - 1) + [True]


def test_no_chunk_is_marked_last_before_sentences_with_nothing_to_say(tiny_assets):
    """Trailing sentences the G2P turns into nothing: the last chunk spoken is not known to be
    the last as it is made (its stream ends at its next turn instead)."""
    chunks = list(speak_chunks(LeadingEngine(10_000), "Hello there. **", "af_heart",
                               speaker=AssetFolder.of_build(tiny_assets), per_sentence=True))
    assert chunks and not any(c.last for c in chunks)


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


@pytest.fixture
def margin(monkeypatch):
    """Pacing plans with decodes taking 1.5 times the stream's estimate, as these tests count."""
    monkeypatch.setattr(speech, "PACING_MARGIN", 1.5)


def test_a_stream_grows_its_windows_until_a_whole_decode_fits_and_never_stalls(tiny_assets,
                                                                               margin):
    """A decoder at 6 ms a frame (9 ms planned), after a 1.05 s lead: the first sentence's whole
    decode (196 frames, 1.76 s planned) would not be ready before the lead has played, so the
    stream decodes a larger window first, then the whole; the later sentences, with more audio
    sent, are decoded whole. A player never waits."""
    speaker = AssetFolder.of_build(tiny_assets)
    engine = ClockedEngine(seconds_per_frame=0.006)
    chunks, ready = _timed_stream(engine, TEXT, speaker)
    pieces = _per_piece(engine.decoded)
    assert engine.totals[0] == 196 and pieces[1:] == [[None], [None]]
    lead, window, whole = pieces[0]
    assert lead == 42 + 16  # the last gap (frames 14, 42, 78, ...) within 48 frames
    assert lead < window < 196 and whole is None
    assert len(chunks[0].samples) / SAMPLE_RATE == 42 * 0.025 < 1.5 * 0.006 * 196
    assert worst_stall(ready, [len(c.samples) / SAMPLE_RATE for c in chunks]) == 0


def test_stream_chunks_join_into_the_whole_decodes_cut_at_word_gaps(tiny_assets, margin):
    """Where a window's audio is the whole decode's start, the chunks join into each piece's
    whole decode, faded at the piece's ends alone; every cut is the middle of a word gap, with
    as many words of text as of phonemes before it, and each chunk starts where the last
    ended."""
    speaker = AssetFolder.of_build(tiny_assets)
    engine = ClockedEngine(seconds_per_frame=0.008)
    chunks, _ = _timed_stream(engine, TEXT, speaker)
    pieces = _per_piece(engine.decoded)
    assert len(chunks) == len(engine.decoded) > len(pieces) == 3
    joined = np.concatenate([c.samples for c in chunks])
    expected = np.concatenate([speech._faded(engine.whole(total)) for total in engine.totals])
    np.testing.assert_allclose(joined, expected, atol=1e-6)
    first = chunks[:len(pieces[0])]
    ids = token_ids(" ".join(c.phonemes for c in first), speaker.vocab)
    gaps = word_gaps(np.full(len(ids) + 2, engine.FRAMES_PER_TOKEN), ids, speaker.vocab[" "])
    cuts = np.cumsum([len(c.samples) // 600 for c in first[:-1]])
    assert set(cuts) <= {frame for frame, _ in gaps} and len(cuts) >= 2
    for chunk in chunks:
        assert len(chunk.text.split()) == len(chunk.phonemes.split(" "))
    assert " ".join(c.text for c in chunks).split() == TEXT.split()
    starts = np.cumsum([0] + [len(c.samples) for c in chunks[:-1]]) / SAMPLE_RATE
    np.testing.assert_allclose([c.start_seconds for c in chunks], starts)


def test_a_long_sentence_after_a_short_one_is_paced_too(tiny_assets, margin):
    """A first sentence within the lead's bucket is decoded whole; the long one after it
    starts with a window, since the short one's audio would run out before its whole decode."""
    speaker = AssetFolder.of_build(tiny_assets)
    engine = ClockedEngine(seconds_per_frame=0.004, buckets=(64, 128, 192, 256, 384))
    chunks, ready = _timed_stream(engine, "Hello there. " + TEXT.split(". ")[-1], speaker)
    short, long = _per_piece(engine.decoded)
    assert engine.totals[0] <= 64 and short == [None]
    assert long[0] is not None and long[-1] is None
    assert engine.decode_frames(long[0]) < engine.decode_frames(engine.totals[1])
    assert worst_stall(ready, [len(c.samples) / SAMPLE_RATE for c in chunks]) == 0


def test_a_decoder_slower_than_playback_gets_no_windows_after_the_lead(tiny_assets, margin):
    """At 20 ms a frame (30 ms planned, more than the 25 ms a frame plays for) a window would
    cost more time than the audio it adds: after the lead, every piece is decoded whole."""
    speaker = AssetFolder.of_build(tiny_assets)
    engine = ClockedEngine(seconds_per_frame=0.02)
    _timed_stream(engine, TEXT, speaker)
    assert _per_piece(engine.decoded) == [[58, None], [None], [None]]


def _pacing_at(buffered: float, seconds_per_frame: float = 0.005) -> Pacing:
    """A stream whose player has ``buffered`` seconds left to play now."""
    pacing = Pacing(clock=lambda: 10.0)
    pacing.sent(int(buffered * SAMPLE_RATE))
    pacing.seconds_per_frame = seconds_per_frame
    return pacing


def test_pacing_counts_what_is_left_to_play_after_the_player_has_waited():
    now = [0.0]
    pacing = Pacing(clock=lambda: now[0])
    assert pacing.buffered_seconds() is None
    pacing.sent(SAMPLE_RATE)  # 1 s ready at 0 s
    now[0] = 0.25
    assert pacing.buffered_seconds() == pytest.approx(0.75)
    pacing.sent(SAMPLE_RATE // 2)
    now[0] = 2.0  # played out at 1.5 s: the player waits
    assert pacing.buffered_seconds() == 0
    pacing.sent(SAMPLE_RATE)  # plays from 2 s, not from 1.5 s
    now[0] = 2.5
    assert pacing.buffered_seconds() == pytest.approx(0.5)


def test_pacing_decodes_less_when_less_audio_is_left_to_play(margin):
    """A piece of 330 frames (the 384-frame bucket, 2.88 s planned at 7.5 ms a frame) spoken up
    to frame 48, word gaps every 16 frames; the windows worth planning are the last gaps of the
    128-, 192- and 256-frame buckets (0.96, 1.44 and 1.92 s). Worked by hand: with 3 s left,
    the whole; with 2 s, the 192-frame window, after which the whole fits; with 1 s or 0.3 s,
    the 128-frame window (then the 256-frame one: waits of 0.28 and 0.66 s, the least)."""
    engine = LeadingEngine(10_000, buckets=(64, 128, 192, 256, 384))
    gaps = [(16 * words, words) for words in range(1, 21)]

    def cut(buffered: float, spoken: int = 48):
        return _pacing_at(buffered).next_cut(engine, gaps, spoken, 330)

    assert cut(3.0) is None
    assert cut(2.0) == (176, 11)
    assert cut(1.0) == (112, 7) and cut(0.3) == (112, 7)
    assert cut(0.3, spoken=0) == (48, 3)  # the 64-frame window: a 0.18 s wait, the least
    # A piece in the 128-frame bucket, spoken past the 64-frame window's gaps: a window would
    # be padded to 128 frames and cost what the whole does.
    assert _pacing_at(0.3).next_cut(engine, gaps, 48, 120) is None
    assert _pacing_at(0.3).next_cut(engine, gaps, 0, 120) == (48, 3)


def test_a_stream_sharing_its_engine_decodes_each_piece_whole_after_its_lead():
    """Alone, 1 s of audio left plans a window before the whole; with other requests taking
    turns, the stream decodes the whole: a window's prefix, decoded again, is engine time the
    others lose. The lead is the same either way."""
    engine = LeadingEngine(10_000, buckets=(64, 128, 192, 256, 384))
    gaps = [(16 * words, words) for words in range(1, 21)]

    def cut(buffered: float | None, alone: bool):
        pacing = _pacing_at(buffered) if buffered is not None else Pacing()
        pacing.sharing = Shared(alone=alone)
        return pacing.next_cut(engine, gaps, 0 if buffered is None else 48, 330)

    assert cut(1.0, alone=True) == (112, 7)
    assert cut(1.0, alone=False) is None
    assert cut(None, alone=False) == cut(None, alone=True) == (48, 3)


class Shared:
    """An engine shared with other requests (or not: ``alone``); each turn, the others' work
    takes ``others`` seconds on ``engine``'s clock (none by default)."""

    def __init__(self, engine: ClockedEngine | None = None, others: float = 0.0,
                 alone: bool = False):
        self.engine, self.others, self.is_alone, self.turns = engine, others, alone, 0

    def alone(self) -> bool:
        return self.is_alone

    def turn(self) -> None:
        self.turns += 1
        if self.engine is not None:
            self.engine.now += self.others


def test_each_decode_is_a_turn_whose_time_is_not_the_decodes(tiny_assets):
    """A stream gives its shared engine a turn before every decode (the lead's included); what
    other requests do in it takes wall time, not the stream's decode time."""
    engine = ClockedEngine(seconds_per_frame=0.004)
    sharing = Shared(engine, others=1.0)
    chunks = list(speak_chunks(engine, TEXT, "af_heart", speaker=AssetFolder.of_build(tiny_assets),
                               per_sentence=True, clock=engine.clock, sharing=sharing))
    assert len(chunks) > 1 and sharing.turns == len(engine.decoded)
    pacing = Pacing(clock=engine.clock, sharing=sharing)
    pacing.decode(engine, engine.prosody(list(range(40)), None, 1.0, 0), 50)
    assert pacing.seconds_per_frame == pytest.approx(0.004)  # the 1 s turn left out


def test_pacing_estimates_from_the_streams_own_decodes_slower_at_once_faster_halfway():
    engine = ClockedEngine(seconds_per_frame=0.004, buckets=(64, 128))
    pacing = Pacing(clock=engine.clock)
    prosody = engine.prosody(list(range(40)), None, 1.0, 0)  # 168 frames
    pacing.decode(engine, prosody, 50)
    assert pacing.seconds_per_frame == pytest.approx(0.004)
    engine.seconds_per_frame = 0.008
    pacing.decode(engine, prosody, 100)  # a 128-frame window
    assert pacing.seconds_per_frame == pytest.approx(0.008)
    engine.seconds_per_frame = 0.002
    pacing.decode(engine, prosody, 30)
    assert pacing.seconds_per_frame == pytest.approx(0.005)


class DurationEngine(LimitedEngine):
    """LimitedEngine that tells its durations (speech.TimedEngine): by default pads of 6 and 2
    frames around tokens of 1 to 3 frames in turn; its audio is as long as they say."""

    def __init__(self, limit: int, durations=None):
        super().__init__(limit)
        self.durations = durations or (
            lambda n: np.array([6, *(1 + np.arange(n) % 3), 2]))

    def synthesize_with_durations(self, ids, ref_s, speed, seed):
        self.synthesize(ids, ref_s, speed, seed)  # refuses what LimitedEngine does
        durations = self.durations(len(ids))
        return np.full(600 * durations.sum(), 0.5, dtype=np.float32), durations


def _words_in_order(chunks) -> list:
    words = [word for chunk in chunks for word in chunk.words]
    assert " ".join(word.text for word in words).split() == TEXT.split()
    for chunk in chunks:  # each word in the chunk its phonemes start in
        end = chunk.start_seconds + len(chunk.samples) / SAMPLE_RATE
        lead = speech.KPIPELINE_LEAD_FRAMES * speech.FRAME_SECONDS
        assert all(chunk.start_seconds - lead <= w.start < end for w in chunk.words)
    return words


def test_words_are_timed_across_chunk_joins_and_halved_pieces(tiny_assets):
    """Joined, streamed (no lead: the engine decodes no prefix) and halved: the words of a
    piece follow each other with neither gap nor overlap; between pieces lies the silence of
    the pads (their 8 frames), the fades changing no length; the first word starts 3 frames
    before its phonemes (KPipeline's lead) and the last ends at the audio's end less the end
    pad and that lead."""
    speaker = AssetFolder.of_build(tiny_assets)
    for limit, per_sentence in ((10_000, False), (10_000, True), (12, False)):
        chunks = list(speak_chunks(DurationEngine(limit), TEXT, "af_heart", speaker=speaker,
                                   per_sentence=per_sentence))
        words = _words_in_order(chunks)
        frames = [chunk.start_seconds / speech.FRAME_SECONDS for chunk in chunks]
        for chunk, first in zip(chunks, frames):
            times = np.array([(w.start, w.end) for w in chunk.words]) / speech.FRAME_SECONDS
            assert times[0, 0] == pytest.approx(first + 6 - 3)
            assert times[-1, 1] == pytest.approx(first + len(chunk.samples) / 600 - 2 - 3)
            np.testing.assert_allclose(times[1:, 0], times[:-1, 1])  # no gap, no overlap
            assert np.all(times[:, 1] > times[:, 0])
        gaps = list(np.round([(b.start - a.end) / speech.FRAME_SECONDS
                              for a, b in zip(words, words[1:])], 9))
        assert set(gaps) <= {0, 8} and gaps.count(8) == len(chunks) - 1
    assert len(chunks) > 3  # halved


def test_a_paced_streams_words_are_those_of_its_pieces_spoken_whole(tiny_assets, margin):
    """The lead and the prefix windows change no word's time: a stream's words, each in the
    chunk its phonemes start in, are those of the same pieces decoded whole, and the text of
    a window's chunk is its words'."""
    speaker = AssetFolder.of_build(tiny_assets)
    engine = ClockedEngine(seconds_per_frame=0.012)
    chunks, _ = _timed_stream(engine, TEXT, speaker)
    assert len(chunks) > 3 and any(frames is not None for frames in engine.decoded)
    whole = DurationEngine(10_000, lambda n: np.full(n + 2, engine.FRAMES_PER_TOKEN))
    expected = list(speak_chunks(whole, TEXT, "af_heart", speaker=speaker, per_sentence=True))
    words = _words_in_order(chunks)
    assert [w.text for w in words] == [w.text for c in expected for w in c.words]
    np.testing.assert_allclose([(w.start, w.end) for w in words],
                               [(w.start, w.end) for c in expected for w in c.words])
    assert all(c.text == " ".join(w.text for w in c.words) for c in chunks)
    assert sum(len(c.samples) for c in chunks) == sum(len(c.samples) for c in expected)
