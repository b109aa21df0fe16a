"""How LSTMs are lowered when an ExportedProgram is imported into Relax, keyed by method name.

The method is a dimension of every LSTM artifact (``results/relax/{component}/{lstm}/...``), so
each method is one entry here: a step that rewrites the ExportedProgram before TVM's importer
runs, plus any extra converters it needs. Components without an LSTM use ``none``, which
lives in the importer: this module is what only LSTM artifacts depend on (rules/common.smk).

- ``unroll``: TVM's own path. torch's decompositions turn ``aten.lstm`` into per-time-step
  matmuls and gates, which TVM's converters import as they are: the IR grows linearly with the
  bucket (DESIGN.md section 4).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass(frozen=True)
class LstmMethod:
    """One way to lower LSTMs: a program rewrite before import, and extra converters."""

    name: str
    prepare: Callable[[torch.export.ExportedProgram], torch.export.ExportedProgram]
    converters: dict[str, Callable] = field(default_factory=dict)


def _decompose(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """torch's default decompositions (what ``from_exported_program`` runs by default)."""
    return program.run_decompositions()


LSTM_METHODS: dict[str, LstmMethod] = {
    "unroll": LstmMethod("unroll", _decompose),
}
