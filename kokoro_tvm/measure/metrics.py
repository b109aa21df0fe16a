"""The metrics every check uses, in numpy alone: the tight relative error, the log-mel
spectrogram and SNR of waveforms, and their bars (docs/fidelity.md); a stream's worst
stall. Validation, the GPU check, benchmarks, reports and tests all compute them here."""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from kokoro_tvm.facts import SAMPLE_RATE

TIGHT_RELATIVE = 1e-4
# The chained waveform's bars (docs/fidelity.md): log-mel L1 at most
# ``log_mel_l1``; SNR at least the probes' lowest SNR minus ``snr_below_probe_db``, capped at
# ``snr_db_cap``.
SPECTRAL_TOLERANCES = {"log_mel_l1": 0.25, "snr_below_probe_db": 10.0, "snr_db_cap": 30.0}


# The cap for libraries whose generator convolutions are int8 (a target's ``precision: int8``):
# they measured 11-21 dB against PyTorch at 128-512 frames (14 at 224) where float32 gives
# 15-38 (docs/int8.md); a wrong scale or zero point gives 0 or less. The
# log-mel bar, unchanged, is the one that bounds what is heard.
INT8_SNR_DB_CAP = 10.0


def snr_bar(probe_snr: float, cap: float = SPECTRAL_TOLERANCES["snr_db_cap"]) -> float:
    """The waveform's SNR bar given the probes' lowest SNR at the same inputs."""
    return min(cap, probe_snr - SPECTRAL_TOLERANCES["snr_below_probe_db"])


def metric(value: float, tolerance: float | None = None, bound: str = "max") -> dict[str, Any]:
    """One metric; with a tolerance, ``passed`` says whether value is within it (NaN fails)."""
    entry: dict[str, Any] = {"value": float(value), "tolerance": tolerance}
    if tolerance is not None:
        entry["bound"] = bound
        ok = value <= tolerance if bound == "max" else value >= tolerance
        entry["passed"] = bool(ok and np.isfinite(value))
    return entry


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| / max |ref| over ``ref``'s finite values (the absolute error where ``ref``
    is all zeros); inf where the shapes differ, ``out`` is not finite where ``ref`` is, or their
    NaNs and infinities differ."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        return float("inf")
    finite = np.isfinite(ref)
    if not (np.array_equal(out[~finite], ref[~finite], equal_nan=True)
            and np.isfinite(out[finite]).all()):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = float(np.max(np.abs(ref[finite]))) or 1.0
    return float(np.max(np.abs(out[finite] - ref[finite]))) / scale


def tight_metrics(out: np.ndarray, ref: np.ndarray, tolerance: float | None
                  ) -> dict[str, dict[str, Any]]:
    """Max abs error, the output's scale, and their ratio (judged against ``tolerance``)."""
    if out.shape != ref.shape:
        return {"shape_matches": metric(0.0, 1.0, "min")}
    err = float(np.max(np.abs(out.astype(np.float64) - ref))) if out.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return {"max_abs_error": metric(err), "scale": metric(scale),
            "relative_error": metric(relative_error(out, ref), tolerance)}


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


def spectral_metrics(out: np.ndarray, ref: np.ndarray, probes: np.ndarray,
                     snr_cap: float = SPECTRAL_TOLERANCES["snr_db_cap"]
                     ) -> dict[str, dict[str, Any]]:
    """Log-mel L1 and SNR of ``out`` against ``ref``, judged by SPECTRAL_TOLERANCES, the SNR
    relative to the lowest of the ``probes``' (PyTorch under rounding-sized input changes, one
    per entry of the leading axis), at most ``snr_cap``."""
    probe_snrs = [snr_db(probe, ref) for probe in probes]
    probe_snr = min(probe_snrs)
    return {
        "log_mel_l1": metric(log_mel_l1(out, ref), SPECTRAL_TOLERANCES["log_mel_l1"], "max"),
        "snr_db": metric(snr_db(out, ref), snr_bar(probe_snr, snr_cap), "min"),
        "probe_log_mel_l1": metric(max(log_mel_l1(probe, ref) for probe in probes)),
        "probe_snr_db": metric(probe_snr),
        "probe_snr_db_max": metric(max(probe_snrs)),
    }


# The decoder's harmonic source against its float64 truth (docs/fidelity.md): the
# library's error may be at most ``ratio`` times PyTorch float32's own over the whole output,
# and ``head_ratio`` times over its first ``head_frames`` frames, where float32 phase has not
# drifted yet, so that a wrong source fails at every bucket. Errors below ``floor`` count as it.
# Measured on the default build: 0.98-1.00 for both at every bucket, 128-2048 frames.
SOURCE_TOLERANCES = {"ratio": 2.0, "head_ratio": 2.0, "head_frames": 32, "floor": 1e-6}


def harmonic_error(har: np.ndarray, truth: np.ndarray, positions: int | None = None) -> float:
    """RMS error of a harmonic source ``[B, 2n, T]`` (n magnitudes, then n phases) against the
    truth, relative to the truth's RMS, on the complex STFT (a phase's branch cut, a 2 pi jump,
    is no error), over the first ``positions`` STFT frames (all by default)."""
    def complex_stft(values: np.ndarray) -> np.ndarray:
        n = values.shape[1] // 2
        values = values[..., :positions].astype(np.float64)
        return values[:, :n] * np.exp(1j * values[:, n:])

    reference = complex_stft(truth)
    error = complex_stft(har) - reference
    return float(np.sqrt(np.mean(np.abs(error) ** 2) / max(np.mean(np.abs(reference) ** 2),
                                                            1e-300)))


def source_metrics(out: np.ndarray, ref: np.ndarray, truth: np.ndarray, per_frame: int
                   ) -> dict[str, dict[str, Any]]:
    """``out`` (the library's float32 source) and ``ref`` (PyTorch's float32) against ``truth``
    (float64), ``per_frame`` STFT frames per frame: errors, and ``out``'s over ``ref``'s judged by
    SOURCE_TOLERANCES."""
    floor = SOURCE_TOLERANCES["floor"]
    head = per_frame * SOURCE_TOLERANCES["head_frames"] + 1
    metrics = {}
    for name, positions, ratio in (("", None, SOURCE_TOLERANCES["ratio"]),
                                   ("head_", head, SOURCE_TOLERANCES["head_ratio"])):
        error = harmonic_error(out, truth, positions)
        pytorch = harmonic_error(ref, truth, positions)
        metrics[f"float64_{name}error"] = metric(error)
        metrics[f"float64_{name}pytorch_error"] = metric(pytorch)
        metrics[f"float64_{name}error_ratio"] = metric(max(error, floor) / max(pytorch, floor),
                                                       ratio)
    return metrics


def worst_stall(ready_seconds: Sequence[float], audio_seconds: Sequence[float]) -> float:
    """The longest silence of a player that starts a stream when its first chunk is ready and
    plays the chunks back to back, waiting for any chunk not ready when its turn comes: chunk
    ``i`` was ready at ``ready_seconds[i]`` (any common origin) and holds ``audio_seconds[i]``
    of audio. 0 when the stream never stalls."""
    if len(ready_seconds) != len(audio_seconds):
        raise ValueError(f"{len(ready_seconds)} ready times for {len(audio_seconds)} chunks")
    worst, played_until = 0.0, None
    for ready, audio in zip(ready_seconds, audio_seconds):
        starts = ready if played_until is None else max(ready, played_until)
        if played_until is not None:
            worst = max(worst, ready - played_until)
        played_until = starts + audio
    return worst
