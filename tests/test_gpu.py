"""The cuda target without a GPU: lowering that is right on CUDA (checked in the kernels' CUDA
source), the op probes of the GPU check, the runtime's device handling, and the whole GPU check
run on this machine's CPU with an llvm bundle of the tiny build (only the CUDA device differs on
the GPU machine)."""
from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
import tvm
import yaml
from conftest import REPO, TINY_BUCKET, model_folder, needs_nvcc
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from tvm.relax.frontend.torch import from_exported_program

from kokoro_tvm.compile import gpu
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.components import COMPONENTS
from kokoro_tvm.runtime import cuda
from kokoro_tvm.runtime.devices import device

sys.path.insert(0, str(REPO / "tools" / "gpu_check"))
import probes  # noqa: E402
import sources  # noqa: E402

CUDA = {"kind": "cuda", "arch": "sm_90"}


class GeluNew(torch.nn.Module):
    """ALBERT's gelu_new: x ** 3 written with torch.pow, as in the model."""

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))


class Snake(torch.nn.Module):
    """The decoder's Snake activation (a squared sine) and a sine of large phases."""

    def forward(self, x):
        return x + torch.pow(torch.sin(3.0 * x), 2), torch.sin(1e4 * x), torch.cos(x)


def _cuda_source(module: torch.nn.Module) -> str:
    program = torch.export.export(module, (torch.randn(4, 64),))
    target = make_target(CUDA)
    return "\n".join(gpu.cuda_sources(lower(from_exported_program(program), target), target))


def _math_calls(source: str) -> set[str]:
    return set(re.findall(r"\b(__\w+f|powf?|sinf?|cosf?|__sinf|__cosf|__powf)\s*\(", source))


@needs_nvcc
def test_whole_powers_are_products_on_cuda():
    """A float pow of a negative base is NaN on CUDA: x ** 3 must be x * x * x there."""
    source = _cuda_source(GeluNew())
    assert "__global__" in source
    assert not {"pow", "powf", "__powf"} & _math_calls(source), _math_calls(source)


@needs_nvcc
def test_sines_reduce_their_argument_in_float64_on_cuda():
    """No single-precision sin/cos call (inaccurate for the sine generator's large phases):
    the argument's quadrant is found in double (a rounded double quotient by pi/2), never in
    float."""
    source = _cuda_source(Snake())
    calls = _math_calls(source)
    assert not {"sin", "sinf", "cos", "cosf", "__sinf", "__cosf", "pow", "powf"} & calls, calls
    assert re.search(r"nearbyint\(\(*\(double\)", source)
    assert "nearbyintf" not in source and "rintf" not in source


@needs_nvcc
def test_cuda_kernels_compile_without_fast_math(monkeypatch):
    """TVM compiles with --use_fast_math unless told otherwise; we tell it, and our own nvcc
    call (kernels compiled when a library loads) never passes it."""
    monkeypatch.delenv("TVM_CUDA_NVCC_NO_FAST_MATH", raising=False)
    with gpu.nvcc_compile():
        import os

        assert os.environ["TVM_CUDA_NVCC_NO_FAST_MATH"] == "1"
        assert os.environ["TVM_CUDA_COMPILE_MODE"] == "nvcc"
    assert "TVM_CUDA_NVCC_NO_FAST_MATH" not in os.environ
    assert not any("fast" in flag for flag in cuda.NVCC_FLAGS)


@needs_nvcc
def test_kernels_compile_with_nvcc():
    """The GELU's CUDA source compiles with our nvcc flags (a fatbin with sm_90 code)."""
    fatbin = cuda.compile_fatbin(_cuda_source(GeluNew()), "sm_90")
    assert fatbin[:4] == (0xBA55ED50).to_bytes(4, "little")


def _conv_module(kind: str, c_in: int, c_out: int, kernel: int, length: int, stride: int = 1,
                 dilation: int = 1, padding: int = 0) -> tvm.IRModule:
    sys.path.insert(0, str(REPO / "tools" / "gpu_check"))
    import conv_tiles

    return conv_tiles.module(("probe", kind, c_in, c_out, kernel, stride, dilation, padding,
                              length))


def _multiply_adds(mod: tvm.IRModule) -> int:
    """Multiply-adds of every reduction block of the cuda pipeline's fused kernels."""
    from tvm import s_tir

    from kokoro_tvm.compile.lower import passes
    from kokoro_tvm.compile.schedules.common import root_blocks

    target = make_target(CUDA)
    with target:
        fused = tvm.transform.Sequential(passes(target, until="FuseTIR"))(mod)
    total = 0
    for _, func in fused.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            sch = s_tir.Schedule(func)
            for block in map(sch.get, root_blocks(sch)):
                if any(iv.iter_type == iv.CommReduce for iv in block.iter_vars):
                    size = 1
                    for iv in block.iter_vars:
                        size *= int(iv.dom.extent)
                    total += size
    return total


def test_conv_transpose_is_polyphase_on_cuda():
    """TVM's conv_transpose1d zero-stuffs its input (stride times the arithmetic; 13 ms for the
    decoder's first upsampling on an H100, against 1 ms polyphase): on cuda every multiply-add
    is one of the transposed convolution's own (taps rounded up to whole phases)."""
    c_in, c_out, kernel, stride, length = 16, 8, 20, 10, 64
    useful = c_in * c_out * kernel * length
    assert _multiply_adds(_conv_module("conv1d_transpose", c_in, c_out, kernel, length,
                                       stride=stride, padding=5)) == useful


def _contraction_script(mod: tvm.IRModule) -> str:
    lowered = lower(mod, make_target(CUDA))
    return "\n".join(f.script() for _, f in lowered.functions_items()
                     if isinstance(f, tvm.tirx.PrimFunc) and "contraction" in f.script())


def test_conv1d_stages_whole_tiles_in_shared_memory_on_cuda():
    """The conv1d kernel stages input and weight tiles in shared memory, its contraction loop
    carries no tail predicate (time is padded to whole tiles: a predicate there made the
    decoder's longest convolutions 4x slower on an H100), and only the write-back is guarded."""
    from kokoro_tvm.compile.gpu.contraction import DEFAULT_TILE

    length = 3 * DEFAULT_TILE.cols + 1  # not a whole number of tiles
    script = _contraction_script(_conv_module("conv1d", 32, 64, 7, length, dilation=3,
                                              padding=9))
    assert script.count('scope="shared"') == 2, script
    update = script[script.index('T.sblock("conv1d_update")'):]
    update = update[:update.index("T.reads")]
    assert "T.where" not in update, update
    crop = script[script.index('T.sblock("crop")'):]
    assert "T.where" in crop[:crop.index("T.reads")]


@needs_nvcc
def test_conv1d_tiles_fit_shared_memory_on_cuda():
    """A wide, long-kernel convolution (the full tile of 8 input channels would stage 70 KB)
    stages fewer channels per step, within the 48 KiB of shared memory a thread block has
    without opting in."""
    target = make_target(CUDA)
    mod = _conv_module("conv1d", 512, 512, 31, 300, padding=15)
    source = "\n".join(gpu.cuda_sources(lower(mod, target), target))
    staged = [int(n) for n in re.findall(r"__shared__ [^\[]*\[(\d+)\]", source)]
    assert staged and 4 * sum(staged) <= 48 * 1024, staged


def test_cuda_libraries_replay_cuda_graphs():
    """On cuda the kernels of a library call between those that read its inputs and write its
    outputs are replayed as captured CUDA graphs (calls are launch-bound at these sizes); llvm
    libraries have none."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((1, 8, 64), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv1d(x, w, padding=1))
            y = bb.emit(relax.op.nn.conv1d(y, w, padding=1))  # reads and writes internal storage
            y = bb.emit_output(relax.op.nn.conv1d(y, w, padding=1))
        bb.emit_func_output(y)
    mod = bb.get()
    for options, expected in ((CUDA, True), ({"kind": "llvm"}, False)):
        script = lower(mod, make_target(options)).script()
        assert ("vm.builtin.cuda_graph.run_or_capture" in script) is expected


def _relax_modules(root: Path) -> list[tvm.IRModule]:
    """The tiny build's Relax modules at its bucket."""
    from kokoro_tvm.compile.specialize import specialize

    return [specialize(tvm.ir.load_json(p.read_text()), TINY_BUCKET)
            for p in sorted((root / "results/relax").rglob("*.json"))]


@needs_nvcc
def test_op_probes_cover_every_op_kind_and_build_for_cuda(built):
    """The GPU check probes every Relax op kind the five components call, each alone with the
    call's shapes, built for cuda and for the CPU that it is compared with."""
    modules = _relax_modules(built)
    kinds = set().union(*(probes.op_kinds(m) for m in modules)) - set(probes.NOT_PROBED)
    mod = probes.probe_module(modules)
    probed = {g.name_hint for g in mod.get_global_vars()}
    assert probed == {"op_" + k.removeprefix("relax.").replace(".", "_") for k in kinds}
    assert {"op_power", "op_sin", "op_cos", "op_nn_conv1d", "op_matmul"} <= probed
    target = make_target(CUDA)
    lowered = lower(mod, target)
    power = [s for s in gpu.cuda_sources(lowered, target)]
    assert power and not {"pow", "powf", "__powf"} & _math_calls("\n".join(power))
    lower(mod, make_target(probes.CPU_OPTIONS))
    assert set(probes.signatures(mod)) == probed


class _NoDevice:
    exist = False


def _no_driver(*_):
    raise RuntimeError("CUDA: driver not found")


@pytest.mark.parametrize("tvm_cuda, message", [
    (lambda *_: _NoDevice(), "TVM sees no CUDA device here; use the llvm target's libraries"),
    (_no_driver, "driver not found"),
], ids=["no device", "no driver"])
def test_runtime_without_a_gpu_says_so(monkeypatch, tvm_cuda, message):
    """cuda libraries on a machine without a GPU (simulated: TVM's CUDA device is absent, or
    asking for it fails, so this runs on a GPU machine too): one clear error naming the
    problem; cpu libraries still get the CPU."""
    monkeypatch.setattr(tvm, "cuda", tvm_cuda)
    monkeypatch.setattr(cuda, "_load_cuda_runtime", lambda: None)
    with pytest.raises(cuda.CudaError, match=f"NVIDIA GPU and its driver: .*{message}"):
        device("cuda")
    assert device("cpu") == tvm.cpu(0)


@needs_nvcc
def test_a_cuda_folder_built_without_a_gpu_needs_one(other_built):
    """The build's own cuda libraries were never run on a GPU: the folder carries them marked
    unvalidated (the GPU check validates them), and a machine without a GPU refuses it in one
    line."""
    from kokoro_tvm.runtime.engine import TvmEngine

    folder = model_folder(other_built, "cuda")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert len(manifest["libraries"]) == 5
    assert not any(entry["validated"] for entry in manifest["libraries"])
    if gpu.cuda_available():
        pytest.skip("this machine has a CUDA device: the folder runs here")
    with pytest.raises(cuda.CudaError, match="cuda libraries need an NVIDIA GPU and its driver"):
        TvmEngine(folder)


# What the GPU machine's Python has that the GPU check uses, besides the standard library: its
# image holds PyTorch, numpy, transformers, huggingface_hub and attrs (which KModel's modules
# import), and neither kokoro, TVM, loguru nor any G2P; the bundle brings those it needs.
GPU_MACHINE = {"torch", "numpy", "transformers", "huggingface_hub", "attrs"}


def _with_requirements(distributions: set[str]) -> set[str]:
    """``distributions`` and everything they require (their extras aside), by name."""
    found, todo = set(), list(distributions)
    while todo:
        name = canonicalize_name(todo.pop())
        if name not in found:
            found.add(name)
            with contextlib.suppress(metadata.PackageNotFoundError):
                todo += [r.name for r in map(Requirement, metadata.requires(name) or [])
                         if r.marker is None or r.marker.evaluate({"extra": ""})]
    return found


def gpu_machine_python(site: Path) -> list[str]:
    """A command that runs this venv's Python as the GPU machine's: its site-packages hold only
    GPU_MACHINE's distributions and what they require, linked into ``site``."""
    site.mkdir()
    for name in _with_requirements(GPU_MACHINE):
        with contextlib.suppress(metadata.PackageNotFoundError):
            dist = metadata.distribution(name)
            for top in {Path(f).parts[0] for f in dist.files or ()} - {"..", "bin"}:
                source = Path(dist.locate_file(top))
                if source.exists() and not (site / top).exists():
                    (site / top).symlink_to(source)
    return ["env", f"PYTHONPATH={site}", sys.executable, "-S"]  # -S: not this venv's site


def test_gpu_check_builds_the_largest_default_buckets():
    """The GPU check's buckets (set by hand in its config) are config.yaml's, its largest and,
    for tokens, its smallest: a change of the default buckets must be carried over."""
    default = yaml.safe_load((REPO / "config.yaml").read_text())["buckets"]
    checked = yaml.safe_load((REPO / "tools/gpu_check/config.yaml").read_text())["buckets"]
    assert set(checked) == set(COMPONENTS)
    for name, buckets in checked.items():
        assert set(buckets) <= set(default[name]), name
        assert max(buckets) == max(default[name]), name
        if COMPONENTS[name].axis == "tokens":
            assert min(buckets) == min(default[name]), name


@needs_nvcc
def test_align_is_a_thread_per_value_on_cuda():
    """The decoder's align in its GPU form: the CUDA source gathers with a thread per output
    value, reading the token count from the call (the token bucket is not fixed)."""
    from tvm import relax

    from kokoro_tvm.abi import ALIGN_FUNCTION
    from kokoro_tvm.compile.alignment import add_align_function

    bb = relax.BlockBuilder()
    asr = relax.Var("asr", relax.TensorType((1, 512, 64), "float32"))
    with bb.function("body", [asr], {"num_input": 1}):
        bb.emit_func_output(relax.op.sum(asr))
    target = make_target(CUDA)
    lowered = lower(add_align_function(bb.get(), target), target)
    assert ALIGN_FUNCTION in {gvar.name_hint for gvar in lowered.get_global_vars()}
    source = "\n".join(gpu.cuda_sources(lowered, target))
    kernel = source[source.index("align_frames"):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert "blockIdx.x" in kernel and "threadIdx.x" in kernel
    assert "tokens" in kernel  # the symbolic token count, passed in


def test_the_gpu_machines_python_has_only_what_that_machine_has(tmp_path):
    python = gpu_machine_python(tmp_path / "site")
    for module, present in (("torch", True), ("numpy", True), ("transformers", True),
                            ("tvm", False), ("tvm_ffi", False), ("kokoro", False),
                            ("kokoro_tvm", False), ("misaki", False), ("loguru", False),
                            ("wgpu", False), ("spacy", False)):
        done = subprocess.run([*python, "-c", f"import {module}"], capture_output=True,
                              text=True, cwd="/")
        assert (done.returncode == 0) == present, (module, done.stderr[-300:])


def test_gpu_check_runs_end_to_end_on_the_cpu(other_built, tmp_path):
    """The GPU check's own code (bundle, validation through validate_component, timings, the
    runtime's engine end to end, op probes, the webgpu libraries through the bundle's wgpu) on
    an llvm bundle of the tiny build, with the bundle's runtime-only TVM: what the GPU machine
    runs, but for the device (WebGPU on lavapipe here), and with only what that machine has
    besides the bundle and this repository (gpu_machine_python)."""
    bundle = tmp_path / "bundle"
    subprocess.run([sys.executable, str(REPO / "tools/gpu_check/prepare.py"), "--root",
                    str(other_built), "--target", "llvm", "--out", str(bundle),
                    "--other-pythons", ""], check=True, capture_output=True, text=True)
    document = json.loads((bundle / "cases.json").read_text())
    assert {c["component"] for c in document["cases"]} == {"bert", "duration", "text_encoder",
                                                           "f0n", "decoder"}
    assert not list((bundle / "python" / "kokoro").glob("pipeline.py"))
    check = [*gpu_machine_python(tmp_path / "site"), str(REPO / "tools/gpu_check/check.py"),
             "--bundle", str(bundle), "--repeat", "2", "--out"]
    # Stopped after its first library, as the GPU machine's time limit would stop it: the
    # figures so far are in --out.
    stopped = tmp_path / "stopped.json"
    with subprocess.Popen([*check, str(stopped)], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, cwd=tmp_path) as run:
        for line in run.stdout:
            if re.match(r"\S+ +(PASS|FAIL) ", line):
                run.kill()
                break
    partial = json.loads(stopped.read_text())
    assert partial["complete"] is False and len(partial["libraries"]) == 1
    result = tmp_path / "result.json"
    done = subprocess.run([*check, str(result)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(result.read_text())
    assert summary["passed"] is True and summary["complete"] is True
    assert summary["stale_sources"] == []
    assert len(summary["libraries"]) == 5 and all(r["passed"] for r in summary["libraries"])
    assert all(r["worst_relative_error"] <= 1e-4 for r in summary["libraries"])
    assert all(r["tvm_round_trip_ms"] > 0 for r in summary["libraries"])
    assert len(summary["end_to_end"]) == 3
    assert all(r["durations_equal"] for r in summary["end_to_end"])
    for row in summary["end_to_end"]:  # per stage, side by side, with the engine's copies
        stages = row["stages"]
        assert set(stages) == {"text", "f0n", "noise", "decoder", "other"}
        assert all(stages[s]["tvm_ms"] > 0 and stages[s]["torch_ms"] > 0
                   for s in ("text", "f0n", "decoder"))
        # What crosses: token ids, masks, style, each frame's token and the noise's key (or
        # numpy's draws, as here on the CPU) to the device; the durations and the audio back.
        # The token side's features, F0 and N stay where the libraries run.
        copies = {s: stages[s]["copies"] for s in ("text", "f0n", "noise", "decoder")}
        assert [copies[s]["to_host"] for s in copies] == [1, 0, 0, 1]
        assert [copies[s]["to_device"] for s in copies] == [5, 2, 0, 4]
    assert all(r["interleaved_snr_db"] >= 60 for r in summary["end_to_end"])
    batch = summary["throughput"]
    assert batch["utterances"] == 9 and batch["audio_s"] > 0
    assert batch["tvm_audio_per_second"] > 0 and batch["torch_audio_per_second"] > 0
    assert {p["op"] for p in summary["probes"]} == set(document["probes"])
    # Part 5: the webgpu libraries at the same buckets, beside the llvm ones.
    assert [c["stem"] for c in document["webgpu"]] == [c["stem"] for c in document["cases"]]
    assert summary["webgpu_adapter"].startswith("WebGPU on ")
    assert len(summary["webgpu"]) == 5 and all(r["passed"] for r in summary["webgpu"])
    assert all(r["webgpu_ms"] > 0 and r["tvm_ms"] > 0 for r in summary["webgpu"])


def test_the_bundles_runtime_loads_on_a_python_it_carries_only_a_wheel_for(tmp_path):
    """The GPU machine's Python (3.12) is not the one that prepares the bundle, so its tvm_ffi
    core is not in the bundle's site: check.py's setup_runtime takes tvm_ffi from the bundle's
    wheel for that version instead. Here that Python's core is left out of a bundle's runtime
    and its wheel downloaded as prepare.py downloads the others; a library then runs."""
    import prepare

    from kokoro_tvm.compile.build import build_library

    bundle, version = tmp_path / "bundle", f"{sys.version_info.major}.{sys.version_info.minor}"
    prepare.copy_runtime(bundle, [version])
    cores = list((bundle / "runtime/site/tvm_ffi").glob("core.*.so"))
    assert cores, "the bundle's site has no tvm_ffi core to leave out"
    for core in cores:
        core.unlink()
    assert list((bundle / "runtime/wheels").glob("apache_tvm_ffi-*.whl")), (
        f"pip could not download apache-tvm-ffi for Python {version} (PyPI is needed)")
    target = make_target({"kind": "llvm"})
    program = torch.export.export(torch.nn.Sigmoid(), (torch.zeros(4),))
    build_library(lower(from_exported_program(program), target), target, tmp_path / "sig.so")
    script = f"""
import sys
sys.path.insert(0, {str(REPO / "tools/gpu_check")!r})
from pathlib import Path
import check
check.setup_runtime(Path({str(bundle)!r}))
import numpy as np, tvm, tvm_ffi
from tvm.runtime.vm import VirtualMachine
vm = VirtualMachine(tvm.runtime.load_module({str(tmp_path / "sig.so")!r}), tvm.cpu())
x = np.array([-2.0, 0.0, 1.0, 3.0], np.float32)
out = vm["main"](tvm.runtime.tensor(x))
out = (out[0] if isinstance(out, tvm_ffi.Array) else out).numpy()
print(tvm_ffi.__file__, tvm.__file__)
print(float(np.abs(out - 1 / (1 + np.exp(-x))).max()))
"""
    done = subprocess.run([*gpu_machine_python(tmp_path / "site"), "-c", script],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (ffi_file, tvm_file), error = done.stdout.split("\n")[-3].split(), done.stdout.split("\n")[-2]
    assert not ffi_file.startswith(str(bundle)), ffi_file  # the wheel's, not the site's
    assert tvm_file.startswith(str(bundle / "runtime/site")), tvm_file
    assert float(error) <= 1e-6, error


def test_gpu_check_refuses_a_bundle_prepared_from_other_code(tmp_path):
    """check.py compares the bundle's recorded sources with the tree it runs in before any GPU
    work, in the GPU machine's Python; ``--verify`` does only that. An edited, added or removed
    file is named."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    recorded = sources.digests(REPO)
    assert "kokoro_tvm/compile/gpu/lstm.py" in recorded and "tools/gpu_check/check.py" in recorded
    python = gpu_machine_python(tmp_path / "site")

    def verify(record: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
        (bundle / "cases.json").write_text(json.dumps({"sources": record}))
        return subprocess.run([*python, str(REPO / "tools/gpu_check/check.py"), "--bundle",
                               str(bundle), "--verify", *flags],
                              capture_output=True, text=True, cwd=tmp_path)

    done = verify(recorded)
    assert done.returncode == 0 and "prepared from this tree" in done.stdout, done.stderr
    edited = {**recorded, "kokoro_tvm/compile/gpu/lstm.py": "0" * 64}
    added = {k: v for k, v in recorded.items() if k != "kokoro_tvm/runtime/cuda.py"}
    removed = {**recorded, "kokoro_tvm/compile/gone.py": "0" * 64}
    for record, name in ((edited, "kokoro_tvm/compile/gpu/lstm.py"),
                         (added, "kokoro_tvm/runtime/cuda.py"),
                         (removed, "kokoro_tvm/compile/gone.py")):
        done = verify(record)
        assert done.returncode != 0
        assert f"(differing: {name})" in done.stderr and "prepare it again" in done.stderr
    assert verify(edited, "--stale-ok").returncode == 0


@pytest.mark.parametrize("variant", ["block", "steps_u8_k32"])
def test_lstm_sweep_replays_the_recurrence_in_a_cuda_graph(variant):
    """The GPU check's LSTM sweep (tools/gpu_check/lstm_kernels.py) builds each form of the
    recurrence for cuda inside a captured CUDA graph, as in the components (f0n, duration),
    so that the kernel-per-step form is timed with its launches replayed."""
    import lstm_kernels

    lowered = lstm_kernels.lowered(("probe", 16, 256), variant, make_target(CUDA))
    callers = [gv.name_hint for gv, f in lowered.functions_items()
               if isinstance(f, tvm.relax.Function) and "packed_lstm" in f.script()]
    assert callers and all("cuda_graph_capture" in name for name in callers), callers


def _sweep_on_the_cpu(tmp_path: Path, folder: str, sweep, shape: tuple, case) -> None:
    """check.py's sweep over a bundle's ``folder`` holding one module of ``sweep``
    (lstm_kernels, conv_tiles) at ``shape``, built for this CPU with our lowering, against
    ``case``'s PyTorch computation on the CPU: within 1e-5, and timed."""
    import check

    from kokoro_tvm.compile.build import build_library

    target = make_target({"kind": "llvm"})
    (tmp_path / folder).mkdir()
    build_library(lower(sweep.module(shape), target), target, tmp_path / folder / "probe.so")
    entry = {"stem": "probe", "variant": "ours", "shape": list(shape),
             "gflop": sweep.flops(shape) / 1e9}
    (row,) = check.sweep(tmp_path, {"seed": 0, folder: [entry]}, folder, case, 2, 1e-5,
                         device="cpu")
    assert row["passed"] and row["relative_error"] <= 1e-5, row
    assert row["tvm_ms"] > 0 and row["torch_ms"] > 0


def test_lstm_sweep_runs_against_its_reference_on_the_cpu(tmp_path):
    """check.py's sweep over a bundle's lstm/ folder, here with the sweep's module built for
    this CPU (tir_vec's own kernel) and PyTorch's LSTM on the CPU as reference (identity input
    weights, packed): the reference every GPU form is compared with there agrees with a kernel
    known to be right, zeros past the valid length included, so a wrong reference cannot pass
    for a wrong kernel on the GPU."""
    import check
    import lstm_kernels

    shape = ("probe", 20, 32)
    _sweep_on_the_cpu(tmp_path, "lstm", lstm_kernels, shape, check.lstm_case)
    inputs, reference = check.lstm_case(list(shape), 0, "cpu")
    valid = int(inputs[2][0])
    assert valid < shape[1] and not reference()[:, valid:].any()


# (name, kind, in channels, out channels, kernel, stride, dilation, padding, length)
@pytest.mark.parametrize("shape", [("probe", "conv1d", 24, 16, 7, 1, 3, 9, 96),
                                   ("probe", "conv1d_transpose", 24, 16, 20, 10, 1, 5, 96)])
def test_conv_sweep_runs_against_its_reference_on_the_cpu(tmp_path, shape):
    """check.py's sweep over a bundle's tiles/ folder, with a convolution of conv_tiles' form
    built for this CPU and PyTorch's on the CPU as reference: the reference the tiles are
    compared with on the GPU (weight layouts, padding, the transposed form's output length)
    agrees with a convolution known to be right."""
    import check
    import conv_tiles

    _sweep_on_the_cpu(tmp_path, "tiles", conv_tiles, shape, check.conv_case)


def test_the_check_chooses_the_fastest_variant_that_passes_everywhere():
    """A sweep's choice (DEFAULT_KERNEL, the conv tile): a faster variant that fails at one
    shape, or was not run there, is not chosen; with none passing everywhere, none is."""
    import check

    def row(shape, variant, ms, passed=True):
        return {"shape": shape, "variant": variant, "tvm_ms": ms, "passed": passed}

    rows = [row("short", "block", 2.0), row("long", "block", 9.0),
            row("short", "steps_a", 1.0), row("long", "steps_a", 7.0),
            row("short", "steps_b", 0.5), row("long", "steps_b", 1.0, passed=False),
            row("short", "steps_c", 0.1), row("short", "steps_d", 0.8), row("long", "steps_d", 8.0)]
    choice = check.fastest(rows)
    assert choice["variant"] == "steps_a"  # least in sum, though steps_d is faster at "short"
    assert choice["tvm_ms"] == {"short": 1.0, "long": 7.0}
    assert choice["against_best"] == {"long": 1.0, "short": 1.25}
    rows.append({"shape": "long", "variant": "steps_c", "passed": False,
                 "exception": "CUDA error"})
    assert check.fastest(rows)["variant"] == "steps_a"
    assert check.fastest([row("short", "block", 2.0, passed=False)])["variant"] is None
