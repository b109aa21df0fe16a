"""Seeded synthetic weights that numpy alone reproduces bit for bit on any machine.

The GPU check cannot carry the weights (the real model's are 327 MB; the device machine takes
64 MiB), so both sides make them: per tensor, uniform values with the mean and
standard deviation of the real tensor, from a splitmix64 counter hash of (name, index) — plain
uint64 arithmetic, independent of numpy's random streams and version.
"""
from __future__ import annotations

import zlib

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def synthetic(name: str, shape, mean: float, std: float, seed: int = 0) -> np.ndarray:
    """float32 array of ``shape``: uniform with the given mean and std, keyed by ``name``."""
    count = int(np.prod(shape, dtype=np.int64))
    key = np.uint64(zlib.crc32(name.encode()) ^ (seed << 32))
    with np.errstate(over="ignore"):
        bits = _splitmix64(np.arange(count, dtype=np.uint64) + key * _GOLDEN)
    unit = (bits >> np.uint64(40)).astype(np.float64) / float(1 << 24)  # [0, 1), 24 bits
    values = mean + std * np.sqrt(3.0) * (2.0 * unit - 1.0)
    return values.astype(np.float32).reshape(shape)


def weights(spec: dict[str, dict], seed: int = 0) -> dict[str, np.ndarray]:
    """name -> array for a component's spec {name: {shape, mean, std}}."""
    return {name: synthetic(name, s["shape"], s["mean"], s["std"], seed)
            for name, s in spec.items()}
