"""Text to speech with any engine: G2P, chunking under Kokoro's token limit, voices, stitching.

An engine turns one chunk's token ids (without the boundary pads) and a style vector into audio;
everything else is shared here so that the PyTorch reference and the TVM runtime speak the same
text the same way.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator, Protocol

import numpy as np

from kokoro_tvm import paths
from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.voices import load_voice, style_for


class SpeechError(UserError):
    """Text that cannot be spoken; the message says why."""


class Engine(Protocol):
    def synthesize(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int) -> np.ndarray:
        """Audio (float32, 24 kHz) for token ids without pads and a [1, 256] style."""


def load_vocab(root: str | Path = ".") -> dict[str, int]:
    config = json.loads(paths.artifact(paths.ASSET_CONFIG, root).read_text(encoding="utf-8"))
    return config["vocab"]


def phoneme_chunks(text: str, lang: str, vocab: dict[str, int], *,
                   per_sentence: bool = False) -> list[str]:
    """Phoneme pieces of at most g2p.MAX_TOKENS tokens, cut at sentence and clause boundaries;
    ``per_sentence`` makes every sentence its own piece (earlier first audio when streaming)."""
    if not text.strip():
        raise SpeechError("the text is empty: give some words to speak")
    phonemes = g2p.phonemizer(lang)(text)
    sentences = g2p.sentences(phonemes) if per_sentence else [phonemes]
    pieces = [piece for sentence in sentences for piece in g2p.split_phonemes(sentence)
              if g2p.token_ids(piece, vocab)]
    if not pieces:
        raise SpeechError(f"nothing speakable in {text[:40]!r}: the {lang} G2P gave no phonemes")
    return pieces


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


def _synthesize_piece(engine: Engine, piece: str, table: np.ndarray, vocab: dict[str, int],
                      speed: float, seed: int) -> Iterator[np.ndarray]:
    """One phoneme piece's audio; pieces an engine cannot take whole are halved at a boundary."""
    ids = g2p.token_ids(piece, vocab)
    try:
        yield engine.synthesize(ids, style_for(table, len(ids)), speed, seed)
    except ChunkTooLong:
        halves = g2p.halve_phonemes(piece)
        if len(halves) < 2:
            raise  # a single word that still does not fit: the error says which bucket to add
        for half in halves:
            yield from _synthesize_piece(engine, half, table, vocab, speed, seed)


def speak_chunks(engine: Engine, text: str, voice: str, *, lang: str = "en-us", speed: float = 1.0,
                 seed: int = 0, root: str | Path = ".", per_sentence: bool = False,
                 progress: Callable[[int, int], None] | None = None) -> Iterator[np.ndarray]:
    """Audio per chunk as each finishes, edges faded so that chunks join without clicks;
    ``progress(done, total)`` is told after each piece of the text (G2P's pieces, before any
    halving), so a long text can show how far it has got."""
    table, vocab = load_voice(voice, root), load_vocab(root)
    pieces = phoneme_chunks(text, lang, vocab, per_sentence=per_sentence)
    for i, piece in enumerate(pieces):
        for audio in _synthesize_piece(engine, piece, table, vocab, speed, seed + i):
            yield _faded(audio)
        if progress is not None:
            progress(i + 1, len(pieces))


def speak(engine: Engine, text: str, voice: str, **options) -> np.ndarray:
    """The whole text's audio, chunks joined end to end."""
    return np.concatenate(list(speak_chunks(engine, text, voice, **options)))


def write_wav(dest: str | Path, audio: np.ndarray) -> None:
    import soundfile

    from kokoro_tvm.atomic import atomic_path

    with atomic_path(dest) as tmp:
        soundfile.write(tmp, audio, SAMPLE_RATE, subtype="PCM_16")
