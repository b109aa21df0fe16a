"""Text to speech with any engine: G2P, chunking under Kokoro's token limit, voices, stitching.

An engine turns one chunk's token ids (without the boundary pads) and a style vector into audio;
everything else is shared here so that the PyTorch reference and the TVM runtime speak the same
text the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, runtime_checkable

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


class Speaker(VoiceFolder, Protocol):
    """A folder with voices and the phoneme vocabulary (runtime/model_folder.py)."""

    @property
    def vocab(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class Chunk:
    """One engine call's audio, with the text it speaks and where it starts in the whole."""

    text: str  # a stream's lead: its piece's first words, as many as the lead's phoneme words
    phonemes: str
    samples: np.ndarray  # float32, SAMPLE_RATE
    start_seconds: float

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE


class ChunkTooLong(UserError):
    """An engine cannot take this chunk whole (no bucket large enough); the speaker splits it."""


FADE_SECONDS = 0.005  # raised-cosine ramps at chunk edges: joins without clicks

# A stream's lead: the first words of its first piece, decoded alone within LEAD_FRAMES (a small
# decoder bucket) and played while the whole piece decodes. The text side and f0n run on the
# whole piece first, so the lead has the sentence's durations and pitch. The decoder normalises
# over the frames it is given, so the lead ends at a word gap LEAD_CONTEXT_FRAMES before the
# window does, and the whole piece's audio takes over from there through a crossfade of one
# frame (docs/decisions.md, First audio when streaming). An engine whose decoder would pad the
# window past LEAD_FRAMES (a folder built without a small bucket) gains nothing by it: no lead.
LEAD_FRAMES = 64
LEAD_CONTEXT_FRAMES = 16
CROSSFADE_SAMPLES = SAMPLES_PER_FRAME


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


def lead_cut(durations: np.ndarray, ids: list[int], space: int) -> tuple[int, int] | None:
    """Where a stream's lead ends, as (frame, words before it): the middle of the last word gap
    (a ``space`` token) at most LEAD_FRAMES - LEAD_CONTEXT_FRAMES frames in; None when the piece
    fits LEAD_FRAMES anyway or no gap is that early. ``durations`` counts the pads at both ends
    of ``ids``, as engines return them."""
    if durations.sum() <= LEAD_FRAMES:
        return None
    starts = np.cumsum(durations) - durations
    gaps = [int(starts[i] + durations[i] // 2) for i, token in enumerate([0, *ids, 0])
            if token == space]
    early = [(frame, words) for words, frame in enumerate(gaps, 1)
             if 0 < frame <= LEAD_FRAMES - LEAD_CONTEXT_FRAMES]
    return early[-1] if early else None


def _split_words(piece: g2p.Piece, words: int) -> tuple[g2p.Piece, g2p.Piece]:
    """``piece`` cut after its first ``words`` phoneme words (and as many words of its text)."""
    phonemes, text = piece.phonemes.split(" "), piece.text.split()
    return (g2p.Piece(" ".join(text[:words]), " ".join(phonemes[:words])),
            g2p.Piece(" ".join(text[words:]), " ".join(phonemes[words:])))


def _led(engine: LeadingEngine, piece: g2p.Piece, ids: list[int], prosody: Prosody, space: int
         ) -> Iterator[tuple[g2p.Piece, np.ndarray]]:
    """A piece as its lead (see LEAD_FRAMES), then the rest of its whole decode."""
    cut = lead_cut(prosody.durations, ids, space)
    if cut is None or engine.decode_frames(cut[0] + LEAD_CONTEXT_FRAMES) > LEAD_FRAMES:
        yield piece, _faded(engine.decode(prosody))
        return
    frame, words = cut
    window = engine.decode(prosody, frame + LEAD_CONTEXT_FRAMES)
    end = frame * SAMPLES_PER_FRAME
    lead, rest = _split_words(piece, words)
    yield lead, _faded(window[:end], end=False)
    audio = engine.decode(prosody)[end:]
    fade_in = _ramp(CROSSFADE_SAMPLES)
    audio[:CROSSFADE_SAMPLES] = (window[end:end + CROSSFADE_SAMPLES] * (1 - fade_in)
                                 + audio[:CROSSFADE_SAMPLES] * fade_in)
    yield rest, _faded(audio, start=False)


def _synthesize_piece(engine: Engine, piece: g2p.Piece, table: np.ndarray, lang: str,
                      vocab: dict[str, int], speed: float, seed: int, lead: bool
                      ) -> Iterator[tuple[g2p.Piece, np.ndarray]]:
    """One piece's audio, edges faded, as its lead and the rest where ``lead`` is asked for and
    the engine can; pieces an engine cannot take whole are halved at a boundary."""
    ids = g2p.token_ids(piece.phonemes, vocab)
    style = style_for(table, len(ids))
    space = vocab.get(" ")
    leading = lead and space is not None and isinstance(engine, LeadingEngine)
    try:  # engines refuse a chunk (ChunkTooLong) before returning anything for it
        if leading:
            prosody = engine.prosody(ids, style, speed, seed)
        else:
            audio = engine.synthesize(ids, style, speed, seed)
    except ChunkTooLong:
        halves = g2p.halve(piece, g2p.phonemizer(lang))
        if len(halves) < 2:
            raise  # a single word that still does not fit: the error says which bucket to add
        for i, half in enumerate(halves):
            yield from _synthesize_piece(engine, half, table, lang, vocab, speed, seed,
                                         lead and i == 0)
        return
    if leading:
        yield from _led(engine, piece, ids, prosody, space)
    else:
        yield piece, _faded(audio)


def speak_chunks(engine: Engine, text: str, voice: str, *, speaker: Speaker,
                 lang: str | None = None, speed: float = 1.0, seed: int = 0,
                 per_sentence: bool = False,
                 progress: Callable[[int, int], None] | None = None) -> Iterator[Chunk]:
    """Audio per chunk as each finishes, edges faded so that chunks join without clicks.

    ``voice`` is a name or blend from ``speaker``'s voices; ``lang`` defaults to the voice's
    (g2p.language_of_voice). The text is phonemized as the chunks reach it (g2p.pieces), so the
    first chunk does not wait for the G2P of the rest. With ``per_sentence`` (streaming), an
    engine that can (LeadingEngine) speaks the first piece as a short lead and the rest of it.
    ``progress(done, total)`` is told the sentences spoken so far after each piece of the text
    (before any halving), so a long text can show how far it has got."""
    if not text.strip():
        raise SpeechError("the text is empty: give some words to speak")
    lang = lang or g2p.language_of_voice(voice)
    table, vocab = load_voice(voice, speaker), speaker.vocab
    total = len(g2p.sentences(text))
    done_samples, sentences_done = 0, None
    for i, (piece, sentences_done) in enumerate(
            g2p.pieces(text, g2p.phonemizer(lang), vocab, per_sentence=per_sentence)):
        for spoken, audio in _synthesize_piece(engine, piece, table, lang, vocab, speed, seed + i,
                                               lead=per_sentence and i == 0):
            yield Chunk(spoken.text, spoken.phonemes, audio, done_samples / SAMPLE_RATE)
            done_samples += len(audio)
        if progress is not None:
            progress(sentences_done, total)
    if sentences_done is None:
        raise SpeechError(f"nothing speakable in {text[:40]!r}: the {lang} G2P gave no phonemes")
    if progress is not None and sentences_done < total:
        progress(total, total)  # the last sentences had nothing to say (punctuation alone)


def speak(engine: Engine, text: str, voice: str, **options) -> np.ndarray:
    """The whole text's audio, chunks joined end to end."""
    return np.concatenate([chunk.samples for chunk in speak_chunks(engine, text, voice, **options)])
