"""Offline speech recognition (pocketsphinx's bundled English model) and word error rate.

Used to check that synthesized audio says the words it should: the listening test, automated.
"""
from __future__ import annotations

import re

import numpy as np

from kokoro_tvm.facts import SAMPLE_RATE

ASR_RATE = 16_000  # pocketsphinx's English model


def resample_24k_to_16k(audio: np.ndarray) -> np.ndarray:
    """24 kHz -> 16 kHz: upsample by 2, low-pass below 8 kHz (windowed sinc), keep every 3rd."""
    up = np.zeros(2 * len(audio), dtype=np.float64)
    up[::2] = audio
    taps = np.arange(-64, 65)
    cutoff = 1 / 6  # 8 kHz of the 48 kHz intermediate rate, as a fraction of it
    fir = np.sinc(2 * cutoff * taps) * np.hamming(len(taps))
    fir *= 2 / fir.sum()  # gain 2 makes up for the inserted zeros
    filtered = np.convolve(up, fir, mode="same")
    return filtered[::3].astype(np.float32)


def transcribe(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> str:
    """Lower-case words pocketsphinx hears in float audio."""
    from pocketsphinx import Decoder

    if sample_rate != SAMPLE_RATE:
        raise ValueError("transcribe expects Kokoro's 24 kHz audio")
    pcm = np.clip(resample_24k_to_16k(audio) * 32767, -32768, 32767).astype(np.int16)
    decoder = Decoder(samprate=ASR_RATE, loglevel="FATAL")
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), full_utt=True)
    decoder.end_utt()
    return decoder.hyp().hypstr if decoder.hyp() else ""


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level Levenshtein distance over the reference's word count."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1] / max(len(ref), 1)
