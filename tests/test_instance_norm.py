"""The masked InstanceNorm op (kokoro_tvm/model/masked_norm.py) and its one-kernel lowering
(compile/instance_norm.py, schedules/row_statistics.py).

- The op in PyTorch: with every position valid it is torch's instance_norm; with padding, each
  sequence's valid part equals instance_norm of that part alone (rel. error <= 1e-5).
- The op imported, lowered and built with a Snake and the mask after it (as in the generator),
  against the op in PyTorch, for rows shorter than the partial sums, a tail, and none; lengths
  per sequence 1..L: max abs error <= 1e-5 of the output's scale. The norm and its elementwise
  tail are one kernel, and the schedule applies on x86 with AVX-512 and with SSE only.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import tvm
from torch import nn

from kokoro_tvm.compile import gpu
from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.gpu.instance_norm import gpu_instance_norm
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.relax import import_program
from kokoro_tvm.compile.row_reduction import PARTIALS
from kokoro_tvm.compile.specialize import specialize
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.model.masked_norm import masked_instance_norm
from kokoro_tvm.runtime.library import Library, Weights

TARGETS = {"host": {"kind": "llvm", "mcpu": "host", "num-cores": 2},
           "sse": {"kind": "llvm", "mcpu": "x86-64", "num-cores": 2}}
EPS = 1e-5

pytestmark = pytest.mark.filterwarnings("ignore")


def _valid(lengths: list[int], length: int) -> torch.Tensor:
    return (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).float()[:, None, :]


def test_op_is_instance_norm_over_the_valid_part():
    torch.manual_seed(0)
    x = torch.randn(3, 6, 40) * 3 + 2
    full = masked_instance_norm(x, torch.ones(3, 1, 40), EPS)
    torch.testing.assert_close(full, nn.functional.instance_norm(x, eps=EPS),
                               rtol=1e-5, atol=1e-5)
    lengths = [40, 17, 2]
    out = masked_instance_norm(x, _valid(lengths, 40), EPS)
    for b, n in enumerate(lengths):
        want = nn.functional.instance_norm(x[b:b + 1, :, :n], eps=EPS)
        torch.testing.assert_close(out[b:b + 1, :, :n], want, rtol=1e-5, atol=1e-5)


class NormSnake(nn.Module):
    """The generator's pattern: masked norm, Snake, zeroed padding."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.linspace(0.5, 2.0, channels)[None, :, None])

    def forward(self, x, valid):
        y = masked_instance_norm(x, valid, EPS)
        return (y + (1 / self.alpha) * torch.sin(self.alpha * y) ** 2) * valid


def _imported(module: nn.Module, x: torch.Tensor):
    """The module imported as the pipeline imports a component, its static shapes specialized
    (the norm's kernel emitted)."""
    program = torch.export.export(module, (x, torch.ones(x.shape[0], 1, x.shape[2])))
    func, params, callees = import_program(program.run_decompositions(), "none")
    return func, params, specialize(tvm.IRModule({"main": func, **callees}), x.shape[2])


# The GPU form's math is checked once, on the host CPU; gpu_float32 is Metal's (no float64).
@pytest.mark.parametrize("form, target_name", [("imported", "host"), ("imported", "sse"),
                                               ("gpu", "host"), ("gpu_float32", "host")])
# The last: rows long enough for the output's vector loop to have a scalar rest after it.
@pytest.mark.parametrize("channels, length", [(5, PARTIALS - 3), (4, 4 * PARTIALS + 7),
                                              (3, 8 * PARTIALS), (2, 9 * PARTIALS + 5)])
def test_lowered_op_matches_torch(form, target_name, channels, length, tmp_path):
    """The kernel as imported, and its GPU form (compile/gpu/instance_norm.py, summing in
    float64, or float32 for Metal), run here."""
    batch = 3
    torch.manual_seed(1)
    x = torch.randn(batch, channels, length) * 4 + 1
    module = NormSnake(channels).eval()
    func, params, mod = _imported(module, x)
    if form.startswith("gpu"):
        mod = gpu_instance_norm("float32" if form == "gpu_float32" else "float64")(mod)
    target = make_target(TARGETS[target_name])
    lowered = lower(mod, target)
    kernels = [gv.name_hint for gv, f in lowered.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc) and "masked_instance_norm" in gv.name_hint]
    assert len(kernels) == 1 and "sin" in kernels[0], kernels
    if form == "imported":  # the row-statistics schedule: every statistic in the row loop
        script = lowered[kernels[0]].script()
        assert "T.parallel" in script, script
        rows = script[script.index("T.parallel"):]
        assert not re.search(r"^    for ", rows, re.MULTILINE), script
        assert all(f'sblock("{block}' in rows
                   for block in ("mean_partial_update", "var_partial_update", "inv_std")), script
    build_library(lowered, target, tmp_path / "norm.so")
    library = Library(tmp_path / "norm.so", Weights(params))
    names = [p.name for p in func.params[:2]]
    for lengths in ([length] * batch, [1, length, length // 2 + 1]):
        valid = _valid(lengths, length)
        with torch.no_grad():
            want = module(x, valid).numpy()
        got = library("main", dict(zip(names, (x.numpy(), valid.numpy()))))[0]
        scale = float(np.abs(want).max())
        assert float(np.abs(got - want).max()) <= 1e-5 * scale, lengths


def test_cuda_norm_is_a_cross_thread_reduction_per_row():
    """On cuda the norm (with its fused Snake) is one kernel whose thread block shares each
    row's sums across its threads (warp shuffles), not one serial thread per partial sum, and
    whose row loops are unrolled a few steps only."""
    torch.manual_seed(1)
    _, _, mod = _imported(NormSnake(4).eval(), torch.randn(2, 4, 300))
    target = make_target({"kind": "cuda", "arch": "sm_90"})
    lowered = lower(mod, target)
    kernels = [gv.name_hint for gv, f in lowered.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc) and "masked_instance_norm" in gv.name_hint]
    assert len(kernels) == 1 and "sin" in kernels[0], kernels
    script = lowered[kernels[0]].script()
    unrolls = [int(n) for n in re.findall(r'"pragma_auto_unroll_max_step": (\d+)', script)]
    assert unrolls and max(unrolls) <= 16  # not dlight's 256: rows became straight code
    source = "\n".join(gpu.cuda_sources(lowered, target))
    norm = source[source.index("void __launch_bounds__"):]
    assert "__shfl_down_sync" in source and "blockIdx.x" in norm
