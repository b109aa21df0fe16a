"""Patches of Kokoro for export and import. Each patch is a function returning the (owner,
attribute, new value) replacements it makes; ``patched`` applies a list of them by name and
restores the originals."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from kokoro_tvm.model.packed_lstm import run_lstm
from kokoro_tvm.model.resampling import linear_down, linear_up, nearest_up

Replacement = tuple[Any, str, Any]
_MISSING = object()


class _Padded(NamedTuple):
    """What the ``packed_lstm`` patch's pack_padded_sequence returns: the padded batch and its
    lengths, for the patched nn.LSTM.forward to hand to the packed_lstm op."""

    data: torch.Tensor
    lengths: torch.Tensor


def _packed_lstm() -> list[Replacement]:
    """pack_padded_sequence -> LSTM -> pad_packed_sequence through the ``packed_lstm`` op.

    torch.export fails inside torch's packing (``zeros(): ... got FakeTensor``). With this patch
    packing only pairs the padded batch with its lengths, nn.LSTM.forward on such a pair calls
    ``kokoro_tvm::packed_lstm`` (one node in the exported graph, nn.LSTM's packed semantics), and
    unpacking returns the [B, T, 2H] result, zero beyond each length, as
    ``pad_packed_sequence(..., total_length=T)`` would. nn.LSTM called on a plain tensor is
    unchanged.
    """
    original_forward = nn.LSTM.forward

    def pack(x, lengths, batch_first=False, enforce_sorted=True):
        if not batch_first:
            raise NotImplementedError("packed_lstm patch: Kokoro packs batch-first sequences")
        return _Padded(x, torch.as_tensor(lengths))

    def lstm_forward(self, input, hx=None):
        if not isinstance(input, _Padded):
            return original_forward(self, input, hx)
        if hx is not None:
            raise NotImplementedError("packed_lstm patch: Kokoro's LSTMs start from zero state")
        return _Padded(run_lstm(self, input.data, input.lengths), input.lengths), None

    def unpack(sequence, batch_first=False, padding_value=0.0, total_length=None):
        if not (isinstance(sequence, _Padded) and batch_first and padding_value == 0.0):
            raise NotImplementedError("packed_lstm patch: unpacks its own batch-first output")
        return sequence.data, sequence.lengths

    rnn = torch.nn.utils.rnn
    return [(rnn, "pack_padded_sequence", pack), (rnn, "pad_packed_sequence", unpack),
            (nn.LSTM, "forward", lstm_forward)]


def noise_weight(kmodel) -> torch.Tensor:
    """SourceModuleHnNSF's linear weight [1, harmonics], which merges the harmonics' noise."""
    return kmodel.decoder.generator.m_source.l_linear.weight.detach()


def merged_noise(draws: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Kokoro's Gaussian draws [B, samples, harmonics] as the one channel the libraries take
    ([B, samples, 1], still N(0, 1)): their sum weighted by SourceModuleHnNSF's linear layer
    (``weight`` [1, harmonics]), over that weight's norm."""
    return draws @ weight.T / weight.norm()


def spread_noise(noise: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Draws over the harmonics [B, samples, harmonics] that Kokoro's linear layer merges into
    ``noise`` [B, samples, 1] times the weight's norm, as the patched SineGen does with it:
    unpatched Kokoro run on these computes what the patched one computes on ``noise``."""
    return noise * (weight / weight.norm())


def _sinegen_noise_inputs() -> list[Replacement]:
    """SineGen's random draws become arguments, so the runtime passes them as graph inputs.

    TVM has no converter for ``torch.rand``/``randn_like``. The replacements take
    ``phase_noise`` ~ U[0,1) [B, harmonics] (the random initial phase, which Kokoro's
    downsampling never reads: it changes nothing, and stays an input only as Kokoro's) and
    ``sine_noise`` ~ N(0,1) [B, samples, 1]. Its resampling is model/resampling.py's, which
    traces with a symbolic length. Kokoro draws a Gaussian per harmonic
    and sample, scales all of a sample's by one amplitude and merges the harmonics with a
    linear layer (weights w): the merged noise is that amplitude times |w| times one N(0, 1)
    draw per sample, so the runtime draws a ninth of the values (``merged_noise`` turns
    Kokoro's draws into this one, ``spread_noise`` back). Seeding torch and drawing
    ``torch.rand(B, harmonics)`` then ``torch.empty(B, harmonics, samples).transpose(1, 2)
    .normal_()`` reproduces Kokoro's draws exactly (its ``randn_like`` fills a transposed view,
    and torch draws different values into strided memory). The noise branch of
    SourceModuleHnNSF, which the generator never uses, is dropped.
    """
    from kokoro.istftnet import SineGen, SourceModuleHnNSF

    def f02sine(self, f0_values, phase_noise):
        assert not self.flag_for_pulse, "Kokoro's SineGen runs without flag_for_pulse"
        # Kokoro computes the phase increment at every sample, adds the random initial phase
        # at sample 0 and downsamples (linear_down), which reads only each group's two middle
        # samples: computed there alone, the same values without two full-rate buffers. For
        # a factor over 2, sample 0 is never read and the initial phase has no effect.
        if self.upsample_scale <= 2:
            raise ValueError(f"SineGen: upsample_scale {self.upsample_scale}; Kokoro's is 300")
        rad = linear_down(f0_values, self.upsample_scale, dim=1,
                          of=lambda f0: (f0 / self.sampling_rate) % 1)
        # Summed in float64, as PyTorch's CPU cumsum does inside: TVM sums in the tensor's
        # dtype, and float32 sums put 10x PyTorch's phase error into the source at 768 frames.
        phase = torch.cumsum(rad.to(torch.float64), dim=1).to(rad.dtype) * 2 * torch.pi
        phase = linear_up(phase.transpose(1, 2) * self.upsample_scale,
                          self.upsample_scale).transpose(1, 2)
        return torch.sin(phase)

    def sinegen_forward(self, f0, phase_noise):
        """The voiced sines [B, samples, harmonics], the voicing and the noise's amplitude."""
        harmonics = torch.arange(1, self.harmonic_num + 2, dtype=f0.dtype, device=f0.device)
        sine_waves = self._f02sine(f0 * harmonics, phase_noise) * self.sine_amp
        uv = self._f02uv(f0)
        return sine_waves * uv, uv, uv * self.noise_std + (1 - uv) * self.sine_amp / 3

    def source_forward(self, x, phase_noise, sine_noise):
        sines, uv, amplitude = self.l_sin_gen(x, phase_noise)
        weight = self.l_linear.weight  # [1, harmonics]
        merged = self.l_linear(sines) + amplitude * weight.square().sum().sqrt() * sine_noise
        return self.l_tanh(merged), None, uv

    return [(SineGen, "_f02sine", f02sine), (SineGen, "forward", sinegen_forward),
            (SourceModuleHnNSF, "forward", source_forward)]


def _stft_phase_where() -> list[Replacement]:
    """CustomSTFT.transform with its boolean-mask assignment written as ``torch.where``.

    TVM's importer rejects the boolean index_put (``IndexPut requires ... integer dtype``).
    """
    from kokoro.custom_stft import CustomSTFT

    def transform(self, waveform):
        if self.center:
            pad = self.n_fft // 2
            waveform = F.pad(waveform, (pad, pad), mode=self.pad_mode)
        x = waveform.unsqueeze(1)
        real = F.conv1d(x, self.weight_forward_real, bias=None, stride=self.hop_length, padding=0)
        imag = F.conv1d(x, self.weight_forward_imag, bias=None, stride=self.hop_length, padding=0)
        magnitude = torch.sqrt(real ** 2 + imag ** 2 + 1e-14)
        phase = torch.atan2(imag, real)
        phase = torch.where((imag == 0) & (real < 0), torch.full_like(phase, torch.pi), phase)
        return magnitude, phase

    return [(CustomSTFT, "transform", transform)]


def _nearest_upsample() -> list[Replacement]:
    """Kokoro's UpSample1d (nearest, by 2) as ``resampling.nearest_up``: the same values, and
    torch.export traces it with a symbolic length."""
    from kokoro.istftnet import UpSample1d

    def forward(self, x):
        return x if self.layer_type == "none" else nearest_up(x, 2)

    return [(UpSample1d, "forward", forward)]


PATCHES: dict[str, Callable[[], list[Replacement]]] = {
    "nearest_upsample": _nearest_upsample,
    "packed_lstm": _packed_lstm,
    "sinegen_noise_inputs": _sinegen_noise_inputs,
    "stft_phase_where": _stft_phase_where,
}


@contextlib.contextmanager
def patched(names: tuple[str, ...] | list[str]) -> Iterator[None]:
    """Applies the named patches for the duration of the block, then restores the originals."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        for name in names:
            for owner, attr, value in PATCHES[name]():
                saved.append((owner, attr, vars(owner).get(attr, _MISSING)))
                setattr(owner, attr, value)
        yield
    finally:
        for owner, attr, old in reversed(saved):
            if old is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, old)
