"""Kokoro's own code per component, as KModel.forward_with_tokens runs it on one unpadded
utterance (the mask all False): the reference of length-exact fidelity."""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from kokoro_tvm.model.patches import noise_weight, spread_noise


def _lengths_of(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor([x.shape[-1]])


def kokoro_bert(kmodel, input_ids, attention_mask):
    hidden = kmodel.bert(input_ids, attention_mask=attention_mask)
    return (kmodel.bert_encoder(hidden).transpose(-1, -2),)


def kokoro_duration(kmodel, d_en, s, text_mask):
    p = kmodel.predictor
    d = p.text_encoder(d_en, s, _lengths_of(d_en), text_mask)
    x, _ = p.lstm(d)
    return d, torch.sigmoid(p.duration_proj(x)).sum(dim=-1)


def kokoro_text_encoder(kmodel, input_ids, text_mask):
    return (kmodel.text_encoder(input_ids, _lengths_of(input_ids), text_mask),)


def kokoro_f0n(kmodel, en, s, frame_mask):
    return kmodel.predictor.F0Ntrain(en, s)


@contextlib.contextmanager
def _given_draws(phase_noise: torch.Tensor, sine_noise: torch.Tensor) -> Iterator[None]:
    """torch.rand returns ``phase_noise`` and torch.randn_like of ``sine_noise``'s shape returns
    ``sine_noise``: SineGen's two random draws (other draws, like the unused noise branch's,
    are unchanged), so unpatched Kokoro runs on given noise."""
    rand, randn_like = torch.rand, torch.randn_like

    def given_rand(*args, **kwargs):
        return phase_noise.clone()  # SineGen zeroes its first column in place

    def given_randn_like(x, *args, **kwargs):
        if x.shape == sine_noise.shape:
            return sine_noise.clone()
        return randn_like(x, *args, **kwargs)

    torch.rand, torch.randn_like = given_rand, given_randn_like
    try:
        yield
    finally:
        torch.rand, torch.randn_like = rand, randn_like


def kokoro_decoder(kmodel, asr, f0, n, s, phase_noise, sine_noise, frame_mask):
    """``sine_noise`` is the libraries' one channel, spread over the harmonics for Kokoro."""
    with _given_draws(phase_noise, spread_noise(sine_noise, noise_weight(kmodel))):
        return kmodel.decoder(asr, f0, n, s)[:, 0]
