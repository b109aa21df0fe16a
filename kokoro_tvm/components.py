"""Kokoro split into the five compiled components (docs/architecture.md, Components), and their export.

Each component is data: which KModel modules it runs (a wrapper nn.Module), which patches of
Kokoro it needs to export and import, how to make realistic inputs at a bucket, and the names of
its outputs. One mechanism (``export_component``) exports all of them; the validation stage runs
the same wrappers as the PyTorch reference.

A component has one or more functions, run in order: each function's inputs come from the
component's example inputs or from outputs of earlier functions. All components have one
function ``main`` except the decoder, whose ill-conditioned harmonic source (``source``) is
split from the rest (``body``) so that each can be validated on its own terms.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from kokoro_tvm.masked_norm import masked_instance_norm
from kokoro_tvm.packed_lstm import run_lstm

# --------------------------------------------------------------------------------------------
# Patches of Kokoro. Each patch is a function returning the (owner, attribute, new value)
# replacements it makes; ``patched`` applies a list of them and restores the originals.
# --------------------------------------------------------------------------------------------

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


def _sinegen_noise_inputs() -> list[Replacement]:
    """SineGen's random draws become arguments, so the runtime passes them as graph inputs.

    TVM has no converter for ``torch.rand``/``randn_like``. The replacements take
    ``phase_noise`` ~ U[0,1) [B, harmonics] (the random initial phase; harmonic 0 is zeroed as in
    Kokoro) and ``sine_noise`` ~ N(0,1) [B, samples, harmonics]. Seeding torch and drawing
    ``torch.rand(B, harmonics)`` then ``torch.empty(B, harmonics, samples).transpose(1, 2)
    .normal_()`` reproduces Kokoro's draws exactly (its ``randn_like`` fills a transposed view,
    and torch draws different values into strided memory). The noise branch of
    SourceModuleHnNSF, which the generator never uses, is dropped.
    """
    from kokoro.istftnet import SineGen, SourceModuleHnNSF

    def f02sine(self, f0_values, phase_noise):
        assert not self.flag_for_pulse, "Kokoro's SineGen runs without flag_for_pulse"
        rad = (f0_values / self.sampling_rate) % 1
        initial = torch.cat([torch.zeros_like(phase_noise[:, :1]), phase_noise[:, 1:]], dim=1)
        rad = torch.cat([rad[:, :1, :] + initial[:, None, :], rad[:, 1:, :]], dim=1)
        rad = F.interpolate(rad.transpose(1, 2), scale_factor=1 / self.upsample_scale,
                            mode="linear").transpose(1, 2)
        phase = torch.cumsum(rad, dim=1) * 2 * torch.pi
        phase = F.interpolate(phase.transpose(1, 2) * self.upsample_scale,
                              scale_factor=self.upsample_scale, mode="linear").transpose(1, 2)
        return torch.sin(phase)

    def sinegen_forward(self, f0, phase_noise, sine_noise):
        harmonics = torch.arange(1, self.harmonic_num + 2, dtype=f0.dtype, device=f0.device)
        sine_waves = self._f02sine(f0 * harmonics, phase_noise) * self.sine_amp
        uv = self._f02uv(f0)
        noise = (uv * self.noise_std + (1 - uv) * self.sine_amp / 3) * sine_noise
        return sine_waves * uv + noise, uv, noise

    def source_forward(self, x, phase_noise, sine_noise):
        sine_wavs, uv, _ = self.l_sin_gen(x, phase_noise, sine_noise)
        return self.l_tanh(self.l_linear(sine_wavs)), None, uv

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


PATCHES: dict[str, Callable[[], list[Replacement]]] = {
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


# --------------------------------------------------------------------------------------------
# Wrappers: the KModel modules of one component, under KModel's own attribute names (so the
# parameter names are KModel's state-dict keys) and nothing else (torch.export lifts every
# parameter of the wrapper, used or not).
# --------------------------------------------------------------------------------------------

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


def _upsampled(valid: torch.Tensor, factor: int) -> torch.Tensor:
    """A [B, 1, L] mask at ``factor`` times the resolution (nearest: L * factor positions)."""
    return F.interpolate(valid, scale_factor=factor, mode="nearest")


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
        gen = self.decoder.generator
        valid = _upsampled(self._valid(f0, frame_mask), 2)  # F0 resolution
        f0 = f0 * valid[:, 0]
        f0_samples = gen.f0_upsamp(f0[:, None]).transpose(1, 2)
        har_source, _, _ = gen.m_source(f0_samples, phase_noise, sine_noise)
        har_source = har_source.transpose(1, 2)  # [B, 1, samples]
        samples = gen.f0_upsamp(valid)
        last = samples - F.pad(samples[..., 1:], (0, 1))  # 1 on the last valid sample
        held = (har_source * last).sum(dim=-1, keepdim=True)
        har_source = har_source * samples + held * (1 - samples)
        har_spec, har_phase = gen.stft.transform(har_source.squeeze(1))
        return torch.cat([har_spec, har_phase], dim=1)

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
        valid_har = gen.reflection_pad(_upsampled(valid, math.prod(u.stride[0] for u in gen.ups)))
        har = har * valid_har
        for i in range(gen.num_upsamples):
            x = F.leaky_relu(x, negative_slope=0.1)
            x = gen.ups[i](x * valid)
            valid = _upsampled(valid, gen.ups[i].stride[0])
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


# --------------------------------------------------------------------------------------------
# Realistic example inputs. Everything is drawn from one seeded generator, so a (model,
# bucket, seed) triple names one input set; export, validation and tests share it.
# --------------------------------------------------------------------------------------------

# Std of ref_s entries: kokoro-js@1.2.1's voice packs measure 0.16-0.23 (both halves).
STYLE_STD = 0.2


def model_dims(config: dict[str, Any]) -> dict[str, Any]:
    """The sizes the inputs depend on, from a Kokoro config."""
    ist = config["istftnet"]
    return {
        "token_ids": sorted({int(i) for i in config["vocab"].values() if int(i) > 0}),
        "hidden": config["hidden_dim"],
        "style": config["style_dim"],
        # F0 runs at 2 per asr frame; the generator upsamples it by prod(rates) * hop.
        "samples_per_frame": 2 * math.prod(ist["upsample_rates"]) * ist["gen_istft_hop_size"],
        "harmonics": 9,  # Generator hard-codes harmonic_num=8
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
    """A padded utterance: 0, phoneme ids, 0, then 0 padding up to the bucket; Kokoro's masks."""
    n = int(torch.randint(max(3, T // 2), T + 1, (1,), generator=g))
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


def _f0_contour(n: int, g) -> torch.Tensor:
    """A pitch contour in Hz [1, n]: voiced stretches between 80 and 300 Hz, unvoiced zeros."""
    t = torch.arange(n, dtype=torch.float32)
    base = 100 + 120 * torch.rand(1, generator=g)
    period = 20 + 40 * torch.rand(1, generator=g)
    f0 = base * (1 + 0.25 * torch.sin(2 * torch.pi * t / period)) + 5 * torch.randn(n, generator=g)
    f0 = f0.clamp(80, 300)
    for _ in range(max(1, n // 24)):  # unvoiced gaps
        start = int(torch.randint(n, (1,), generator=g))
        f0[start:start + int(torch.randint(2, 8, (1,), generator=g))] = 0
    return f0[None, :]


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
    steps = torch.arange(2 * F) % f0.shape[-1]
    samples = dims["samples_per_frame"] * F
    return {
        "asr": asr[:, :, frames],
        "f0": f0[:, steps],
        "n": n[:, steps],
        "s": ref_s[:, :dims["style"]],
        "phase_noise": torch.rand(1, dims["harmonics"], generator=g),
        "sine_noise": torch.randn(1, samples, dims["harmonics"], generator=g),
        "frame_mask": _frame_mask(F, g),
    }


# --------------------------------------------------------------------------------------------
# Kokoro's own code per component, as KModel.forward_with_tokens runs it on one unpadded
# utterance (the mask all False): the reference of length-exact fidelity.
# --------------------------------------------------------------------------------------------

def _lengths_of(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor([x.shape[-1]])


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
    with _given_draws(phase_noise, sine_noise):
        return kmodel.decoder(asr, f0, n, s)[:, 0]


# --------------------------------------------------------------------------------------------
# The registry.
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Function:
    """One exported function: a wrapper method, its argument names and its output names.

    Names are lower case because torch.export lower-cases placeholder names, and the library's
    parameters keep them: the runtime passes inputs by these names.
    """

    name: str
    method: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # False where the outputs are ill-conditioned in float32 (the decoder's harmonic source):
    # validation reports their error and judges them through the chained component instead.
    tight: bool = True


@dataclass(frozen=True)
class Component:
    """A compiled unit of Kokoro: what to export, how to patch it, how to feed it."""

    name: str
    axis: str  # "tokens" or "frames": what the bucket counts
    has_lstm: bool
    patches: tuple[str, ...]
    wrapper: Callable[[Any], nn.Module]
    example_inputs: Callable[[Any, int, int], dict[str, torch.Tensor]]  # (kmodel, bucket, seed)
    functions: tuple[Function, ...]
    # Outputs of the chained functions judged by spectral metrics (ill-conditioned end to end),
    # and the input and relative change whose effect on PyTorch shows rounding's share.
    spectral_outputs: tuple[str, ...] = ()
    spectral_probe: tuple[str, float] = ("", 0.0)
    # Length-exact fidelity (docs/decisions.md, Fidelity), for components whose inputs carry a mask
    # (True on padding): input or output name -> (its length axis, positions per valid one).
    length_axes: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Kokoro's own code for the component, unpatched, run on unpadded inputs (the reference):
    # takes the component's ``inputs`` by name, returns the last function's outputs.
    kokoro: Callable[..., tuple[torch.Tensor, ...]] | None = None

    @property
    def mask_input(self) -> str:
        """The input that is True on padding (text_mask or frame_mask)."""
        return next(name for name in self.length_axes if name.endswith("_mask"))

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(o for f in self.functions for o in f.outputs)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The inputs of all functions that no earlier function produces, in order."""
        names: list[str] = []
        for fn in self.functions:
            names += [i for i in fn.inputs if i not in names and i not in self.outputs]
        return tuple(names)


COMPONENTS: dict[str, Component] = {c.name: c for c in (
    Component("bert", "tokens", False, (), BertWrapper, bert_inputs,
              (Function("main", "forward", ("input_ids", "attention_mask"), ("d_en",)),)),
    Component("duration", "tokens", True, ("packed_lstm",), DurationWrapper, duration_inputs,
              (Function("main", "forward", ("d_en", "s", "text_mask"), ("d", "durations")),),
              length_axes={"d_en": (2, 1), "text_mask": (1, 1), "d": (1, 1),
                           "durations": (1, 1)}, kokoro=kokoro_duration),
    Component("text_encoder", "tokens", True, ("packed_lstm",), TextEncoderWrapper,
              text_encoder_inputs,
              (Function("main", "forward", ("input_ids", "text_mask"), ("t_en",)),),
              length_axes={"input_ids": (1, 1), "text_mask": (1, 1), "t_en": (2, 1)},
              kokoro=kokoro_text_encoder),
    Component("f0n", "frames", True, (), F0NWrapper, f0n_inputs,
              (Function("main", "forward", ("en", "s", "frame_mask"), ("f0", "n")),),
              length_axes={"en": (2, 1), "frame_mask": (1, 1), "f0": (1, 2), "n": (1, 2)},
              kokoro=kokoro_f0n),
    Component("decoder", "frames", False, ("sinegen_noise_inputs", "stft_phase_where"),
              DecoderWrapper, decoder_inputs,
              (Function("source", "source", ("f0", "phase_noise", "sine_noise", "frame_mask"),
                        ("har",), tight=False),
               Function("body", "body", ("asr", "f0", "n", "s", "har", "frame_mask"),
                        ("audio",))),
              spectral_outputs=("audio",), spectral_probe=("f0", 1e-6),
              # 600 samples per frame: 2 F0 values per frame, x prod(upsample_rates) * hop.
              length_axes={"asr": (2, 1), "f0": (1, 2), "n": (1, 2), "frame_mask": (1, 1),
                           "sine_noise": (1, 600), "audio": (1, 600)},
              kokoro=kokoro_decoder),
)}


# --------------------------------------------------------------------------------------------
# Running and exporting.
# --------------------------------------------------------------------------------------------

class _Bound(nn.Module):
    """A wrapper's method as a module's forward, which is what torch.export exports."""

    def __init__(self, wrapper: nn.Module, method: str):
        super().__init__()
        for child_name, child in wrapper.named_children():  # parameter names stay KModel's
            self.add_module(child_name, child)
        # The wrapper's bound method, so torch.export names the inputs after its arguments.
        self.forward = getattr(wrapper, method)


def _as_tuple(out) -> tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def model_device(kmodel) -> torch.device:
    """Where a KModel's weights are (the reference runs there: the CPU, or a GPU)."""
    return next(kmodel.parameters()).device


def on_device(values: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {name: value.to(device) for name, value in values.items()}


def run_reference(kmodel, name: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """All functions of a component in PyTorch, chained, on the model's device: example inputs
    plus every output."""
    component = COMPONENTS[name]
    wrapper = component.wrapper(kmodel).eval()
    env = on_device(inputs, model_device(kmodel))
    with patched(component.patches), torch.no_grad():
        for fn in component.functions:
            outs = _as_tuple(getattr(wrapper, fn.method)(*(env[i] for i in fn.inputs)))
            env.update(zip(fn.outputs, outs))
    return env


def valid_length(name: str, inputs: dict[str, torch.Tensor]) -> int:
    """The utterance's length in the bucket's units (tokens or frames), from its mask."""
    return int((~inputs[COMPONENTS[name].mask_input]).sum())


def crop(name: str, values: dict[str, Any], length: int) -> dict[str, Any]:
    """Inputs or outputs of a component cut to ``length`` valid positions along their length
    axes; values without a length axis are kept."""
    axes = COMPONENTS[name].length_axes
    return {key: value[(slice(None),) * axes[key][0] + (slice(0, length * axes[key][1]),)]
            if key in axes else value for key, value in values.items()}


def run_exact_length(kmodel, name: str, inputs: dict[str, torch.Tensor]
                     ) -> dict[str, torch.Tensor]:
    """Unpatched Kokoro on the utterance without its padding: the outputs at exactly its length,
    which the valid part of a bucketed run must equal."""
    component = COMPONENTS[name]
    cropped = crop(name, inputs, valid_length(name, inputs))
    cropped[component.mask_input] = torch.zeros_like(cropped[component.mask_input])
    cropped = on_device(cropped, model_device(kmodel))
    with torch.no_grad():
        outs = component.kokoro(kmodel, **{i: cropped[i] for i in component.inputs})
    return dict(zip(component.functions[-1].outputs, _as_tuple(outs)))


def export_component(kmodel, name: str, bucket: int, seed: int = 0
                     ) -> dict[str, torch.export.ExportedProgram]:
    """Function name -> ExportedProgram at static shapes for ``bucket``.

    Later functions are traced on the reference outputs of earlier ones (the decoder body on
    the harmonic source), so every function sees realistic values while tracing.
    """
    component = COMPONENTS[name]
    wrapper = component.wrapper(kmodel).eval()
    env = run_reference(kmodel, name, component.example_inputs(kmodel, bucket, seed))
    programs = {}
    with patched(component.patches), torch.no_grad(), warnings.catch_warnings():
        # weight_norm's pre-hook and LSTM.flatten_parameters assign tensor attributes while
        # tracing; the traced values derive from the registered parameters, so this is benign.
        warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned")
        for fn in component.functions:
            args = tuple(env[i] for i in fn.inputs)
            programs[fn.name] = torch.export.export(_Bound(wrapper, fn.method), args, strict=False)
    return programs


def component_params(kmodel, name: str) -> dict[str, Any]:
    """The component's weights under KModel's state-dict keys: the names its libraries' weight
    inputs carry (the importer names them so), the same for every bucket and LSTM method."""
    wrapper = COMPONENTS[name].wrapper(kmodel)
    return {key: value.detach().cpu().numpy() for key, value in wrapper.named_parameters()}
