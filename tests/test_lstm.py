"""LSTM lowering methods (kokoro_tvm/compile/lstm.py) and the packed_lstm op they lower.

- The op alone, built by every method, against torch's nn.LSTM over pack_padded_sequence (both
  directions, lengths 1..T in one padded batch; hidden 5, scalar lanes, and 64, where tir_vec
  runs two register chunks of gates and vector cell updates): max abs error <= 1e-5.
- The IR of the TIR methods does not grow with the bucket (T=16 vs T=128: within 5%).
- duration, text_encoder and f0n built by every method at a bucket, and bert (no LSTM), fed an
  utterance of length L padded into it: the valid outputs against unpatched Kokoro run at
  exactly L (no padding), max abs error <= 1e-4 of the output's scale.
Tiny shapes throughout (tests/data/tiny.yaml's random model, bucket 8).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from conftest import with_length
from torch import nn
from tvm.tirx.buffer import is_buffer_var

from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.gpu.lstm import (
    StepKernels,
    recurrence_kernel_gpu,
    recurrence_kernel_gpu_steps,
)
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.lstm import (
    LSTM_METHODS,
    VEC_KERNEL_PREFIX,
    recurrence_kernel,
    recurrence_kernel_vec,
)
from kokoro_tvm.compile.relax import import_program, import_programs, ir_lines
from kokoro_tvm.compile.specialize import specialize
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.components import crop
from kokoro_tvm.measure.metrics import tight_metrics
from kokoro_tvm.measure.validate import run_library
from kokoro_tvm.model.components import TORCH_COMPONENTS, export_component, run_exact_length
from kokoro_tvm.model.packed_lstm import run_lstm
from kokoro_tvm.model.patches import PATCHES, patched
from kokoro_tvm.runtime.library import Library, Weights

TARGET = {"kind": "llvm", "mcpu": "host", "num-cores": 2}
METHODS = sorted(LSTM_METHODS)
LSTM_COMPONENTS = sorted(n for n, c in TORCH_COMPONENTS.items() if c.has_lstm)
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
    return torch.export.export(OneLstm(lstm), (x, torch.full((batch,), steps)),
                               strict=False).run_decompositions()


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
    build_library(lower(specialize(mod, 0), target), target, path)  # static: nothing to bind
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
    small, large = (ir_lines(specialize(import_programs(
        {"main": _op_program(lstm, 1, steps)}, method)[0], steps)) for steps in (16, 128))
    assert abs(large - small) <= 0.05 * small, (small, large)


def test_unroll_ir_grows_with_the_bucket():
    """The contrast to the TIR methods (and proof that the line count sees the bucket)."""
    lstm = _lstm(40, 16)
    small, large = (ir_lines(specialize(import_programs(
        {"main": _op_program(lstm, 1, steps)}, "unroll")[0], steps)) for steps in (16, 64))
    assert large > 3 * small, (small, large)


def test_cuda_lowering_swaps_in_the_gpu_recurrence():
    """For cuda, tir_vec's CPU recurrence becomes the GPU kernel (same name and signature): a
    block per direction, a thread per hidden unit, marked scheduled so dlight leaves it alone.
    (Running it needs a GPU: tools/gpu_check validates the cuda libraries there.)"""
    mod = specialize(import_programs({"main": _op_program(_lstm(6, 32), 2, 8)}, "tir_vec")[0], 8)
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

# Every LSTM component by every method, and bert (no LSTM: method none), whose padding the
# attention mask must hide.
EXACT_LENGTH_CASES = [(name, method) for name in LSTM_COMPONENTS for method in METHODS] + [
    ("bert", "none")]


@pytest.fixture(scope="module")
def programs(tiny_kmodel):
    return {name: export_component(tiny_kmodel, name)
            for name in sorted({name for name, _ in EXACT_LENGTH_CASES})}


@pytest.mark.parametrize("name, method", EXACT_LENGTH_CASES)
def test_component_valid_outputs_equal_kokoro_at_exact_length(name, method, tiny_kmodel,
                                                             programs, target, tmp_path):
    mod, params = import_programs(programs[name], method)
    so_path, params_npz = tmp_path / "lib.so", tmp_path / "params.npz"
    build_library(lower(specialize(mod, BUCKET), target), target, so_path)
    np.savez(params_npz, **params)
    component = TORCH_COMPONENTS[name]
    fn = component.functions[0]
    inputs = component.example_inputs(tiny_kmodel, BUCKET, 1)
    # Frames start at 3, the fewest an utterance has (0, a phoneme, 0; each at least a frame):
    # Kokoro's InstanceNorm refuses one frame, and over two it is so ill-conditioned that
    # rounding alone moves PyTorch by 4e-5 of the scale (masked vs Kokoro's own code).
    for length in (1 if component.axis == "tokens" else 3, 5, BUCKET):
        padded = with_length(name, inputs, length)
        outs = run_library(so_path, params_npz, fn.name,
                           {k: padded[k].numpy() for k in fn.inputs})
        valid = crop(name, dict(zip(fn.outputs, outs)), length)
        for out_name, expected in run_exact_length(tiny_kmodel, name, padded).items():
            metrics = tight_metrics(valid[out_name], expected.numpy(), 1e-4)
            assert metrics["relative_error"]["passed"], (name, method, length, out_name, metrics)


def on_the_cpu(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """``func`` with its thread-bound loops (blocks, threads) as serial loops and its shared
    buffers in global memory: the same arithmetic, in an order a GPU may also take when the
    phases between barriers are separate thread loops, and runnable by the llvm target."""
    moved: list[tuple[tvm.ir.Var, tvm.ir.Var]] = []  # (shared buffer, its global twin)

    def buffer(var, _mutator):
        if not is_buffer_var(var) or var.ty.storage_scope != "shared":
            return var
        for shared, twin in moved:
            if shared.same_as(var):
                return twin
        moved.append((var, tvm.tirx.decl_buffer(var.ty.shape, var.ty.dtype, var.name,
                                                scope="global")))
        return moved[-1][1]

    def loop(node, mutator):
        if node.kind != tvm.tirx.ForKind.THREAD_BINDING:
            return mutator.default_mutate(node)
        return tvm.tirx.For(node.loop_var, node.min, node.extent, tvm.tirx.ForKind.SERIAL,
                            mutator.mutate(node.body), None, node.annotations, node.step)

    serial = tvm_ffi.structural_mutate(func, [(tvm.tirx.Var, buffer), (tvm.tirx.For, loop)])
    assert "thread_binding" not in serial.script() and moved, "nothing left for a GPU only"
    return serial


@pytest.mark.parametrize("kernel", [StepKernels(8, 4), StepKernels(4, 16), StepKernels(64, 1)])
def test_gpu_step_kernels_arithmetic_serialised_matches_torch_packed_lstm(kernel):
    """The kernel-per-step GPU recurrence's arithmetic, its blocks and threads rewritten into
    serial loops on this CPU (``on_the_cpu``: its three phases are separate thread loops, so
    serial order is one the GPU may take), against nn.LSTM over pack_padded_sequence: both
    directions, lengths 1..T in one batch, the cell state parked in ``out`` between steps.
    What it cannot see: races and barriers on a GPU (tools/gpu_check runs the kernel there)."""
    batch, steps, inputs, hidden = 3, 9, 6, 64
    lstm = _lstm(inputs, hidden)
    x = torch.randn(batch, steps, inputs)
    weights = {name: p.detach().numpy() for name, p in lstm.named_parameters()}
    xproj = np.stack([x.numpy() @ weights[f"weight_ih_l0{sfx}"].T + weights[f"bias_ih_l0{sfx}"]
                      + weights[f"bias_hh_l0{sfx}"] for sfx in ("", "_reverse")], axis=2)
    w_hh_t = np.stack([weights[f"weight_hh_l0{sfx}"].T for sfx in ("", "_reverse")])
    func = on_the_cpu(recurrence_kernel_gpu_steps(batch, steps, hidden, kernel))
    run = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                      target="llvm")["main"]
    for lengths in ([1, steps, 5], [steps, steps, steps], [2, 1, steps - 1]):
        out = tvm.runtime.tensor(np.full((batch, steps, 2 * hidden), np.nan, np.float32))
        run(*(tvm.runtime.tensor(np.ascontiguousarray(a, np.float32)) for a in (xproj, w_hh_t)),
            tvm.runtime.tensor(np.array(lengths, np.int64)), out)
        expected = torch_packed(lstm, x, torch.tensor(lengths)).numpy()
        np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-5,
                                   err_msg=f"{kernel}, lengths {lengths}")


NOALIAS = "tirx.noalias"  # the key this TVM reads ("tir.noalias" is silently ignored)


@pytest.mark.parametrize("make", [recurrence_kernel, recurrence_kernel_vec,
                                  lambda b, s, h: on_the_cpu(recurrence_kernel_gpu_steps(
                                      b, s, h, StepKernels(8, 4)))])
def test_recurrence_buffers_do_not_alias(make):
    """The hand-written recurrences promise that their buffers do not overlap, so that the code
    generator may keep values in registers and reorder loads: LLVM's kernel takes every buffer
    as a noalias pointer."""
    func = make(1, 4, 32)
    assert func.attrs[NOALIAS]
    llvm_ir = tvm.compile(tvm.IRModule({"k": func.with_attr("global_symbol", "k")}),
                          target="llvm").mod.inspect_source("ll")
    (kernel,) = [line for line in llvm_ir.splitlines()
                 if line.startswith("define") and "@k_compute_(" in line]
    assert kernel.count("ptr noalias") == len(func.params), kernel


def test_gpu_recurrence_buffers_do_not_alias():
    """The one-launch GPU recurrence makes the same promise, and its CUDA kernel takes every
    buffer as a __restrict__ pointer."""
    from kokoro_tvm.compile import gpu

    func = recurrence_kernel_gpu(1, 4, 32)
    assert func.attrs[NOALIAS]
    target = make_target({"kind": "cuda", "arch": "sm_90"})
    (source,) = gpu.cuda_sources(tvm.IRModule({"k": func.with_attr("global_symbol", "k")}),
                                 target)
    (signature,) = re.findall(r"__global__ .*\bk_kernel\(([^)]*)\) \{", source)
    assert signature.count("* __restrict__ ") == len(func.params), signature


def test_gpu_step_kernels_refuse_shapes_they_do_not_divide():
    with pytest.raises(ValueError, match="units per block and k slices must divide"):
        recurrence_kernel_gpu_steps(1, 8, 48, StepKernels(32, 8))
    with pytest.raises(ValueError, match="at most 1024 threads"):
        recurrence_kernel_gpu_steps(1, 8, 256, StepKernels(64, 32))


def test_cuda_lowering_with_step_kernels(monkeypatch):
    """With ``StepKernels`` chosen, cuda lowering swaps in the kernel-per-step recurrence: the
    loop over steps stays on the host and launches one kernel, 2 x hidden / units_per_block
    blocks of units_per_block x k_slices threads, with barriers between its three phases."""
    from kokoro_tvm.compile import gpu
    from kokoro_tvm.compile.gpu import lstm as gpu_lstm

    monkeypatch.setattr(gpu_lstm, "DEFAULT_KERNEL", StepKernels(8, 4))
    mod, _ = import_programs({"main": _op_program(_lstm(6, 32), 2, 8)}, "tir_vec")
    target = make_target({"kind": "cuda", "arch": "sm_90"})
    lowered = lower(specialize(mod, 8), target)
    (kernel,) = (f for gv, f in lowered.functions_items()
                 if gv.name_hint.startswith(VEC_KERNEL_PREFIX))
    script = kernel.script()
    assert kernel.attrs["tirx.is_scheduled"]
    assert 'T.thread_binding(8, thread="blockIdx.x")' in script
    assert 'T.thread_binding(32, thread="threadIdx.x")' in script
    (source,) = [s for s in gpu.cuda_sources(lowered, target) if "packed_lstm" in s]
    (recurrence,) = [k for k in source.split('extern "C" __global__')[1:]
                     if "packed_lstm" in k and "{" in k]
    assert re.search(r"packed_lstm\w*\([^)]*int\w* s\b", recurrence), "the step is a parameter"
    assert recurrence.count("__syncthreads()") >= 2
