"""The FMA ceiling (kokoro_tvm/measure/peak.py) and the benchmark's shares of its peaks."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tvm

from kokoro_tvm.compile.schedules.cpu import cpu_facts
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.measure import peak
from kokoro_tvm.measure.bench_components import cpu_fma_peak, shares_of_peaks
from kokoro_tvm.measure.peak import DECAY, OFFSET, build_fma


def test_fma_kernel_runs_its_chains_as_vector_fmas():
    """Each element runs the recurrence ``a = a * DECAY + OFFSET`` STEPS times, and the code is
    fused multiply-adds on full-width vectors (no memory inside the loop to time instead)."""
    target = make_target({"kind": "llvm", "mcpu": "host"})
    steps = 1000
    library, shape, flop = build_fma(target, steps=steps, chunks=3)
    assert flop == 2 * steps * shape[0] * shape[1]
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros(shape, np.float32))
    library["fma"](tvm.runtime.tensor(x), out)
    expected = x.astype(np.float64)
    for _ in range(steps):
        expected = expected * np.float32(DECAY) + np.float32(OFFSET)
    # float32 rounding over 1000 steps; a missing OFFSET would be off by about 0.1
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=2e-4)
    asm = library.inspect_source("asm")
    assert "vfmadd" in asm or "fmla" in asm
    # x86 names its registers by width; an Arm host's 128-bit NEON has one width only.
    register = {512: "zmm", 256: "ymm", 128: "xmm"}[cpu_facts(target).vector_bits]
    assert "fmla" in asm or re.search(rf"vfmadd\w+ps\s+%{register}", asm), register


def test_benchmark_reports_the_fma_peak_of_cpu_targets_only(monkeypatch):
    """cpu_fma_peak times the ceiling of the libraries' own target (peak.fma_peak_gflops, here
    a stand-in: timing is not a unit test's business) and reports it rounded; no ceiling, and
    no timing, for a GPU target or no libraries."""
    asked = []

    def fake_peak(target):
        asked.append(target)
        return 123.456

    monkeypatch.setattr(peak, "fma_peak_gflops", fake_peak)
    host = make_target({"kind": "llvm", "mcpu": "host"})
    cpu = [{"target_string": str(host)}] * 2  # as the build stage writes it, per library
    assert cpu_fma_peak(cpu) == 123.5
    assert [str(t) for t in asked] == [str(host)]
    cuda = [{"target_string": json.dumps({"kind": "cuda", "arch": "sm_90"})}]
    assert cpu_fma_peak(cuda) is None and cpu_fma_peak([]) is None
    assert len(asked) == 1


@pytest.mark.parametrize("fma_peak", [400.0, None])
def test_shares_are_fractions_of_each_peak(fma_peak):
    shares = shares_of_peaks(300.0, {"practical_peak_gflops": 200.0, "fma_peak_gflops": fma_peak})
    assert shares == {"practical_peak_share": 1.5,
                      "fma_peak_share": None if fma_peak is None else 0.75}
