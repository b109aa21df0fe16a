"""The relative error every check judges by (validation, the GPU check's probes and sweeps)."""
from __future__ import annotations

import numpy as np

from kokoro_tvm.measure.metrics import relative_error, tight_metrics


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
