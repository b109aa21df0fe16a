"""The decoder libraries' noise generator (compile/noise.py) in numpy: what validation checks
every library's ``noise`` function against. Philox4x32-10 on uint64 arrays, Box-Muller in
float64. Needs no TVM compiler, so the GPU check validates with it on a runtime-only TVM."""
from __future__ import annotations

import numpy as np

from kokoro_tvm.abi import (
    PHASE_STREAM,
    PHILOX_KEY_STEPS,
    PHILOX_MULTIPLIERS,
    PHILOX_ROUNDS,
    PHILOX_WORDS,
    SAMPLE_STREAM,
    noise_key,
)
from kokoro_tvm.facts import HARMONICS

_MASK = np.uint64(0xFFFFFFFF)


def philox(key: np.ndarray, counters: np.ndarray, stream: int = 0) -> np.ndarray:
    """Philox4x32-10's words [len(counters), 4] for counters ``(c, stream, 0, 0)`` under
    ``key`` (two uint32)."""
    counters = np.asarray(counters, dtype=np.uint64)
    words = [counters & _MASK, np.full_like(counters, stream), np.zeros_like(counters),
             np.zeros_like(counters)]
    return _rounds(words, key)


def philox_block(key: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """Philox4x32-10 of one whole 128-bit counter (four uint32 words): its four words."""
    return _rounds([np.array([w], dtype=np.uint64) for w in counter], key)[0]


def _rounds(words: list[np.ndarray], key: np.ndarray) -> np.ndarray:
    k0, k1 = (int(k) for k in key)
    for r in range(PHILOX_ROUNDS):
        bumped0 = np.uint64((k0 + r * PHILOX_KEY_STEPS[0]) & 0xFFFFFFFF)
        bumped1 = np.uint64((k1 + r * PHILOX_KEY_STEPS[1]) & 0xFFFFFFFF)
        p0 = np.uint64(PHILOX_MULTIPLIERS[0]) * words[0]
        p1 = np.uint64(PHILOX_MULTIPLIERS[1]) * words[2]
        words = [(p1 >> np.uint64(32)) ^ words[1] ^ bumped0, p1 & _MASK,
                 (p0 >> np.uint64(32)) ^ words[3] ^ bumped1, p0 & _MASK]
    return np.stack(words, axis=-1).astype(np.uint32)


def _unit(words: np.ndarray) -> np.ndarray:
    return (words >> np.uint32(8)).astype(np.float64) * 2.0 ** -24


def device_noise(seed: int, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """What a library's ``noise`` draws for ``seed``: phases [1, HARMONICS] and noise
    [1, samples, 1] (float32, computed in float64)."""
    key = noise_key(seed)
    words = philox(key, np.arange(-(-samples // PHILOX_WORDS)), SAMPLE_STREAM)
    radius = np.sqrt(-2.0 * np.log(1.0 - _unit(words[:, 0::2])))
    angle = 2.0 * np.pi * _unit(words[:, 1::2])
    normals = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=-1)
    noise = normals.reshape(-1)[:samples].astype(np.float32)
    phase_words = philox(key, np.arange(-(-HARMONICS // PHILOX_WORDS)), PHASE_STREAM).reshape(-1)
    phases = _unit(phase_words[:HARMONICS]).astype(np.float32)
    return phases[None, :], noise[None, :, None]
