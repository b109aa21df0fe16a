"""bench_components' choice of libraries and the order it times them in (no libraries run)."""
from __future__ import annotations

import pytest

from kokoro_tvm.measure.bench_components import (
    _interleaved_ms,
    selected_libraries,
    serving_buckets,
)
from kokoro_tvm.runtime import bare


def test_each_length_is_served_by_the_smallest_bucket_that_holds_it():
    buckets = [512, 32, 64, 48]
    assert serving_buckets(buckets, [1, 32, 33, 64]) == {32, 48, 64}
    # Longer than the largest: the runtime splits it into chunks of the largest.
    assert serving_buckets(buckets, [65, 5000]) == {512}


def _library(component, lstm, bucket):
    return {"component": component, "lstm": lstm, "bucket": bucket}


def test_libraries_are_chosen_per_component_by_its_axis():
    libraries = [_library("bert", "none", b) for b in (32, 64, 512)]
    libraries += [_library("duration", m, b) for m in ("tir", "tir_vec") for b in (16, 64)]
    libraries += [_library("decoder", "none", b) for b in (32, 240, 256, 2048)]
    chosen = selected_libraries(libraries, {"tokens": [40, 600], "frames": [240]})
    assert sorted((e["component"], e["lstm"], e["bucket"]) for e in chosen) == [
        ("bert", "none", 64), ("bert", "none", 512),
        ("decoder", "none", 240),
        ("duration", "tir", 64), ("duration", "tir_vec", 64)]
    assert selected_libraries(libraries, None) == libraries


def test_each_timed_call_follows_an_untimed_one_of_the_same_engine(monkeypatch):
    """The other engine's threads spin after its call: a timed call must not come right after
    it."""
    events: list[str] = []
    ticks = iter(range(1000))

    def clock():
        events.append("clock")
        return next(ticks) / 1e3

    monkeypatch.setattr(bare.time, "perf_counter", clock)  # call_ms's clock
    tvm_ms, torch_ms = _interleaved_ms(lambda: events.append("tvm"),
                                       lambda: events.append("torch"), repeats=3)
    # Each turn: an untimed call, then the clock around a timed call of the same engine.
    turn = ["{0}", "clock", "{0}", "clock"]
    expected = [e.format(name) for name in ("tvm", "torch") for e in turn] * 3
    assert events == expected
    assert (tvm_ms, torch_ms) == pytest.approx((1.0, 1.0))
