"""LSTM lowering methods (kokoro_tvm/compile/lstm.py) and the packed_lstm op they lower.

- The op alone, built by every method, against torch's nn.LSTM over pack_padded_sequence (both
  directions, lengths 1..T in one padded batch; hidden 5, scalar lanes, and 64, where tir_vec
  runs two register chunks of gates and vector cell updates): max abs error <= 1e-5.
- The IR of the TIR methods does not grow with the bucket (T=16 vs T=128: within 5%).
- duration, text_encoder and f0n built by every method at a bucket, fed an utterance of length L
  padded into it: the valid outputs against unpatched Kokoro run at exactly L (no padding),
  max abs error <= 1e-4 of the output's scale.
Tiny shapes throughout (tests/data/tiny.yaml's random model, bucket 8).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
import yaml
from torch import nn

from kokoro_tvm.assets.model_config import kokoro_config
from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.lstm import LSTM_METHODS, VEC_KERNEL_PREFIX
from kokoro_tvm.compile.relax import import_program, import_programs, ir_lines
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.components import crop
from kokoro_tvm.measure.metrics import tight_metrics
from kokoro_tvm.measure.validate import run_library
from kokoro_tvm.model.components import COMPONENTS, export_component, run_exact_length
from kokoro_tvm.model.kmodel import build_kmodel
from kokoro_tvm.model.packed_lstm import run_lstm
from kokoro_tvm.model.patches import PATCHES, patched
from kokoro_tvm.runtime.library import Library, Weights

TINY = Path(__file__).resolve().parent / "data" / "tiny.yaml"
TARGET = {"kind": "llvm", "mcpu": "host", "num-cores": 2}
METHODS = sorted(LSTM_METHODS)
LSTM_COMPONENTS = sorted(n for n, c in COMPONENTS.items() if c.has_lstm)
BUCKET = 8

pytestmark = pytest.mark.filterwarnings("ignore")


class OneLstm(nn.Module):
    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.lstm = lstm

    def forward(self, x, lengths):
        return run_lstm(self.lstm, x, lengths)


def _lstm(inputs: int, hidden: int) -> nn.LSTM:
    torch.manual_seed(0)
    return nn.LSTM(inputs, hidden, 1, batch_first=True, bidirectional=True).eval()


def _op_program(lstm: nn.LSTM, batch: int, steps: int) -> torch.export.ExportedProgram:
    x = torch.randn(batch, steps, lstm.input_size)
    return torch.export.export(OneLstm(lstm), (x, torch.full((batch,), steps)), strict=False)


def torch_packed(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """What the op must equal: nn.LSTM over pack_padded_sequence, padded back to T with zeros."""
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                               enforce_sorted=False)
    with torch.no_grad():
        out, _ = lstm(packed)
    return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]


@pytest.fixture(scope="module")
def target():
    return make_target(TARGET)


def _library(mod: tvm.IRModule, target, path: Path, params) -> Library:
    build_library(lower(mod, target), target, path)
    return Library(path, Weights(params))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("inputs, hidden", [(6, 5), (24, 64)])  # odd sizes; several gate chunks
def test_op_matches_torch_packed_lstm(method, inputs, hidden, target, tmp_path):
    batch, steps = 3, 8
    lstm = _lstm(inputs, hidden)
    func, params, callees = import_program(_op_program(lstm, batch, steps), method)
    mod = tvm.IRModule()
    mod["main"] = func
    for gvar, body in callees.items():
        mod[gvar] = body
    library = _library(mod, target, tmp_path / f"{method}.so", params)
    names = [p.name for p in func.params[:2]]
    x = torch.randn(batch, steps, inputs)
    for lengths in ([1, steps, 5], [steps, steps, steps], [2, 1, steps - 1]):
        lengths = torch.tensor(lengths)
        out = library("main", dict(zip(names, (x.numpy(), lengths.numpy()))))
        expected = torch_packed(lstm, x, lengths).numpy()
        np.testing.assert_allclose(out[0], expected, rtol=0, atol=1e-5,
                                   err_msg=f"{method}, lengths {lengths.tolist()}")


@pytest.mark.parametrize("method", ["tir", "tir_vec"])
def test_tir_ir_size_does_not_depend_on_bucket(method):
    lstm = _lstm(40, 16)
    small, large = (ir_lines(import_programs({"main": _op_program(lstm, 1, steps)}, method)[0])
                    for steps in (16, 128))
    assert abs(large - small) <= 0.05 * small, (small, large)


def test_unroll_ir_grows_with_the_bucket():
    """The contrast to the TIR methods (and proof that the line count sees the bucket)."""
    lstm = _lstm(40, 16)
    small, large = (ir_lines(import_programs({"main": _op_program(lstm, 1, steps)}, "unroll")[0])
                    for steps in (16, 64))
    assert large > 3 * small, (small, large)


def test_cuda_lowering_swaps_in_the_gpu_recurrence():
    """For cuda, tir_vec's CPU recurrence becomes the GPU kernel (same name and signature): a
    block per direction, a thread per hidden unit, marked scheduled so dlight leaves it alone.
    (Running it needs a GPU: tools/gpu_check validates the cuda libraries there.)"""
    mod, _ = import_programs({"main": _op_program(_lstm(6, 32), 2, 8)}, "tir_vec")
    cpu = {gv.name_hint: f for gv, f in mod.functions_items() if gv.name_hint.startswith(
        VEC_KERNEL_PREFIX)}
    assert len(cpu) == 1
    lowered = lower(mod, make_target({"kind": "cuda", "arch": "sm_90"}))
    (name, kernel), = ((gv.name_hint, f) for gv, f in lowered.functions_items()
                       if gv.name_hint in cpu)
    script = kernel.script()
    assert kernel.attrs["tirx.is_scheduled"]
    assert 'T.thread_binding(2, thread="blockIdx.x")' in script
    assert 'T.thread_binding(32, thread="threadIdx.x")' in script
    shapes = [[[int(d) for d in p.ty.shape] for p in f.params] for f in (kernel, cpu[name])]
    assert shapes[0] == shapes[1]


def test_lstm_method_none_rejects_packed_lstm():
    with pytest.raises(ValueError, match="lstm method 'none'"):
        import_programs({"main": _op_program(_lstm(4, 3), 1, 4)}, "none")


def test_packed_lstm_patch_restores_lstm_forward():
    before = nn.LSTM.forward
    with patched(("packed_lstm",)):
        assert nn.LSTM.forward is not before
    assert nn.LSTM.forward is before and "packed_lstm" in PATCHES


# ----------------------------------------------------------------------------------------------
# Components: padded into a bucket vs Kokoro at exactly the utterance's length.
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kmodel():
    config = kokoro_config(yaml.safe_load(TINY.read_text())["weights"]["random_model"])
    torch.manual_seed(0)
    return build_kmodel(config, disable_complex=True).eval()


@pytest.fixture(scope="module")
def programs(kmodel):
    return {name: export_component(kmodel, name, BUCKET) for name in LSTM_COMPONENTS}


def _with_length(name: str, inputs: dict[str, torch.Tensor], length: int):
    mask_name = COMPONENTS[name].mask_input
    mask = torch.arange(inputs[mask_name].shape[-1])[None, :] >= length
    return dict(inputs, **{mask_name: mask})


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", LSTM_COMPONENTS)
def test_component_valid_outputs_equal_kokoro_at_exact_length(name, method, kmodel, programs,
                                                             target, tmp_path):
    mod, params = import_programs(programs[name], method)
    so_path, params_npz = tmp_path / "lib.so", tmp_path / "params.npz"
    build_library(lower(mod, target), target, so_path)
    np.savez(params_npz, **params)
    component = COMPONENTS[name]
    fn = component.functions[0]
    inputs = component.example_inputs(kmodel, BUCKET, 1)
    # Frames start at 3, the fewest an utterance has (0, a phoneme, 0; each at least a frame):
    # Kokoro's InstanceNorm refuses one frame, and over two it is so ill-conditioned that
    # rounding alone moves PyTorch by 4e-5 of the scale (masked vs Kokoro's own code).
    for length in (1 if component.axis == "tokens" else 3, 5, BUCKET):
        padded = _with_length(name, inputs, length)
        outs = run_library(so_path, params_npz, fn.name,
                           {k: padded[k].numpy() for k in fn.inputs})
        valid = crop(name, dict(zip(fn.outputs, outs)), length)
        for out_name, expected in run_exact_length(kmodel, name, padded).items():
            metrics = tight_metrics(valid[out_name], expected.numpy(), 1e-4)
            assert metrics["relative_error"]["passed"], (name, method, length, out_name, metrics)
