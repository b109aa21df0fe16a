"""Text to speech with any engine: G2P, chunking under Kokoro's token limit, voices, stitching.

An engine turns one chunk's token ids (without the boundary pads) and a style vector into audio;
everything else is shared here so that the PyTorch reference and the TVM runtime speak the same
text the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import numpy as np

from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.voices import VoiceFolder, load_voice, style_for


class SpeechError(UserError):
    """Text that cannot be spoken; the message says why."""


class Engine(Protocol):
    def synthesize(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int) -> np.ndarray:
        """Audio (float32, 24 kHz) for token ids without pads and a [1, 256] style."""


class Speaker(VoiceFolder, Protocol):
    """A folder with voices and the phoneme vocabulary (runtime/model_folder.py)."""

    @property
    def vocab(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class Chunk:
    """One engine call's audio, with the text it speaks and where it starts in the whole."""

    text: str
    phonemes: str
    samples: np.ndarray  # float32, SAMPLE_RATE
    start_seconds: float

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE


class ChunkTooLong(UserError):
    """An engine cannot take this chunk whole (no bucket large enough); the speaker splits it."""


FADE_SECONDS = 0.005  # raised-cosine ramps at chunk edges: joins without clicks


def _faded(audio: np.ndarray) -> np.ndarray:
    ramp = min(int(FADE_SECONDS * SAMPLE_RATE), len(audio) // 2)
    if ramp == 0:
        return audio
    window = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, ramp, dtype=np.float32))
    audio = audio.copy()
    audio[:ramp] *= window
    audio[-ramp:] *= window[::-1]
    return audio


def _synthesize_piece(engine: Engine, piece: g2p.Piece, table: np.ndarray, lang: str,
                      vocab: dict[str, int], speed: float, seed: int
                      ) -> Iterator[tuple[g2p.Piece, np.ndarray]]:
    """One piece's audio; pieces an engine cannot take whole are halved at a boundary."""
    ids = g2p.token_ids(piece.phonemes, vocab)
    try:
        yield piece, engine.synthesize(ids, style_for(table, len(ids)), speed, seed)
    except ChunkTooLong:
        halves = g2p.halve(piece, g2p.phonemizer(lang))
        if len(halves) < 2:
            raise  # a single word that still does not fit: the error says which bucket to add
        for half in halves:
            yield from _synthesize_piece(engine, half, table, lang, vocab, speed, seed)


def speak_chunks(engine: Engine, text: str, voice: str, *, speaker: Speaker,
                 lang: str | None = None, speed: float = 1.0, seed: int = 0,
                 per_sentence: bool = False,
                 progress: Callable[[int, int], None] | None = None) -> Iterator[Chunk]:
    """Audio per chunk as each finishes, edges faded so that chunks join without clicks.

    ``voice`` is a name or blend from ``speaker``'s voices; ``lang`` defaults to the voice's
    (g2p.language_of_voice). The text is phonemized as the chunks reach it (g2p.pieces), so the
    first chunk does not wait for the G2P of the rest. ``progress(done, total)`` is told the
    sentences spoken so far after each piece of the text (before any halving), so a long text
    can show how far it has got."""
    if not text.strip():
        raise SpeechError("the text is empty: give some words to speak")
    lang = lang or g2p.language_of_voice(voice)
    table, vocab = load_voice(voice, speaker), speaker.vocab
    total = len(g2p.sentences(text))
    done_samples, sentences_done = 0, None
    for i, (piece, sentences_done) in enumerate(
            g2p.pieces(text, g2p.phonemizer(lang), vocab, per_sentence=per_sentence)):
        for spoken, audio in _synthesize_piece(engine, piece, table, lang, vocab, speed, seed + i):
            yield Chunk(spoken.text, spoken.phonemes, _faded(audio), done_samples / SAMPLE_RATE)
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
