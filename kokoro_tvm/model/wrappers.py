"""Wrappers: the KModel modules of one component, under KModel's own attribute names (so the
parameter names are KModel's state-dict keys) and nothing else (torch.export lifts every
parameter of the wrapper, used or not). Padding never reaches a valid output: masks go into
every LSTM and every InstanceNorm (docs/fidelity.md)."""
from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from kokoro_tvm.facts import F0_PER_FRAME
from kokoro_tvm.model.masked_norm import masked_instance_norm
from kokoro_tvm.model.packed_lstm import run_lstm
from kokoro_tvm.model.resampling import nearest_up


def _holder(**modules: nn.Module) -> nn.Module:
    """An empty module holding ``modules`` as children: a partial copy of KModel's tree."""
    holder = nn.Module()
    for name, module in modules.items():
        holder.add_module(name, module)
    return holder


def _lengths(text_mask: torch.Tensor) -> torch.Tensor:
    """Token counts from Kokoro's text mask (True on padding); Kokoro's LSTM paths want them."""
    return (~text_mask).sum(dim=-1)


class BertWrapper(nn.Module):
    """bert + bert_encoder: token ids and attention mask -> d_en [1, hidden, T]."""

    def __init__(self, kmodel):
        super().__init__()
        self.bert = kmodel.bert
        self.bert_encoder = kmodel.bert_encoder

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids, attention_mask=attention_mask)
        return self.bert_encoder(hidden).transpose(-1, -2)


class DurationWrapper(nn.Module):
    """Duration encoder, LSTM and projection: d [1, T, hidden+style] and durations [1, T].

    Durations are Kokoro's sigmoid-sum before the speed division, which stays on the host. Every
    LSTM sees only the first ``lengths`` tokens (the encoder's through the ``packed_lstm`` patch,
    predictor.lstm, which KModel runs unpacked on unpadded input, through the op directly).
    """

    def __init__(self, kmodel):
        super().__init__()
        p = kmodel.predictor
        self.predictor = _holder(text_encoder=p.text_encoder, lstm=p.lstm,
                                 duration_proj=p.duration_proj)

    def forward(self, d_en, s, text_mask):
        p = self.predictor
        lengths = _lengths(text_mask)
        d = p.text_encoder(d_en, s, lengths, text_mask)
        x = run_lstm(p.lstm, d, lengths)
        durations = torch.sigmoid(p.duration_proj(x)).sum(dim=-1)
        return d, durations


class TextEncoderWrapper(nn.Module):
    """text_encoder: token ids and text mask -> t_en [1, hidden, T]."""

    def __init__(self, kmodel):
        super().__init__()
        self.text_encoder = kmodel.text_encoder

    def forward(self, input_ids, text_mask):
        return self.text_encoder(input_ids, _lengths(text_mask), text_mask)


def _masked_adain(adain, x, s, valid):
    """Kokoro's AdaIN1d with InstanceNorm statistics over the valid frames only (biased
    variance and eps as torch's instance_norm)."""
    norm = adain.norm
    y = masked_instance_norm(x, valid, norm.eps)
    if norm.affine:
        y = y * norm.weight[:, None] + norm.bias[:, None]
    gamma, beta = torch.chunk(adain.fc(s)[:, :, None], chunks=2, dim=1)
    return (1 + gamma) * y + beta


def _masked_block(block, x, s, valid):
    """AdainResBlk1d.forward on the valid frames (``valid`` [B, 1, F] float, 1 on valid ones):
    masked statistics, and padded frames zeroed before every convolution wider than one frame,
    so nothing beyond the length reaches a valid output. Returns the output and its mask
    (upsampled by 2 in upsampling blocks)."""
    r = block.actv(_masked_adain(block.norm1, x, s, valid))
    if block.upsample_type != "none":
        r = block.pool(r * valid)
        valid = block.upsample(valid)
    r = block.conv1(block.dropout(r * valid))
    r = block.actv(_masked_adain(block.norm2, r, s, valid))
    r = block.conv2(block.dropout(r * valid))
    out = (r + block._shortcut(x)) * torch.rsqrt(torch.tensor(2))
    return out, valid


class F0NWrapper(nn.Module):
    """predictor.F0Ntrain: aligned features en [1, hidden+style, F], style and frame mask (True
    on padding) -> F0, N [1, 2F].

    ProsodyPredictor.F0Ntrain on the first ``lengths`` frames: the shared LSTM through the
    packed_lstm op, and each AdainResBlk1d with masked statistics (``_masked_block``).
    """

    def __init__(self, kmodel):
        super().__init__()
        p = kmodel.predictor
        self.predictor = _holder(shared=p.shared, F0=p.F0, N=p.N, F0_proj=p.F0_proj,
                                 N_proj=p.N_proj)

    def forward(self, en, s, frame_mask):
        p = self.predictor
        valid = (~frame_mask).to(en.dtype)[:, None, :]
        x = run_lstm(p.shared, en.transpose(-1, -2), _lengths(frame_mask)).transpose(-1, -2)
        outputs = []
        for blocks, proj in ((p.F0, p.F0_proj), (p.N, p.N_proj)):
            y, mask = x, valid
            for block in blocks:
                y, mask = _masked_block(block, y, s, mask)
            outputs.append(proj(y).squeeze(1))
        return tuple(outputs)


def _masked_resblock1(block, x, s, valid):
    """AdaINResBlock1.forward (the generator's Snake resblocks) on the valid positions, by the
    same rules as ``_masked_block``: masked statistics in every AdaIN, padding zeroed before
    every convolution."""
    for c1, c2, n1, n2, a1, a2 in zip(block.convs1, block.convs2, block.adain1, block.adain2,
                                      block.alpha1, block.alpha2):
        xt = _masked_adain(n1, x, s, valid)
        xt = xt + (1 / a1) * (torch.sin(a1 * xt) ** 2)  # Snake1D
        xt = c1(xt * valid)
        xt = _masked_adain(n2, xt, s, valid)
        xt = xt + (1 / a2) * (torch.sin(a2 * xt) ** 2)
        xt = c2(xt * valid)
        x = xt + x
    return x


def harmonic_source(gen, f0, phase_noise, sine_noise, valid):
    """DecoderWrapper.source with the generator's modules it reads (``f0_upsamp``, ``m_source``,
    ``stft``) given, so that a float64 copy of them computes the same (``source_float64``)."""
    valid = nearest_up(valid, F0_PER_FRAME)  # F0 resolution
    f0 = f0 * valid[:, 0]
    per_f0 = int(gen.f0_upsamp.scale_factor)  # f0_upsamp: nearest, as nearest_up computes it
    f0_samples = nearest_up(f0[:, None], per_f0).transpose(1, 2)
    har_source, _, _ = gen.m_source(f0_samples, phase_noise, sine_noise)
    har_source = har_source.transpose(1, 2)  # [B, 1, samples]
    samples = nearest_up(valid, per_f0)
    # 1 on the last valid sample; narrowed with an explicit length, which TVM can prove equal to
    # the samples' where the length is symbolic (``[..., 1:]`` it cannot).
    last = samples - F.pad(samples, (0, 1)).narrow(2, 1, samples.shape[2])
    held = (har_source * last).sum(dim=-1, keepdim=True)
    har_source = har_source * samples + held * (1 - samples)
    har_spec, har_phase = gen.stft.transform(har_source.squeeze(1))
    return torch.cat([har_spec, har_phase], dim=1)


def source_float64(kmodel, f0, phase_noise, sine_noise, frame_mask=None) -> torch.Tensor:
    """The decoder's harmonic source in float64, on float64 copies of the modules it reads: the
    truth that float32 forms of this ill-conditioned part are measured against."""
    gen = kmodel.decoder.generator
    parts = SimpleNamespace(**{name: copy.deepcopy(getattr(gen, name)).double()
                               for name in ("f0_upsamp", "m_source", "stft")})
    return harmonic_source(parts, f0.double(), phase_noise.double(), sine_noise.double(),
                           DecoderWrapper._valid(f0.double(), frame_mask))


class DecoderWrapper(nn.Module):
    """The decoder split in two: ``source`` (F0 and noise -> harmonic source ``har``, the
    ill-conditioned part) and ``body`` (everything else); ``forward`` is both.

    Both halves follow Decoder.forward and Generator.forward line by line (the split point is
    the end of Generator.forward's ``no_grad`` block), made padding-invariant with a frame mask
    [B, F] (True on padding; None: all valid): the valid audio of an utterance of Fv frames in
    a bucket of F equals Kokoro's at exactly Fv frames. The mask follows every resolution
    change: x2 in the last decode block, x prod(upsample_rates) through ``ups``, one more
    position from ``reflection_pad``, which makes the STFT-frame resolution of ``har``
    (hop * prod(rates) * 2 * Fv + 1 valid frames, as at exact length). Every AdaIN takes its
    statistics over valid positions; padded positions are zeroed before every convolution and
    transposed convolution wider than one position, and before the iSTFT (spectrogram
    magnitude 0), so they add nothing to valid samples. In the source, padded F0 is zeroed
    (SineGen's phase stays flat there, so its linear upsampling at the end matches Kokoro's
    edge clamp) and the harmonic source beyond the last valid sample repeats that sample, as
    CustomSTFT's replicate padding does at exact length.
    """

    def __init__(self, kmodel):
        super().__init__()
        self.decoder = kmodel.decoder

    @staticmethod
    def _valid(f0, frame_mask):
        """The frame mask as [B, 1, F] float, 1 on valid frames."""
        if frame_mask is None:
            return torch.ones_like(f0[:, None, ::2])
        return (~frame_mask).to(f0.dtype)[:, None, :]

    def source(self, f0, phase_noise, sine_noise, frame_mask=None):
        return harmonic_source(self.decoder.generator, f0, phase_noise, sine_noise,
                               self._valid(f0, frame_mask))

    def body(self, asr, f0, n, s, har, frame_mask=None):
        dec = self.decoder
        valid = self._valid(f0, frame_mask)
        f0_down = dec.F0_conv(f0.unsqueeze(1))
        n_down = dec.N_conv(n.unsqueeze(1))
        x, valid_x = _masked_block(dec.encode, torch.cat([asr, f0_down, n_down], dim=1), s,
                                   valid)
        asr_res = dec.asr_res(asr)
        res = True
        for block in dec.decode:
            if res:
                x = torch.cat([x, asr_res, f0_down, n_down], dim=1)
            x, valid_x = _masked_block(block, x, s, valid_x)
            if block.upsample_type != "none":
                res = False
        return self._generator_body(x, s, har, valid_x)[:, 0, :]

    def _generator_body(self, x, s, har, valid):
        gen = self.decoder.generator
        # har's resolution: the generator's output, one more position than prod(rates) * x's.
        valid_har = gen.reflection_pad(nearest_up(valid, math.prod(u.stride[0] for u in gen.ups)))
        har = har * valid_har
        for i in range(gen.num_upsamples):
            x = F.leaky_relu(x, negative_slope=0.1)
            x = gen.ups[i](x * valid)
            valid = nearest_up(valid, gen.ups[i].stride[0])
            if i == gen.num_upsamples - 1:
                x = gen.reflection_pad(x)
                valid = gen.reflection_pad(valid)
            x_source = _masked_resblock1(gen.noise_res[i], gen.noise_convs[i](har), s, valid)
            x = x + x_source
            xs = None
            for j in range(gen.num_kernels):
                y = _masked_resblock1(gen.resblocks[i * gen.num_kernels + j], x, s, valid)
                xs = y if xs is None else xs + y
            x = xs / gen.num_kernels
        x = gen.conv_post(F.leaky_relu(x) * valid)
        spec = torch.exp(x[:, :gen.post_n_fft // 2 + 1, :]) * valid
        phase = torch.sin(x[:, gen.post_n_fft // 2 + 1:, :])
        return gen.stft.inverse(spec, phase)

    def forward(self, asr, f0, n, s, phase_noise, sine_noise, frame_mask=None):
        har = self.source(f0, phase_noise, sine_noise, frame_mask)
        return self.body(asr, f0, n, s, har, frame_mask)
