"""The machine's arithmetic ceiling for float32: vector FMAs held in registers, on every thread.

PyTorch's matrix product is one measure of what the machine can do, but it is a library's
figure, not the machine's (docs/cpu-speed.md, CPU peak). This kernel has no memory traffic at
all: each thread runs ``accumulators`` independent chains of ``a = a * b + c`` on full vectors
(enough chains to cover the FMA latency on every FMA pipe), so its GFLOP/s is what the cores'
FMA units deliver at the target's vector width, the figure no kernel with loads and stores can
exceed.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

from kokoro_tvm.compile.schedules.cpu import cpu_facts

STEPS = 100_000  # FMA rounds per chain: long enough that the call's overhead vanishes
CHUNKS = 64  # parallel iterations: every thread of the pool gets some on any core count
DECAY, OFFSET = 0.9999, 0.0001  # a = a * DECAY + OFFSET stays finite for any number of steps


def fma_kernel(lanes: int, accumulators: int, steps: int, chunks: int) -> tvm.tirx.PrimFunc:
    """``out[c] = x[c]`` after ``steps`` rounds of ``a = a * DECAY + OFFSET``, element-wise,
    ``accumulators`` vectors of ``lanes`` floats per chunk, chunks in parallel."""
    width = accumulators * lanes

    @T.prim_func
    def fma(x: T.Buffer((chunks, width), "float32"), out: T.Buffer((chunks, width), "float32")):
        T.func_attr({"global_symbol": "fma", "tirx.noalias": True})
        for c in T.parallel(chunks):
            a = T.alloc_buffer((width,), "float32", scope="local")
            for i in T.vectorized(width):
                a[i] = x[c, i]
            for _ in range(steps):
                for j in T.unroll(accumulators):
                    for lane in T.vectorized(lanes):
                        a[j * lanes + lane] = (a[j * lanes + lane] * T.float32(DECAY)
                                               + T.float32(OFFSET))
            for i in T.vectorized(width):
                out[c, i] = a[i]

    return fma


def build_fma(target: tvm.target.Target, steps: int = STEPS, chunks: int = CHUNKS):
    """The kernel built for ``target`` (a CPU target): half its vector registers as
    accumulators, the rest for LLVM. Returns (library, input shape, FLOPs per call)."""
    facts = cpu_facts(target)
    lanes, accumulators = facts.lanes(), facts.registers // 2
    library = tvm.tirx.build(fma_kernel(lanes, accumulators, steps, chunks), target=target)
    return library, (chunks, accumulators * lanes), 2 * steps * chunks * accumulators * lanes


def fma_peak_gflops(target: tvm.target.Target, repeats: int = 5) -> float:
    """Best GFLOP/s of the FMA kernel on this machine, on the threads of TVM's pool
    (``TVM_NUM_THREADS``)."""
    library, shape, flop = build_fma(target)
    x = tvm.runtime.tensor(np.ones(shape, np.float32))
    out = tvm.runtime.tensor(np.zeros(shape, np.float32))
    library["fma"](x, out)
    timer = library.time_evaluator("fma", tvm.cpu(), number=1, repeat=repeats)
    return flop / min(timer(x, out).results) / 1e9
