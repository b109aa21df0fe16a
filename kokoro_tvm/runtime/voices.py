"""Voices at synthesis time: by name, or a weighted blend such as 'af_heart:0.7,am_adam:0.3'."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kokoro_tvm.errors import UserError
from kokoro_tvm.runtime import g2p


class VoiceError(UserError):
    """A voice that is not among the built assets, or a malformed blend."""


class VoiceFolder(Protocol):
    """Where voices are: a model folder, or results/assets (runtime/model_folder.py)."""

    @property
    def voices(self) -> list[str]: ...

    def voice_file(self, name: str): ...


# Kokoro's voice names: language letter, gender letter, '_', name (af_heart, zm_yunxi).
GENDER_OF_VOICE = {"f": "female", "m": "male"}


@dataclass(frozen=True)
class VoiceInfo:
    """What a voice's name says about it. ``language`` is its g2p code, None where the name
    names no Kokoro language (a request must then give one); ``unavailable`` is why its
    language cannot be spoken here (the extra to install), None where it can."""

    name: str
    language: str | None
    language_name: str | None
    gender: str | None
    unavailable: str | None


def describe_voice(name: str) -> VoiceInfo:
    """``name``'s language, gender and whether its language's G2P is installed."""
    gender = GENDER_OF_VOICE.get(name[1:2])
    code = g2p.LANGUAGE_OF_VOICE.get(name[:1])
    if code is None:
        return VoiceInfo(name, None, None, gender, None)
    return VoiceInfo(name, code, g2p.LANGUAGE_TABLE[code].name, gender,
                     g2p.unavailable_reason(code))


def parse_blend(spec: str) -> list[tuple[str, float]]:
    """'a:0.7,b:0.3' -> [('a', 0.7), ('b', 0.3)]; a bare name has weight 1."""
    parts = []
    for item in spec.split(","):
        name, _, weight = item.strip().partition(":")
        try:
            parts.append((name.strip(), float(weight) if weight else 1.0))
        except ValueError:
            raise VoiceError(f"voice '{spec}': weight '{weight}' of {name} is not a number"
                             ) from None
    if not parts or any(not name for name, _ in parts):
        raise VoiceError(f"voice '{spec}': expected NAME or NAME:WEIGHT,NAME:WEIGHT")
    for name, weight in parts:
        if not math.isfinite(weight) or weight < 0:
            raise VoiceError(f"voice '{spec}': weight {weight} of {name} must be a finite "
                             "number of 0 or more (weights are normalised to add up to 1)")
    if sum(w for _, w in parts) <= 0:
        raise VoiceError(f"voice '{spec}': weights must add up to more than 0")
    return parts


def check_voice(spec: str, folder: VoiceFolder) -> list[tuple[str, float]]:
    """The blend ``spec`` names, each voice checked to be in ``folder``."""
    parts = parse_blend(spec)
    known = folder.voices
    for name, _ in parts:
        if name not in known:
            raise VoiceError(f"unknown voice '{name}'; voices here: {', '.join(known) or 'none'}. "
                             "Add it to voices.names in config.yaml and run snakemake")
    return parts


def load_voice(spec: str, folder: VoiceFolder) -> np.ndarray:
    """The [510, 1, 256] style table for a voice name or blend; blend weights are normalised."""
    parts = check_voice(spec, folder)
    total = sum(w for _, w in parts)
    return sum(w / total * np.load(folder.voice_file(name))
               for name, w in parts).astype(np.float32)


def style_for(table: np.ndarray, n_phonemes: int) -> np.ndarray:
    """Kokoro's ref_s for an utterance of ``n_phonemes`` tokens (pads excluded): one table row."""
    return table[min(max(n_phonemes, 1), len(table)) - 1]
