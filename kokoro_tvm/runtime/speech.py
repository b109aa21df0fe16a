"""Text to speech with any engine: G2P, chunking under Kokoro's token limit, voices, stitching.

An engine turns one chunk's token ids (without the boundary pads) and a style vector into audio;
everything else is shared here so that the PyTorch reference and the TVM runtime speak the same
text the same way.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import SAMPLE_RATE, SAMPLES_PER_FRAME
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.voices import VoiceFolder, load_voice, style_for


class SpeechError(UserError):
    """Text that cannot be spoken; the message says why."""


class Engine(Protocol):
    def synthesize(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int) -> np.ndarray:
        """Audio (float32 at SAMPLE_RATE) for token ids without pads and a [1, 256] style."""


@runtime_checkable
class TimedEngine(Engine, Protocol):
    """An engine that tells how many frames each token lasts: its chunks carry their words."""

    def synthesize_with_durations(self, ids: list[int], ref_s: np.ndarray, speed: float,
                                  seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``synthesize``'s audio and the frames of every token, the boundary pads included."""


class Prosody(Protocol):
    """What an engine's text side and f0n made of one chunk: all its decoder needs."""

    durations: np.ndarray  # frames per token, the boundary pads included


@runtime_checkable
class LeadingEngine(Engine, Protocol):
    """An engine that can decode the start of a chunk alone, for a stream's first audio."""

    def prosody(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int) -> Prosody:
        """The text side and f0n on the whole chunk (``synthesize``'s first stages)."""

    def decode(self, prosody: Prosody, frames: int | None = None) -> np.ndarray:
        """The audio of the first ``frames`` frames decoded alone (all of them by default, which
        is what ``synthesize`` gives)."""

    def decode_frames(self, frames: int) -> int:
        """The frames a decode of ``frames`` frames computes (more where the engine pads them
        to a bucket)."""


class EngineSharing(Protocol):
    """How a stream shares its engine with other requests (a server's scheduler)."""

    def alone(self) -> bool:
        """Whether the stream has the engine to itself now (no other request takes turns)."""

    def turn(self) -> None:
        """Called before each of the stream's decodes, on the thread that synthesizes: a
        scheduler may run other requests' work here, between two engine calls of this one."""


class Alone:
    """An engine no other request uses."""

    def alone(self) -> bool:
        return True

    def turn(self) -> None:
        pass


class Speaker(VoiceFolder, Protocol):
    """A folder with voices and the phoneme vocabulary (runtime/model_folder.py)."""

    @property
    def vocab(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class Word:
    """A word of the text (its punctuation attached) and when it is spoken in the whole audio,
    in seconds: KPipeline's timing of its phonemes (word_frames)."""

    text: str
    start: float
    end: float


@dataclass(frozen=True)
class Chunk:
    """One engine call's audio, with the text it speaks and where it starts in the whole."""

    text: str  # a prefix decode's chunk: the words whose phonemes start in it
    phonemes: str
    samples: np.ndarray  # float32, SAMPLE_RATE
    start_seconds: float
    # The words whose phonemes start in this chunk (none where the engine tells no durations,
    # not TimedEngine or LeadingEngine); their times may begin a little before start_seconds
    # (KPIPELINE_LEAD_FRAMES) and end a little after the chunk.
    words: tuple[Word, ...] = ()
    # Nothing follows this chunk: the text's last (known as it is made, so that a server can
    # end the response with it rather than at the stream's next turn).
    last: bool = False

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE


class ChunkTooLong(UserError):
    """An engine cannot take this chunk whole (no bucket large enough); the speaker splits it."""


FADE_SECONDS = 0.005  # raised-cosine ramps at chunk edges: joins without clicks

# A stream's lead: the first words of its first piece, decoded alone within LEAD_FRAMES (a small
# decoder bucket) and played while more of the piece decodes. The text side and f0n run on the
# whole piece first, so the lead has the sentence's durations and pitch. The decoder normalises
# over the frames it is given, so the lead ends at a word gap LEAD_CONTEXT_FRAMES before the
# window does, and the next decode's audio takes over from there through a crossfade of one
# frame (docs/streaming.md). An engine whose decoder would pad the
# window past LEAD_FRAMES (a folder built without a small bucket) gains nothing by it: no lead.
LEAD_FRAMES = 64
LEAD_CONTEXT_FRAMES = 16
CROSSFADE_SAMPLES = SAMPLES_PER_FRAME
FRAME_SECONDS = SAMPLES_PER_FRAME / SAMPLE_RATE

# After the lead, every piece of a stream alone on its engine is paced (Pacing): while the audio
# already sent would run out before the piece's whole decode finished, the piece is spoken as
# growing prefix decodes of its prosody (each from frame 0, as the lead, so SineGen's phase and
# noise are the whole's), each chunk the frames from the last cut to a later word gap,
# LEAD_CONTEXT_FRAMES before its window's end. Plans take a decode to last PACING_MARGIN times
# what the stream's own decodes so far predict: the machine's load changes between decodes. A
# stream that shares its engine decodes each piece whole: a window decodes its prefix again,
# engine time the other requests' streams lose (docs/serving.md, Windows only alone).
PACING_MARGIN = 1.25
# Plans look this many windows ahead, among at most PLAN_CANDIDATES windows (one per decoder
# bucket: its last gap): 697 plans at most, a few milliseconds against decodes of 0.1 s and more.
PLAN_WINDOWS = 3
PLAN_CANDIDATES = 16


# KPipeline (kokoro's pipeline.py, join_timestamps) times a piece's words from this many frames
# before their phonemes, and no earlier than the piece's start; kept, so that our times are
# KPipeline's (docs/timestamps.md).
KPIPELINE_LEAD_FRAMES = 3


def word_frames(words: Sequence[g2p.PhonemizedWord], durations: np.ndarray,
                vocab: dict[str, int]) -> list[tuple[int, float, float]]:
    """Per word of a piece: the frame its phonemes start at, and its start and end frames as
    KPipeline.join_timestamps gives them for these ``durations`` (frames per token, the pads
    included): each word ends in the middle of the whitespace after it (at its phonemes' end
    where none follows) and the next starts there, all KPIPELINE_LEAD_FRAMES early (the first
    word from the piece's start at the earliest). A word without phonemes takes the halves of
    the spaces around it, where KPipeline's count slips a token."""
    ends = np.cumsum(durations)  # where each token ends, pads included
    lead = min(int(durations[0]), KPIPELINE_LEAD_FRAMES)
    token, start, timed = 1, float(durations[0] - lead), []
    for word in words:
        spoken = token + len(g2p.token_ids(word.phonemes, vocab))
        spaced = spoken + len(g2p.token_ids(word.whitespace, vocab))
        end = (ends[spoken - 1] + ends[spaced - 1]) / 2 - lead
        timed.append((int(ends[token - 1]), start, float(end)))
        token, start = spaced, float(end)
    if token != len(durations) - 1:
        raise ValueError(f"{len(durations)} durations for words of {token - 1} tokens and pads")
    return timed


def _ramp(length: int) -> np.ndarray:
    """Raised cosine from 0 to 1 over ``length`` samples."""
    return 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, length, dtype=np.float32))


def _faded(audio: np.ndarray, start: bool = True, end: bool = True) -> np.ndarray:
    ramp = min(int(FADE_SECONDS * SAMPLE_RATE), len(audio) // 2)
    if ramp == 0:
        return audio
    window = _ramp(ramp)
    audio = audio.copy()
    if start:
        audio[:ramp] *= window
    if end:
        audio[-ramp:] *= window[::-1]
    return audio


def word_gaps(durations: np.ndarray, ids: list[int], space: int) -> list[tuple[int, int]]:
    """Where a piece may be cut, as (frame, words before it): the middle of each word gap (a
    ``space`` token), in order. ``durations`` counts the pads at both ends of ``ids``, as
    engines return them."""
    starts = np.cumsum(durations) - durations
    frames = [int(starts[i] + durations[i] // 2) for i, token in enumerate([0, *ids, 0])
              if token == space]
    return [(frame, words) for words, frame in enumerate(frames, 1)]


def _lead(gaps: list[tuple[int, int]], total: int) -> tuple[int, int] | None:
    if total <= LEAD_FRAMES:
        return None
    early = [gap for gap in gaps if 0 < gap[0] <= LEAD_FRAMES - LEAD_CONTEXT_FRAMES]
    return early[-1] if early else None


def lead_cut(durations: np.ndarray, ids: list[int], space: int) -> tuple[int, int] | None:
    """Where a stream's lead ends, as (frame, words before it): the middle of the last word gap
    at most LEAD_FRAMES - LEAD_CONTEXT_FRAMES frames in; None when the piece fits LEAD_FRAMES
    anyway or no gap is that early."""
    return _lead(word_gaps(durations, ids, space), int(durations.sum()))


class Pacing:
    """A stream against the wall clock (``clock``, in seconds): the audio a player that starts
    at the first chunk has left to play, how fast this engine decodes (measured on the stream's
    own decodes), and from these where each decode of a piece ends (``next_cut``).
    ``sharing`` tells whether other requests take turns on the engine now: a stream plans
    windows only alone (see PACING_MARGIN). Each decode is a turn of ``sharing``
    (EngineSharing.turn)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 sharing: EngineSharing = Alone()):
        self.clock = clock
        self.sharing = sharing
        self.played_until: float | None = None  # when the player runs out of audio
        self.seconds_per_frame = 0.0  # per frame the decoder computes, bucket padding included

    def sent(self, samples: int) -> None:
        """A chunk of ``samples`` is ready now: it plays once the audio before it has, or now
        if the player has run out and waits."""
        now = self.clock()
        starts = now if self.played_until is None else max(now, self.played_until)
        self.played_until = starts + samples / SAMPLE_RATE

    def buffered_seconds(self) -> float | None:
        """The audio sent and not yet played (0 while the player waits); None before the first
        chunk."""
        if self.played_until is None:
            return None
        return max(self.played_until - self.clock(), 0.0)

    def decode(self, engine: LeadingEngine, prosody: Prosody, frames: int | None) -> np.ndarray:
        """``engine.decode``, timed: a slower decode than expected counts at once, a faster one
        halfway (the estimate stays on the safe side of a machine whose load comes and goes).
        The turn comes first: what other requests do in it is not this decode's time."""
        self.sharing.turn()
        started = self.clock()
        audio = engine.decode(prosody, frames)
        computed = engine.decode_frames(len(audio) // SAMPLES_PER_FRAME)
        measured = (self.clock() - started) / computed
        if measured >= self.seconds_per_frame:
            self.seconds_per_frame = measured
        else:
            self.seconds_per_frame = (self.seconds_per_frame + measured) / 2
        return audio

    def next_cut(self, engine: LeadingEngine, gaps: list[tuple[int, int]], cut: int, total: int
                 ) -> tuple[int, int] | None:
        """Where the next decode of a piece of ``total`` frames, spoken up to frame ``cut``,
        ends: a word gap of ``gaps`` (its window LEAD_CONTEXT_FRAMES longer), or None for the
        whole piece. The stream's first decode is its lead; later ones, alone on the engine,
        are the first step of the plan (up to PLAN_WINDOWS windows, then the whole) whose
        longest expected wait is shortest, then whose decoding is least; sharing it, the
        whole."""
        buffered = self.buffered_seconds()
        if buffered is None:
            lead = _lead(gaps, total)
            if lead is None or engine.decode_frames(lead[0] + LEAD_CONTEXT_FRAMES) > LEAD_FRAMES:
                return None
            return lead
        if not self.sharing.alone():
            return None
        whole = engine.decode_frames(total)
        by_bucket = {}  # a window's last gap: the most audio for the same decode
        for frame, words in gaps:
            window = engine.decode_frames(frame + LEAD_CONTEXT_FRAMES)
            if frame > cut and frame + LEAD_CONTEXT_FRAMES < total and window < whole:
                by_bucket[window] = (frame, words)
        windows = sorted(by_bucket.items(), key=lambda item: item[1])
        if len(windows) > PLAN_CANDIDATES:  # evenly thinned, the last kept
            step = len(windows) / PLAN_CANDIDATES
            windows = [windows[len(windows) - 1 - int(i * step)]
                       for i in reversed(range(PLAN_CANDIDATES))]

        def outcome(plan: tuple[tuple[int, tuple[int, int]], ...]) -> tuple[float, float]:
            """The plan's longest wait (to the millisecond) and its decoding seconds; infinite
            for a plan with a window that takes longer to decode than to play (on a machine too
            busy to keep up, windows would only add decoding)."""
            left, worst, decoding, spoken = buffered, 0.0, 0.0, cut
            for computed, frame in [(c, gap[0]) for c, gap in plan] + [(whole, total)]:
                seconds = PACING_MARGIN * self.seconds_per_frame * computed
                if frame < total and seconds >= (frame - spoken) * FRAME_SECONDS:
                    return math.inf, math.inf
                worst = max(worst, seconds - left)
                left = max(left - seconds, 0.0) + (frame - spoken) * FRAME_SECONDS
                decoding += seconds
                spoken = frame
            return round(worst, 3), decoding

        plans = [plan for length in range(PLAN_WINDOWS + 1)
                 for plan in itertools.combinations(windows, length)]
        best = min(plans, key=outcome)  # the whole piece first among equals
        return best[0][1] if best else None


@dataclass(frozen=True)
class _Spoken:
    """A chunk before its place in the whole is known: its words timed from its own start."""

    text: str
    phonemes: str
    samples: np.ndarray
    words: tuple[Word, ...]
    ends_piece: bool  # the piece's last chunk


def _spoken(piece: g2p.Piece, audio: np.ndarray, timed: list[tuple[int, float, float]],
            first: int = 0, end: int | None = None, phoneme_words: slice = slice(None)
            ) -> _Spoken:
    """The chunk of ``piece`` from frame ``first`` to ``end`` (to its end for None, the whole
    piece by default) with its phoneme words, and the words whose phonemes start in it
    (``timed``: word_frames, none where the engine told no durations), timed from ``first``;
    a part of a piece has those words' text."""
    words = tuple(Word(word.text, (start - first) * FRAME_SECONDS, (stop - first) * FRAME_SECONDS)
                  for word, (frame, start, stop) in zip(piece.words, timed)
                  if first <= frame and (end is None or frame < end))
    if first == 0 and end is None:
        return _Spoken(piece.text, piece.phonemes, audio, words, ends_piece=True)
    return _Spoken(" ".join(word.text for word in words),
                   " ".join(piece.phonemes.split(" ")[phoneme_words]), audio, words,
                   ends_piece=end is None)


def _paced(engine: LeadingEngine, piece: g2p.Piece, ids: list[int], prosody: Prosody, space: int,
           pacing: Pacing, vocab: dict[str, int]) -> Iterator[_Spoken]:
    """A piece as prefix decodes ending where ``pacing`` says (see PACING_MARGIN), each chunk
    its decode's audio from the previous cut, crossfaded from the previous window's, the last
    from the whole decode."""
    total = int(prosody.durations.sum())
    gaps = word_gaps(prosody.durations, ids, space)
    timed = word_frames(piece.words, prosody.durations, vocab)
    cut, words, overlap = 0, 0, None
    while True:
        step = pacing.next_cut(engine, gaps, cut, total)
        window = None if step is None else step[0] + LEAD_CONTEXT_FRAMES
        audio = pacing.decode(engine, prosody, window)
        end = len(audio) if step is None else step[0] * SAMPLES_PER_FRAME
        chunk = audio[cut * SAMPLES_PER_FRAME:end].copy()
        if overlap is not None:
            fade_in = _ramp(CROSSFADE_SAMPLES)
            chunk[:CROSSFADE_SAMPLES] = (overlap * (1 - fade_in)
                                         + chunk[:CROSSFADE_SAMPLES] * fade_in)
        yield _spoken(piece, _faded(chunk, start=cut == 0, end=step is None), timed, cut,
                      None if step is None else step[0],
                      slice(words, None if step is None else step[1]))
        if step is None:
            return
        overlap = audio[end:end + CROSSFADE_SAMPLES]
        cut, words = step


def _synthesize_piece(engine: Engine, piece: g2p.Piece, table: np.ndarray, lang: str,
                      vocab: dict[str, int], speed: float, seed: int, pacing: Pacing | None
                      ) -> Iterator[_Spoken]:
    """One piece's audio, edges faded, in the chunks ``pacing`` asks for where given and the
    engine can decode prefixes, else whole, with its words timed where the engine tells their
    durations; pieces an engine cannot take whole are halved at a boundary."""
    ids = g2p.token_ids(piece.phonemes, vocab)
    style = style_for(table, len(ids))
    space = vocab.get(" ")
    paced = pacing is not None and space is not None and isinstance(engine, LeadingEngine)
    try:  # engines refuse a chunk (ChunkTooLong) before returning anything for it
        if paced:
            prosody = engine.prosody(ids, style, speed, seed)
        elif isinstance(engine, TimedEngine):
            audio, durations = engine.synthesize_with_durations(ids, style, speed, seed)
        else:
            audio, durations = engine.synthesize(ids, style, speed, seed), None
    except ChunkTooLong:
        halves = g2p.halve(piece, g2p.word_phonemizer(lang))
        if len(halves) < 2:
            raise  # a single word that still does not fit: the error says which bucket to add
        for k, half in enumerate(halves):
            for spoken in _synthesize_piece(engine, half, table, lang, vocab, speed, seed, pacing):
                yield spoken if k == len(halves) - 1 else replace(spoken, ends_piece=False)
        return
    if paced:
        yield from _paced(engine, piece, ids, prosody, space, pacing, vocab)
    else:
        timed = [] if durations is None else word_frames(piece.words, durations, vocab)
        yield _spoken(piece, _faded(audio), timed)


def speak_chunks(engine: Engine, text: str, voice: str, *, speaker: Speaker,
                 lang: str | None = None, speed: float = 1.0, seed: int = 0,
                 per_sentence: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 sharing: EngineSharing = Alone()) -> Iterator[Chunk]:
    """Audio per chunk as each finishes, edges faded so that chunks join without clicks.

    ``voice`` is a name or blend from ``speaker``'s voices; ``lang`` defaults to the voice's
    (g2p.language_of_voice). The text is phonemized as the chunks reach it (g2p.pieces), so the
    first chunk does not wait for the G2P of the rest. With ``per_sentence`` (streaming), an
    engine that can (LeadingEngine) speaks the first piece's first words as a lead, and every
    piece in prefix decodes while the audio already yielded would run out before its whole
    decode finished (Pacing, timed by ``clock``: a player is taken to start when the first chunk
    is yielded; ``sharing``: how it shares the engine with other requests). Each chunk carries
    the words whose phonemes start in it, timed in the whole audio (Chunk.words).
    ``progress(done, total)`` is told the sentences spoken so far after each piece of the text
    (before any halving), so a long text can show how far it has got."""
    if not text.strip():
        raise SpeechError("the text is empty: give some words to speak")
    lang = lang or g2p.language_of_voice(voice)
    table, vocab = load_voice(voice, speaker), speaker.vocab
    total = len(g2p.sentences(text))
    pacing = Pacing(clock, sharing) if per_sentence else None
    done_samples, sentences_done = 0, None
    for i, (piece, sentences_done) in enumerate(
            g2p.pieces(text, g2p.word_phonemizer(lang), vocab, per_sentence=per_sentence)):
        for spoken in _synthesize_piece(engine, piece, table, lang, vocab, speed, seed + i,
                                        pacing):
            if pacing is not None:
                pacing.sent(len(spoken.samples))
            start = done_samples / SAMPLE_RATE
            words = tuple(Word(w.text, start + w.start, start + w.end) for w in spoken.words)
            yield Chunk(spoken.text, spoken.phonemes, spoken.samples, start, words,
                        last=spoken.ends_piece and sentences_done == total)
            done_samples += len(spoken.samples)
        if progress is not None:
            progress(sentences_done, total)
    if sentences_done is None:
        raise SpeechError(f"nothing speakable in {text[:40]!r}: the {lang} G2P gave no phonemes")
    if progress is not None and sentences_done < total:
        progress(total, total)  # the last sentences had nothing to say (punctuation alone)


def speak(engine: Engine, text: str, voice: str, **options) -> np.ndarray:
    """The whole text's audio, chunks joined end to end."""
    return np.concatenate([chunk.samples for chunk in speak_chunks(engine, text, voice, **options)])
