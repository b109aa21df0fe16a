"""How LSTMs are lowered when an ExportedProgram is imported into Relax, keyed by method name.

The method is a dimension of every LSTM artifact (``results/relax/{component}/{lstm}/...``), so
each method is one entry here: a step that rewrites the ExportedProgram before TVM's importer
runs, plus any extra converters it needs. Components without an LSTM use ``none``.

- ``unroll``: TVM's own path. torch's decompositions turn ``aten.lstm`` into per-time-step
  matmuls and gates, which TVM's converters import as they are: the IR grows linearly with the
  bucket (DESIGN.md section 4).
- ``none``: the same import, for programs that must contain no LSTM (checked).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

LSTM_OPS = ("lstm.input", "lstm.data")


@dataclass(frozen=True)
class LstmMethod:
    """One way to lower LSTMs: a program rewrite before import, and extra converters."""

    name: str
    prepare: Callable[[torch.export.ExportedProgram], torch.export.ExportedProgram]
    converters: dict[str, Callable] = field(default_factory=dict)


def lstm_nodes(program: torch.export.ExportedProgram) -> list[str]:
    """Names of the LSTM calls left in a program (before decomposition)."""
    return [n.name for n in program.graph.nodes
            if n.op == "call_function" and getattr(n.target, "__name__", "") in LSTM_OPS]


def _decompose(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """torch's default decompositions (what ``from_exported_program`` runs by default)."""
    return program.run_decompositions()


def _decompose_without_lstm(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``_decompose`` after checking that there is no LSTM to lower."""
    found = lstm_nodes(program)
    if found:
        raise ValueError(f"lstm method 'none' used for a program with LSTMs: {found}")
    return _decompose(program)


LSTM_METHODS: dict[str, LstmMethod] = {
    "unroll": LstmMethod("unroll", _decompose),
    "none": LstmMethod("none", _decompose_without_lstm),
}
