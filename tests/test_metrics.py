"""The metrics every check judges by (validation, the GPU check's probes and sweeps): the
relative error, and the waveform's SNR bar from PyTorch's own probes; a stream's worst stall."""
from __future__ import annotations

import numpy as np
import pytest

from kokoro_tvm.measure.metrics import (
    SPECTRAL_TOLERANCES,
    relative_error,
    snr_db,
    spectral_metrics,
    tight_metrics,
    worst_stall,
)


def test_relative_error_is_the_worst_error_over_the_references_scale():
    ref = np.array([[1.0, -4.0], [2.0, 0.5]], np.float32)
    out = ref + np.array([[0.0, 0.02], [-0.01, 0.0]], np.float32)
    assert np.isclose(relative_error(out, ref), 0.02 / 4.0, rtol=1e-5)
    assert relative_error(np.array([3, 4]), np.array([3, 5])) == 0.2  # integers too
    assert relative_error(np.full(3, 0.5), np.zeros(3)) == 0.5  # zero reference: absolute


def test_nan_shape_and_infinity_disagreements_are_infinite():
    ref = np.array([1.0, np.nan, np.inf])
    assert relative_error(np.array([1.0, np.nan, np.inf]), ref) == 0.0
    assert relative_error(np.array([1.0, 0.0, np.inf]), ref) == np.inf  # NaN lost
    assert relative_error(np.array([1.0, np.nan, -np.inf]), ref) == np.inf
    assert relative_error(np.array([np.nan, np.nan, np.inf]), ref) == np.inf  # NaN made
    assert relative_error(np.ones(3), np.ones(4)) == np.inf


def test_a_nan_output_fails_the_tight_bar():
    ref = np.linspace(-1, 1, 8, dtype=np.float32)
    out = ref.copy()
    assert tight_metrics(out, ref, 1e-4)["relative_error"]["passed"]
    out[3] = np.nan
    assert not tight_metrics(out, ref, 1e-4)["relative_error"]["passed"]


def _at_snr(ref: np.ndarray, snr: float, seed: int) -> np.ndarray:
    """``ref`` plus noise of exactly ``snr`` dB."""
    noise = np.random.default_rng(seed).standard_normal(ref.shape)
    return ref + noise * np.linalg.norm(ref) / np.linalg.norm(noise) * 10 ** (-snr / 20)


def test_the_snr_bar_rests_on_the_probe_that_reacts_most():
    """One probe's SNR varies by 10-15 dB with the change (docs/fidelity.md): the bar
    is the probes' lowest SNR minus 10 dB, so a probe that happens to react little (28 dB) does
    not fail a library as close as PyTorch is to itself (12 dB), and a far one (0 dB) still
    fails."""
    ref = np.sin(np.linspace(0, 300, 24000))
    probes = np.stack([_at_snr(ref, snr, seed) for seed, snr in enumerate((28.0, 14.0))])
    below = SPECTRAL_TOLERANCES["snr_below_probe_db"]
    found = spectral_metrics(_at_snr(ref, 12.0, 9), ref, probes)
    assert np.isclose(found["probe_snr_db"]["value"], 14.0)
    assert np.isclose(found["probe_snr_db_max"]["value"], 28.0)
    assert np.isclose(found["snr_db"]["tolerance"], 14.0 - below)
    assert found["snr_db"]["passed"]
    assert not spectral_metrics(_at_snr(ref, 12.0, 9), ref, probes[:1])["snr_db"]["passed"]
    assert not spectral_metrics(_at_snr(ref, 0.0, 9), ref, probes)["snr_db"]["passed"]


def test_the_snr_bar_is_capped():
    """Waveforms that barely react to the probes (the tiny random model) are held to the cap."""
    ref = np.sin(np.linspace(0, 300, 24000))
    probes = np.stack([_at_snr(ref, 90.0, seed) for seed in range(3)])
    found = spectral_metrics(_at_snr(ref, 35.0, 9), ref, probes)
    assert found["snr_db"]["tolerance"] == SPECTRAL_TOLERANCES["snr_db_cap"]
    assert found["snr_db"]["passed"] and np.isclose(snr_db(_at_snr(ref, 35.0, 9), ref), 35.0)
    assert not spectral_metrics(_at_snr(ref, 25.0, 9), ref, probes)["snr_db"]["passed"]


def test_a_stream_ready_before_its_turn_never_stalls():
    # Plays 0.5-1.5 s, 1.5-3.0 s, 3.0-4.0 s: each chunk was ready before.
    assert worst_stall([0.5, 0.9, 3.0], [1.0, 1.5, 1.0]) == 0.0
    assert worst_stall([0.3], [2.0]) == 0.0
    assert worst_stall([], []) == 0.0


def test_a_late_chunk_stalls_the_player_until_it_is_ready():
    # A 0.9 s lead ready at 0.68 s and the rest at 2.41 s: silent from 1.58 s to 2.41 s.
    assert worst_stall([0.68, 2.41], [0.9, 4.72]) == pytest.approx(0.83)


def test_the_player_resumes_after_a_stall_so_each_wait_counts_alone():
    # Plays 0-1 s, waits 0.5 s, plays 1.5-2.5 s, waits 1 s: the worst wait is 1 s (the third
    # chunk is 1.5 s behind a player that never waited).
    assert worst_stall([0.0, 1.5, 3.5], [1.0, 1.0, 1.0]) == pytest.approx(1.0)
    # A wait shifts the rest: this third chunk is then in time.
    assert worst_stall([0.0, 1.5, 2.4], [1.0, 1.0, 1.0]) == pytest.approx(0.5)


def test_worst_stall_needs_a_duration_per_chunk():
    with pytest.raises(ValueError, match="2 ready times for 1 chunks"):
        worst_stall([0.0, 1.0], [1.0])
