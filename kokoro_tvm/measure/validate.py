"""Static fidelity: a built library against the PyTorch wrapper it came from; and, for
components with a length mask (duration, text_encoder, f0n, decoder), length-exact fidelity: the
library's valid outputs against unpatched Kokoro run on the same utterance without padding.
What the bars are and why: docs/decisions.md, Fidelity.

Both run on the same padded example inputs (``Component.example_inputs`` at one seed). Every
function output gets a tight check, max abs error relative to the output's scale, each function
fed the reference values of its inputs. Components with several functions (the decoder:
``source`` then ``body``) also run chained, library to library, and their ``spectral_outputs``
(the waveform) are judged by log-mel L1 and by an SNR bar relative to a probe: PyTorch against
itself with one input changed by a rounding-sized amount (``Component.spectral_probe``). The
decoder's ``source`` output is reported without a bar (ill-conditioned in float32) and judged
through the chained waveform.
"""
from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import torch

from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.model.components import (
    COMPONENTS,
    Component,
    crop,
    run_exact_length,
    run_reference,
    valid_length,
)
from kokoro_tvm.runtime.cuda import device as tvm_device
from kokoro_tvm.runtime.library import Library, Weights

TIGHT_RELATIVE = 1e-4
# The chained waveform's bars (docs/decisions.md, Fidelity): log-mel L1 at most
# ``log_mel_l1``; SNR at least the probe's SNR minus ``snr_below_probe_db``, capped at
# ``snr_db_cap``.
SPECTRAL_TOLERANCES = {"log_mel_l1": 0.25, "snr_below_probe_db": 10.0, "snr_db_cap": 30.0}


def snr_bar(probe_snr: float) -> float:
    """The waveform's SNR bar given the probe's SNR at the same inputs."""
    return min(SPECTRAL_TOLERANCES["snr_db_cap"],
               probe_snr - SPECTRAL_TOLERANCES["snr_below_probe_db"])



class ValidationFailed(UserError):
    """A library whose outputs differ from PyTorch's beyond tolerance; names the library."""


# --------------------------------------------------------------------------------------------
# Running a library.
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _library(so_path: str, mtime: float, params_npz: str, device: str = "cpu") -> Library:
    """A loaded library; cached per file version (mtime) since loading is not free."""
    return Library(so_path, Weights(params_npz, tvm_device(device)))


def run_library(so_path: str | os.PathLike, params_npz: str | os.PathLike, function: str,
                inputs: dict[str, np.ndarray], device: str = "cpu") -> list[np.ndarray]:
    """Calls ``function`` of the library with ``inputs`` and the weights it names, by name,
    on ``device`` (``cpu`` or ``cuda``)."""
    so_path = os.fspath(so_path)
    return _library(so_path, os.path.getmtime(so_path), os.fspath(params_npz),
                    device)(function, inputs)


# --------------------------------------------------------------------------------------------
# Metrics.
# --------------------------------------------------------------------------------------------

def _metric(value: float, tolerance: float | None = None, bound: str = "max") -> dict[str, Any]:
    """One metric; with a tolerance, ``passed`` says whether value is within it (NaN fails)."""
    entry: dict[str, Any] = {"value": float(value), "tolerance": tolerance}
    if tolerance is not None:
        entry["bound"] = bound
        ok = value <= tolerance if bound == "max" else value >= tolerance
        entry["passed"] = bool(ok and np.isfinite(value))
    return entry


def tight_metrics(out: np.ndarray, ref: np.ndarray, tolerance: float | None
                  ) -> dict[str, dict[str, Any]]:
    """Max abs error, the output's scale, and their ratio (judged against ``tolerance``)."""
    if out.shape != ref.shape:
        return {"shape_matches": _metric(0.0, 1.0, "min")}
    err = float(np.max(np.abs(out.astype(np.float64) - ref))) if out.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    rel = err / scale if scale > 0 else err
    return {"max_abs_error": _metric(err), "scale": _metric(scale),
            "relative_error": _metric(rel, tolerance)}


@functools.lru_cache(maxsize=4)
def mel_filterbank(n_fft: int = 1024, n_mels: int = 80, sample_rate: int = SAMPLE_RATE,
                   fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """Triangular mel filters [n_mels, n_fft//2+1] on the HTK mel scale."""
    fmax = fmax or sample_rate / 2
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)  # noqa: E731
    edges = hz(np.linspace(mel(fmin), mel(fmax), n_mels + 2))
    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    lower = (freqs[None, :] - edges[:-2, None]) / (edges[1:-1, None] - edges[:-2, None])
    upper = (edges[2:, None] - freqs[None, :]) / (edges[2:, None] - edges[1:-1, None])
    return np.maximum(0.0, np.minimum(lower, upper))


def log_mel(audio: np.ndarray, n_fft: int = 1024, hop: int = 256) -> np.ndarray:
    """Natural-log mel spectrogram [n_mels, frames] of a mono waveform (floor 1e-5)."""
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    x = np.pad(x, (n_fft // 2, n_fft // 2), mode="reflect")
    frames = 1 + (len(x) - n_fft) // hop
    index = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    spec = np.abs(np.fft.rfft(x[index] * np.hanning(n_fft + 1)[:-1], axis=1)) ** 2
    return np.log(np.maximum(mel_filterbank(n_fft) @ spec.T, 1e-5))


def log_mel_l1(out: np.ndarray, ref: np.ndarray) -> float:
    """Mean abs difference of natural-log mel energies."""
    return float(np.mean(np.abs(log_mel(out) - log_mel(ref))))


def snr_db(out: np.ndarray, ref: np.ndarray) -> float:
    """Reference power over error power, in dB."""
    noise = float(np.sum((out.astype(np.float64) - ref) ** 2))
    return float(10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / max(noise, 1e-30)))


def spectral_metrics(out: np.ndarray, ref: np.ndarray, probe: np.ndarray
                     ) -> dict[str, dict[str, Any]]:
    """Log-mel L1 and SNR of ``out`` against ``ref``, judged by SPECTRAL_TOLERANCES, the SNR
    relative to the ``probe``'s (PyTorch under a rounding-sized input change)."""
    probe_snr = snr_db(probe, ref)
    return {
        "log_mel_l1": _metric(log_mel_l1(out, ref), SPECTRAL_TOLERANCES["log_mel_l1"], "max"),
        "snr_db": _metric(snr_db(out, ref), snr_bar(probe_snr), "min"),
        "probe_log_mel_l1": _metric(log_mel_l1(probe, ref)),
        "probe_snr_db": _metric(probe_snr),
    }


# --------------------------------------------------------------------------------------------
# Validation.
# --------------------------------------------------------------------------------------------

def _numpy(values: dict[str, torch.Tensor], names) -> dict[str, np.ndarray]:
    return {n: values[n].detach().cpu().numpy() for n in names}


def _per_function(component: Component, so_path, params_npz, ref: dict[str, torch.Tensor],
                  device: str = "cpu") -> dict[str, dict[str, Any]]:
    """Each function on the reference values of its inputs: the tight check."""
    metrics = {}
    for fn in component.functions:
        outs = run_library(so_path, params_npz, fn.name, _numpy(ref, fn.inputs), device)
        tolerance = TIGHT_RELATIVE if fn.tight else None  # else judged through the chain
        for out_name, out in zip(fn.outputs, outs):
            ref_out = ref[out_name].detach().cpu().numpy()
            for key, entry in tight_metrics(out, ref_out, tolerance).items():
                metrics[f"{fn.name}.{out_name}.{key}"] = entry
    return metrics


def probe_inputs(component: Component, inputs: dict[str, torch.Tensor]
                 ) -> dict[str, torch.Tensor]:
    """``inputs`` with the component's probe input scaled by 1 + its relative change."""
    name, change = component.spectral_probe
    return dict(inputs, **{name: inputs[name] * (1 + change)})


def _run_chained(component: Component, so_path, params_npz, inputs: dict[str, torch.Tensor],
                 device: str = "cpu") -> dict[str, np.ndarray]:
    """The inputs and every function's outputs, the functions run library to library."""
    env = _numpy(inputs, inputs)
    for fn in component.functions:
        env.update(zip(fn.outputs, run_library(so_path, params_npz, fn.name,
                                               {i: env[i] for i in fn.inputs}, device)))
    return env


def _chained(kmodel, component: Component, env: dict[str, np.ndarray],
             inputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]
             ) -> dict[str, dict[str, Any]]:
    """Spectral metrics on the final waveform of the chained run ``env``."""
    probe = run_reference(kmodel, component.name, probe_inputs(component, inputs))
    metrics = {}
    for name in component.spectral_outputs:
        found = spectral_metrics(env[name], ref[name].cpu().numpy(), probe[name].cpu().numpy())
        metrics.update({f"chained.{name}.{key}": entry for key, entry in found.items()})
    return metrics


def _length_exact(kmodel, component: Component, env: dict[str, np.ndarray],
                  inputs: dict[str, torch.Tensor]) -> dict[str, dict[str, Any]]:
    """The library's valid outputs on the padded inputs against unpatched Kokoro run on the
    utterance without padding (docs/decisions.md, Fidelity); same bars: tight,
    or spectral for ``spectral_outputs`` (the decoder's waveform, its functions chained)."""
    length = valid_length(component.name, inputs)
    exact = run_exact_length(kmodel, component.name, inputs)
    valid = crop(component.name, {name: env[name] for name in exact}, length)
    metrics = {"exact_length.length": _metric(length)}
    probe = (run_exact_length(kmodel, component.name, probe_inputs(component, inputs))
             if component.spectral_outputs else {})
    for out_name, ref_out in exact.items():
        if out_name in component.spectral_outputs:
            found = spectral_metrics(valid[out_name], ref_out.cpu().numpy(),
                                     probe[out_name].cpu().numpy())
        else:
            found = tight_metrics(valid[out_name], ref_out.cpu().numpy(), TIGHT_RELATIVE)
        metrics.update({f"exact_length.{out_name}.{key}": entry for key, entry in found.items()})
    return metrics


def validate_component(kmodel, name: str, bucket: int, so_path: str | os.PathLike,
                       params_npz: str | os.PathLike, seed: int = 0, device: str = "cpu"
                       ) -> dict[str, Any]:
    """Library vs PyTorch on the example inputs at ``seed``, the library run on ``device``
    (``cpu`` or ``cuda``): metrics, tolerances, ``passed``."""
    component = COMPONENTS[name]
    inputs = component.example_inputs(kmodel, bucket, seed)
    ref = run_reference(kmodel, name, inputs)
    metrics = _per_function(component, so_path, params_npz, ref, device)
    chained = len(component.functions) > 1
    if chained or component.kokoro is not None:  # one chained run serves both checks
        env = _run_chained(component, so_path, params_npz, inputs, device)
    if chained:
        metrics.update(_chained(kmodel, component, env, inputs, ref))
    if component.kokoro is not None:
        metrics.update(_length_exact(kmodel, component, env, inputs))
    judged = [m["passed"] for m in metrics.values() if "passed" in m]
    return {"component": name, "bucket": bucket, "seed": seed, "metrics": metrics,
            "passed": bool(judged) and all(judged)}
