"""Seeded synthetic weights that numpy alone reproduces bit for bit on any machine.

The device checks (tools/gpu_check, the Mac check) cannot carry the weights (the real model's
are 327 MB; their bundles are at most 64 MiB), so both sides make them: per tensor, uniform
values with the mean and standard deviation of the real tensor (``weight_spec``), from a
splitmix64 counter hash of (name, index) — plain uint64 arithmetic, independent of numpy's
random streams and version. ``synthetic_kmodel`` puts them into KModel, where PyTorch is.
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


def weight_spec(params_npz) -> dict[str, dict]:
    """name -> shape, mean and std of each weight of a params file."""
    spec = {}
    with np.load(params_npz) as arrays:
        for name in arrays.files:
            data = arrays[name].astype(np.float64)
            spec[name] = {"shape": list(data.shape), "mean": float(data.mean()),
                          "std": float(data.std()) if data.size > 1 else 0.0}
    return spec


def synthetic_kmodel(config: dict, specs: dict[str, dict], seed: int, device: str = "cpu"):
    """KModel (CustomSTFT, as validation uses) of ``config`` with the synthetic weights of
    ``specs`` (component -> weight_spec), on ``device``; and the weights per component as
    name -> array."""
    import torch

    from kokoro_tvm.model.components import TORCH_COMPONENTS
    from kokoro_tvm.model.kmodel import build_kmodel

    kmodel = build_kmodel(config, None, disable_complex=True)
    made = {}
    for name, spec in specs.items():
        made[name] = weights(spec, seed)
        params = dict(TORCH_COMPONENTS[name].wrapper(kmodel).named_parameters())
        with torch.no_grad():
            for key, array in made[name].items():
                params[key].copy_(torch.from_numpy(array))
    return kmodel.to(device), made
