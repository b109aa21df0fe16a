"""Our CPU schedules, applied in the lower stage: fast code with no tuning.

Two halves, both data:

- ``LEGALIZATIONS``: Relax op -> a TE lowering shaped for the schedule (conv1d and matmul as
  contractions padded to whole register tiles, long convolutions by Winograd, conv_transpose1d
  polyphase, tanh, sin, cos and whole powers without libm calls, long float32 sums accumulated
  in float64, softmax as row statistics). Each falls back to TVM's own legalization for cases
  it does not cover.
- ``RULES``: dlight-style ``ScheduleRule``s tried in order on every PrimFunc after FuseTIR; the
  first that applies schedules it. Contractions (found by the block annotation the
  legalizations set) first, then row statistics (the masked InstanceNorm and softmax, in their
  row loop), then parallel/vectorized loops for everything else.

Tiles follow from the target (``cpu.cpu_facts``: vector width and registers from the ISA), so
every bucket gets the same rules with no tuning.
"""
from __future__ import annotations

import tvm
from tvm.s_tir import dlight
from tvm.s_tir.dlight.base import ScheduleRule

from kokoro_tvm.compile.schedules import math
from kokoro_tvm.compile.schedules.contraction import apply_contraction
from kokoro_tvm.compile.schedules.conv_transpose import legalize_conv1d_transpose
from kokoro_tvm.compile.schedules.elementwise import apply_elementwise
from kokoro_tvm.compile.schedules.matmul import legalize_matmul
from kokoro_tvm.compile.schedules.reduction import legalize_mean, legalize_sum
from kokoro_tvm.compile.schedules.row_statistics import apply_row_statistics
from kokoro_tvm.compile.schedules.softmax import legalize_softmax
from kokoro_tvm.compile.schedules.winograd import legalize_conv1d_winograd

LEGALIZATIONS = {
    "relax.nn.conv1d": legalize_conv1d_winograd,
    "relax.nn.conv1d_transpose": legalize_conv1d_transpose,
    "relax.matmul": legalize_matmul,
    **math.EVERY_TARGET,
    **math.CPU_ONLY,
    "relax.sum": legalize_sum,
    "relax.mean": legalize_mean,
    "relax.nn.softmax": legalize_softmax,
}


def _rule(name, apply):
    return ScheduleRule.from_callable(name)(lambda func, target, _tunable: apply(func, target))


RULES = (
    _rule("Contraction", apply_contraction),
    _rule("RowStatistics", apply_row_statistics),
    _rule("Elementwise", apply_elementwise),
)


def apply_schedules() -> tvm.transform.Pass:
    """The pass that schedules every unscheduled PrimFunc (run under the target)."""
    return dlight.ApplyDefaultSchedule(*RULES)
