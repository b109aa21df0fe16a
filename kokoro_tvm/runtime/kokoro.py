"""The Python API, in the style of kokoro-onnx and KPipeline:

    from kokoro_tvm import Kokoro
    tts = Kokoro("results/dist/llvm")
    samples, sample_rate = tts.create("Hello.", voice="af_heart", speed=1.0, lang="en-us")
    samples, sample_rate, words = tts.create("Hello.", timestamps=True)
    for chunk in tts.stream("First sentence. Second one.", voice="af_heart"):
        chunk.text, chunk.start_seconds, chunk.samples, chunk.words

Every argument is checked before any synthesis (check_request), so a bad one costs nothing.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from kokoro_tvm.abi import MAX_SEED
from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import DEFAULT_VOICE, SAMPLE_RATE
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.model_folder import DEFAULT_MODEL, ModelFolder
from kokoro_tvm.runtime.speech import (
    Alone,
    Chunk,
    Engine,
    EngineSharing,
    SpeechError,
    TimedEngine,
    Word,
    speak_chunks,
)
from kokoro_tvm.runtime.voices import check_voice

# Speeds Kokoro stays intelligible at: durations are divided by the speed and rounded to whole
# frames, so fast speech merges phonemes and slow speech drawls. Chosen by the ASR check
# (docs/fidelity.md, Speed range): kokoro-onnx's range, outside which word error climbs
# quickly on both voices measured.
SPEED_RANGE = (0.5, 2.0)


class RequestError(UserError):
    """An argument of a synthesis request that cannot be used; the message names the fix."""


def check_speed(speed: float) -> float:
    """``speed`` as a float, if finite and within SPEED_RANGE."""
    low, high = SPEED_RANGE
    try:
        value = float(speed)
    except (TypeError, ValueError):
        raise RequestError(f"speed {speed!r} is not a number: give one from {low} to {high} "
                           "(1 is Kokoro's normal pace)") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise RequestError(f"speed {speed!r} is outside {low}-{high}, where Kokoro stays "
                           f"intelligible: give one from {low} to {high} (1 is normal pace)")
    return value


def check_seed(seed: int) -> int:
    """``seed`` if it is a whole number from 0 to MAX_SEED (the generators' 64-bit keys)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise RequestError(f"seed {seed!r:.40} is not a whole number from 0 to {MAX_SEED}: give "
                           "one such as 0 (the same seed gives the same audio)")
    return seed


def check_request(folder: ModelFolder, text: str, voice: str, speed: float, lang: str | None,
                  seed: int = 0) -> tuple[float, str]:
    """The speed and language of a request to ``folder``'s model, after checking every
    argument (none needs the model loaded)."""
    if not isinstance(text, str):
        raise SpeechError(f"the text is a {type(text).__name__}: give a str of words to speak")
    if not text.strip():
        raise SpeechError("the text is empty: give some words to speak")
    check_seed(seed)
    check_voice(voice, folder)
    if lang is None:
        lang = g2p.language_of_voice(voice)
    elif lang not in g2p.LANGUAGES:
        raise RequestError(f"unknown language '{lang}'; choose one of {', '.join(g2p.LANGUAGES)}")
    check_language_installed(lang)
    return check_speed(speed), lang


def check_language_installed(lang: str) -> None:
    """Refuses a language whose G2P is not installed, naming the extra that installs it."""
    unavailable = g2p.unavailable_reason(lang)
    if unavailable:
        raise RequestError(unavailable)


class Kokoro:
    """Text to speech with the libraries of one model folder (results/dist/{target}).

    ``engine`` replaces the compiled libraries by another engine on the same voices (the
    PyTorch reference: model/reference.py); ``lstm`` picks an LSTM lowering where the folder
    has several; ``kernels`` are folders of precompiled CUDA kernels (runtime/cuda.py).
    ``languages`` are G2Ps to load now rather than at the first request in each (English takes
    about 2 s to load, then milliseconds per sentence): a server's, so that its first request
    starts as soon as the others."""

    def __init__(self, model: str | Path | ModelFolder = DEFAULT_MODEL, *,
                 engine: Engine | None = None, lstm: str | None = None,
                 kernels: Sequence[Path] = (), languages: Sequence[str] = ()):
        unknown = [lang for lang in languages if lang not in g2p.LANGUAGES]
        if unknown:
            raise RequestError(f"unknown language {', '.join(map(repr, unknown))} in languages; "
                               f"choose from {', '.join(g2p.LANGUAGES)}")
        for lang in languages:
            check_language_installed(lang)
        self.folder = model if isinstance(model, ModelFolder) else ModelFolder(model)
        if engine is None:
            from kokoro_tvm.runtime.engine import TvmEngine

            engine = TvmEngine(self.folder, lstm=lstm, kernels=kernels)
        self.engine = engine
        for lang in languages:
            g2p.word_phonemizer(lang)  # built once per process, then cached

    @property
    def voices(self) -> list[str]:
        """The voices this model folder holds (blends of them work too: 'a:0.7,b:0.3')."""
        return self.folder.voices

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    def check_request(self, text: str, voice: str, speed: float, lang: str | None,
                      seed: int = 0) -> tuple[float, str]:
        return check_request(self.folder, text, voice, speed, lang, seed)

    def stream(self, text: str, voice: str = DEFAULT_VOICE, speed: float = 1.0,
               lang: str | None = None, *, seed: int = 0, per_sentence: bool = True,
               progress=None, sharing: EngineSharing = Alone()) -> Iterator[Chunk]:
        """Chunks as each is synthesized (one per sentence by default, the first sentence's
        first words first: speech.LEAD_FRAMES), each with its text, start time and words
        (speech.Word: text, start and end seconds) in the whole audio. ``lang`` defaults to
        the voice's language (its first letter, as in Kokoro: g2p.LANGUAGE_TABLE). A server
        whose requests take turns on the engine passes how (``sharing``: speech.EngineSharing,
        speech.Pacing)."""
        speed, lang = self.check_request(text, voice, speed, lang, seed)
        yield from speak_chunks(self.engine, text, voice, speaker=self.folder, lang=lang,
                                speed=speed, seed=seed, per_sentence=per_sentence,
                                progress=progress, sharing=sharing)

    def create(self, text: str, voice: str = DEFAULT_VOICE, speed: float = 1.0,
               lang: str | None = None, *, seed: int = 0, timestamps: bool = False
               ) -> tuple[np.ndarray, int] | tuple[np.ndarray, int, list[Word]]:
        """The whole text's audio (float32 samples) and its sample rate; with ``timestamps``,
        also its words, each with its start and end seconds (speech.Word)."""
        if timestamps and not isinstance(self.engine, TimedEngine):
            raise RequestError(f"{type(self.engine).__name__} tells no durations: timestamps "
                               "need an engine with synthesize_with_durations")
        chunks = list(self.stream(text, voice, speed, lang, seed=seed, per_sentence=False))
        samples = np.concatenate([chunk.samples for chunk in chunks])
        if timestamps:
            return samples, SAMPLE_RATE, [word for chunk in chunks for word in chunk.words]
        return samples, SAMPLE_RATE
