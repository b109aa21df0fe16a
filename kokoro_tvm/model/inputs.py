"""Realistic example inputs. Everything is drawn from one seeded generator, so a (model,
bucket, seed) triple names one input set; export, validation and tests share it."""
from __future__ import annotations

from typing import Any

import torch

from kokoro_tvm.assets.model_config import frame_size_error
from kokoro_tvm.facts import F0_PER_FRAME, HARMONICS, SAMPLES_PER_FRAME
from kokoro_tvm.model.kmodel import model_device
from kokoro_tvm.model.patches import merged_noise, noise_weight

# Std of ref_s entries: kokoro-js@1.2.1's voice packs measure 0.16-0.23 (both halves).
STYLE_STD = 0.2


def model_dims(config: dict[str, Any]) -> dict[str, Any]:
    """The sizes the inputs depend on, from a Kokoro config."""
    error = frame_size_error(config)
    if error is not None:
        raise ValueError(f"this model cannot be compiled: {error}")
    return {
        "token_ids": sorted({int(i) for i in config["vocab"].values() if int(i) > 0}),
        "hidden": config["hidden_dim"],
        "style": config["style_dim"],
        "harmonics": HARMONICS,
    }


def config_of(kmodel) -> dict[str, Any]:
    """The part of a Kokoro config that ``model_dims`` reads, recovered from a KModel.

    Export and validation get only the model; the sizes follow from its modules.
    """
    gen = kmodel.decoder.generator
    return {
        "vocab": kmodel.vocab,
        "hidden_dim": kmodel.bert_encoder.out_features,
        "style_dim": kmodel.predictor.text_encoder.sty_dim,
        "istftnet": {"upsample_rates": [up.stride[0] for up in gen.ups],
                     "gen_istft_hop_size": gen.stft.hop_length},
    }


def _tokens(dims, T, g) -> dict[str, torch.Tensor]:
    """A padded utterance: 0, phoneme ids, 0, then 0 padding up to the bucket (one position at
    least, so that length-exact fidelity always sees padding); Kokoro's masks."""
    n = int(torch.randint(max(3, T // 2), T, (1,), generator=g))
    vocab = torch.tensor(dims["token_ids"])
    ids = torch.zeros(1, T, dtype=torch.int64)
    ids[0, 1:n - 1] = vocab[torch.randint(len(vocab), (n - 2,), generator=g)]
    text_mask = torch.arange(T)[None, :] >= n  # True on padding, as in KModel
    return {"input_ids": ids, "text_mask": text_mask,
            "attention_mask": (~text_mask).to(torch.int64)}


def _aligned(values: torch.Tensor, frames: int, g) -> torch.Tensor:
    """Token-level features [1, C, tokens] repeated by random durations to [1, C, frames]."""
    durations = torch.randint(1, 7, (values.shape[-1],), generator=g)
    index = torch.repeat_interleave(torch.arange(values.shape[-1]), durations)
    index = index.repeat(frames // len(index) + 1)[:frames]
    return values[:, :, index]


def _style(dims, g) -> torch.Tensor:
    return STYLE_STD * torch.randn(1, dims["style"], generator=g)


def bert_inputs(kmodel, T, seed) -> dict[str, torch.Tensor]:
    tokens = _tokens(model_dims(config_of(kmodel)), T, torch.Generator().manual_seed(seed))
    return {k: tokens[k] for k in ("input_ids", "attention_mask")}


def duration_inputs(kmodel, T, seed) -> dict[str, torch.Tensor]:
    dims, g = model_dims(config_of(kmodel)), torch.Generator().manual_seed(seed)
    tokens = _tokens(dims, T, g)
    return {"d_en": torch.randn(1, dims["hidden"], T, generator=g), "s": _style(dims, g),
            "text_mask": tokens["text_mask"]}


def text_encoder_inputs(kmodel, T, seed) -> dict[str, torch.Tensor]:
    tokens = _tokens(model_dims(config_of(kmodel)), T, torch.Generator().manual_seed(seed))
    return {k: tokens[k] for k in ("input_ids", "text_mask")}


def _frame_mask(F: int, g) -> torch.Tensor:
    """[1, F], True on padding: a random number of valid frames in [F/2, F]."""
    n = int(torch.randint(max(1, F // 2), F + 1, (1,), generator=g))
    return torch.arange(F)[None, :] >= n


def f0n_inputs(kmodel, F, seed) -> dict[str, torch.Tensor]:
    """en = [duration features; style] aligned to frames, as KModel builds it, then padded to
    the bucket (the padded frames hold more aligned features: they must not matter)."""
    dims, g = model_dims(config_of(kmodel)), torch.Generator().manual_seed(seed)
    s = _style(dims, g)
    tokens = max(1, F // 3)
    d = torch.cat([torch.randn(1, dims["hidden"], tokens, generator=g),
                   s[:, :, None].expand(1, dims["style"], tokens)], dim=1)
    return {"en": _aligned(d, F, g), "s": s, "frame_mask": _frame_mask(F, g)}


class _DecoderCalled(Exception):
    """Raised by a pre-hook to stop KModel at its decoder call, carrying the call's arguments."""

    def __init__(self, args):
        super().__init__("decoder called")
        self.args = args


def _kokoro_decoder_features(kmodel, tokens: int, ref_s: torch.Tensor, g
                             ) -> tuple[torch.Tensor, ...]:
    """(asr, F0, N) as KModel computes them for ``tokens`` random phonemes and style ``ref_s``,
    stopped before the decoder runs."""
    ids = torch.tensor(model_dims(config_of(kmodel))["token_ids"])
    input_ids = torch.cat([torch.zeros(1, 1, dtype=torch.int64),
                           ids[torch.randint(len(ids), (1, tokens), generator=g)],
                           torch.zeros(1, 1, dtype=torch.int64)], dim=1)
    device = model_device(kmodel)

    def stop(_module, args):
        raise _DecoderCalled(args)

    handle = kmodel.decoder.register_forward_pre_hook(stop)
    try:
        with torch.no_grad():
            kmodel.forward_with_tokens(input_ids.to(device), ref_s.to(device), 1.0)
    except _DecoderCalled as called:
        return tuple(a.detach().cpu() for a in called.args[:3])
    finally:
        handle.remove()
    raise RuntimeError("KModel.forward_with_tokens finished without calling its decoder")


def decoder_inputs(kmodel, F, seed) -> dict[str, torch.Tensor]:
    """The decoder's inputs as Kokoro computes them (bert, duration, alignment, F0/N
    predictor, text encoder) for an utterance of random phonemes and a random style, repeated
    to fill the bucket: the valid frames (a random number in [F/2, F]) and the padding after
    them hold the same kind of features, so padding must not matter. Independent random
    features are far outside what the decoder sees (real weights turned them into audio peaks
    of 1e3-1e9 instead of under 1), and the tight check is relative to that peak."""
    dims, g = model_dims(config_of(kmodel)), torch.Generator().manual_seed(seed)
    ref_s = STYLE_STD * torch.randn(1, 2 * dims["style"], generator=g)
    longest = kmodel.bert.config.max_position_embeddings - 2  # the two boundary pads
    asr, f0, n = _kokoro_decoder_features(kmodel, min(longest, max(1, F // 3)), ref_s, g)
    frames = torch.arange(F) % asr.shape[-1]
    steps = torch.arange(F0_PER_FRAME * F) % f0.shape[-1]
    samples = SAMPLES_PER_FRAME * F
    return {
        "asr": asr[:, :, frames],
        "f0": f0[:, steps],
        "n": n[:, steps],
        "s": ref_s[:, :dims["style"]],
        "phase_noise": torch.rand(1, dims["harmonics"], generator=g),
        # Kokoro's draws, one per harmonic, merged into the libraries' one channel (patches.py)
        "sine_noise": merged_noise(torch.randn(1, samples, dims["harmonics"], generator=g),
                                   noise_weight(kmodel).cpu()),
        "frame_mask": _frame_mask(F, g),
    }
