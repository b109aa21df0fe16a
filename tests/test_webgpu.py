"""The webgpu target (docs/other-targets.md, WebGPU): launch plans validated against PyTorch on
this machine's WebGPU adapter (Mesa's lavapipe here: a CPU driver, so this says nothing of a
GPU's speed), within WebGPU's default limits, and spoken beside llvm.

- Every library of the tiny build's webgpu folder was validated by the validate rule on this
  machine's adapter, its kernels within the default limits (checked again from the plan); so
  was every library of the real weights' webgpu folder at the real build's smallest buckets,
  whose `say` speaks a sentence as llvm's does (same seed, the validation's bars), as does
  the server on that folder.
- A kernel over 8 storage buffers is refused at build time in one line naming it and the limit;
  fusion keeps a wide elementwise chain within 8 where FuseOps alone would not; float32
  constants reach the WGSL exactly.
- bench_components times a webgpu library beside PyTorch; the player refuses a plan of another
  format, and a machine with no adapter is told what to install, in one line.
"""
from __future__ import annotations

import io
import json
import os
import subprocess

import httpx
import numpy as np
import pytest
import soundfile
import tvm
from conftest import (
    BIN,
    REAL_BUCKETS,
    install_lavapipe,
    model_folder,
    run_workflow,
)
from tvm import relax, te
from tvm.script import relax as R

from kokoro_tvm import paths
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.compile.webgpu import limits
from kokoro_tvm.compile.webgpu.fusion import _bindings, fuse_within
from kokoro_tvm.compile.webgpu.plan import build_plan, describe_kernel
from kokoro_tvm.facts import COMPONENT_NAMES
from kokoro_tvm.measure.bench_serve import Server
from kokoro_tvm.measure.metrics import SPECTRAL_TOLERANCES, log_mel_l1, snr_db

WEBGPU = make_target({"kind": "webgpu"})


def test_every_webgpu_library_is_validated_within_the_default_limits(other_built):
    manifest = json.loads((model_folder(other_built, "webgpu") / paths.MODEL_MANIFEST)
                          .read_text())
    assert (manifest["architecture"], manifest["system"]) == ("any", "any")
    assert sorted(e["component"] for e in manifest["libraries"]) == sorted(COMPONENT_NAMES)
    for entry in manifest["libraries"]:
        assert entry["validated"] is True and entry["device"] == "webgpu", entry
        plan = json.loads((model_folder(other_built, "webgpu") / entry["library"]).read_text())
        for name, kernel in plan["kernels"].items():
            assert describe_kernel(name, kernel["wgsl"]) == kernel  # the checks pass again
            assert len(kernel["bindings"]) <= limits.MAX_STORAGE_BUFFERS
        for function in plan["functions"].values():
            for dispatch in function["dispatches"]:
                assert max(dispatch["grid"]) <= limits.MAX_WORKGROUPS


# The real build's smallest buckets (lavapipe runs the decoder at 160 frames in about 30 s), and
# a sentence they hold.
REAL_WEBGPU_BUCKETS = {component: buckets[:1] for component, buckets in REAL_BUCKETS.items()}
REAL_SENTENCE = "Hello there."


@pytest.mark.slow
def test_the_real_webgpu_folder_validates_and_speaks_as_the_llvm_one(real_built, workflow,
                                                                     tmp_path_factory,
                                                                     tmp_path):
    """Kokoro-82M's webgpu folder at the real build's smallest buckets: every library
    validated against PyTorch by the validate rule on this machine's adapter, with the
    project's tolerances; a sentence through ``say --target webgpu`` against ``--target
    llvm``, same seed, within the bars the decoder's validation judged its audio by; and the
    server on the webgpu folder giving that audio."""
    install_lavapipe(tmp_path_factory)
    run_workflow(real_built, workflow, paths.DIST.format(target="webgpu"), "--config",
                 f"buckets={json.dumps(REAL_WEBGPU_BUCKETS)}", configfiles=())
    libraries = json.loads((model_folder(real_built, "webgpu") / paths.MODEL_MANIFEST)
                           .read_text())["libraries"]
    assert sorted(e["component"] for e in libraries) == sorted(COMPONENT_NAMES)
    for entry in libraries:
        assert entry["validated"] is True and entry["device"] == "webgpu", entry
    audio, summaries = {}, {}
    for target in ("llvm", "webgpu"):
        out = tmp_path / f"{target}.wav"
        done = subprocess.run([str(BIN / "kokoro-tvm"), "say", REAL_SENTENCE, "-o", str(out),
                               "--target", target, "--voice", "af_heart", "--seed", "5"],
                              capture_output=True, text=True, cwd=real_built)
        assert done.returncode == 0, done.stderr
        audio[target], _ = soundfile.read(out, dtype="float32")
        summaries[target] = done.stderr + done.stdout
    assert "WebGPU on " in summaries["webgpu"]
    report = json.loads((real_built / paths.VALIDATION.format(
        target="webgpu", component="decoder", lstm=paths.WITHOUT_LSTM,
        bucket=REAL_WEBGPU_BUCKETS["decoder"][0])).read_text())["metrics"]
    snr, l1 = snr_db(audio["webgpu"], audio["llvm"]), log_mel_l1(audio["webgpu"], audio["llvm"])
    print(f"say webgpu against llvm: {snr:.1f} dB, log-mel L1 {l1:.3f} "
          f"({summaries['webgpu'].strip().splitlines()[-1]})")
    assert audio["webgpu"].shape == audio["llvm"].shape
    assert snr >= report["chained.audio.snr_db"]["tolerance"]
    assert l1 <= SPECTRAL_TOLERANCES["log_mel_l1"]
    # The server on the same folder, called as its users call it: the same audio for the seed.
    log = tmp_path / "serve.log"
    with Server(model_folder(real_built, "webgpu"), log) as server:
        response = httpx.post(f"{server.url}/v1/audio/speech", timeout=600, json={
            "model": "kokoro", "input": REAL_SENTENCE, "voice": "af_heart",
            "response_format": "wav", "seed": 5})
    assert response.status_code == 200, response.text
    served, _ = soundfile.read(io.BytesIO(response.content), dtype="float32")
    assert "WebGPU on " in log.read_text()
    assert served.shape == audio["webgpu"].shape
    assert snr_db(served, audio["webgpu"]) >= SPECTRAL_TOLERANCES["snr_db_cap"]


def _wide_sum(inputs: int) -> tvm.IRModule:
    """A module whose one PrimFunc, scheduled for a GPU, binds ``inputs`` + 1 buffers."""
    xs = [te.placeholder((256,), "float32", f"x{i}") for i in range(inputs)]
    out = te.compute((256,), lambda j: sum(x[j] for x in xs), "out")
    func = te.create_prim_func([*xs, out])
    sch = tvm.s_tir.Schedule(func)
    (loop,) = sch.get_loops(sch.get_sblock("out"))
    outer, inner = sch.split(loop, [None, 64])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    kernel = sch.mod["main"].with_attr("global_symbol", "wide_sum").with_attr(
        "tirx.is_scheduled", True)
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType((256,), "float32")) for i in range(inputs)]
    with bb.function("main", params, {"num_input": inputs}):
        gvar = bb.add_func(kernel, "wide_sum")
        out = bb.emit(relax.call_tir(gvar, params, relax.TensorType((256,), "float32")))
        bb.emit_func_output(out)
    return bb.get()


def test_a_kernel_over_eight_storage_buffers_is_refused_at_build():
    from kokoro_tvm.compile.lower import lower

    with pytest.raises(limits.WebGpuLimitError) as refused:
        build_plan(lower(_wide_sum(8), WEBGPU), WEBGPU)
    message = str(refused.value)
    assert "\n" not in message
    assert "wide_sum" in message and "needs 9 storage buffers" in message
    assert "maxStorageBuffersPerShaderStage (8)" in message
    plan = build_plan(lower(_wide_sum(7), WEBGPU), WEBGPU)  # 8 fits
    assert [len(k["bindings"]) for k in plan["kernels"].values()] == [8]


def test_float_constants_reach_the_wgsl_exactly():
    """TVM prints float32 constants with 7 digits: pi/2's first 12-bit part (1.57080078125)
    would be 1.570801, 2.2e-7 off, which a sine reduction multiplies by its quarter turns. The
    plan writes such a constant as its bits, and leaves those 7 digits give back."""
    x = te.placeholder((256,), "float32", "x")
    y = te.compute((256,), lambda i: x[i] * tvm.tirx.const(1.57080078125, "float32")
                   + tvm.tirx.const(0.5, "float32"), "y")
    func = te.create_prim_func([x, y]).without_attr("global_symbol")
    bb = relax.BlockBuilder()
    param = relax.Var("x", relax.TensorType((256,), "float32"))
    with bb.function("main", [param], {"num_input": 1}):
        out = bb.emit(relax.call_tir(bb.add_func(func, "scale"), [param],
                                     relax.TensorType((256,), "float32")))
        bb.emit_func_output(out)
    from kokoro_tvm.compile.lower import lower

    (kernel,) = build_plan(lower(bb.get(), WEBGPU), WEBGPU)["kernels"].values()
    bits = int(np.array([1.57080078125], np.float32).view(np.uint32)[0])
    assert f"bitcast<f32>({bits:#010x}u)" in kernel["wgsl"]
    assert "1.570801e+00f" not in kernel["wgsl"] and "5.000000e-01f" in kernel["wgsl"]


@tvm.script.ir_module
class _Chain:
    @R.function
    def main(a: R.Tensor((64,), "float32"), b: R.Tensor((64,), "float32"),
             c: R.Tensor((64,), "float32"), d: R.Tensor((64,), "float32"),
             e: R.Tensor((64,), "float32"), f: R.Tensor((64,), "float32"),
             g: R.Tensor((64,), "float32"), h: R.Tensor((64,), "float32"),
             i: R.Tensor((64,), "float32"), j: R.Tensor((64,), "float32")):
        with R.dataflow():
            s1 = R.add(a, b)
            s2 = R.multiply(s1, c)
            s3 = R.add(s2, d)
            s4 = R.multiply(s3, e)
            s5 = R.add(s4, f)
            s6 = R.multiply(s5, g)
            s7 = R.add(s6, h)
            s8 = R.multiply(s7, i)
            s9 = R.add(s8, j)
            R.output(s9)
        return s9


def test_fusion_stays_within_eight_storage_buffers():
    legalized = tvm.transform.Sequential([relax.transform.LegalizeOps(),
                                          relax.transform.AnnotateTIROpPattern()])(_Chain)

    def widest(mod):
        return max((_bindings(f) for f in mod.functions.values()
                    if isinstance(f, relax.Function) and "Primitive" in (f.attrs or {})),
                   default=0)

    assert widest(relax.transform.FuseOps()(legalized)) == 11  # ten inputs and the sum
    assert widest(fuse_within(limits.MAX_STORAGE_BUFFERS)(legalized)) <= 8


def test_bench_components_times_a_webgpu_library_beside_pytorch(other_built):
    """bench_components takes a webgpu folder's libraries as it takes a CPU one's: the call
    timed until the device has run it, beside PyTorch's on the same inputs."""
    from kokoro_tvm.measure.bench_components import bench_library
    from kokoro_tvm.model.kmodel import load_kmodel

    kmodel = load_kmodel(other_built / paths.ASSET_CONFIG, other_built / paths.ASSET_WEIGHTS,
                         disable_complex=True)
    manifest = json.loads((model_folder(other_built, "webgpu") / paths.MODEL_MANIFEST)
                          .read_text())
    entry = next(e for e in manifest["libraries"] if e["component"] == "duration")
    rows = bench_library(kmodel, entry, model_folder(other_built, "webgpu") / entry["library"],
                         paths.artifact(paths.PARAMS, other_built, component="duration"),
                         repeats=1)
    assert [row["function"] for row in rows] == ["main"]
    assert rows[0]["tvm_ms"] > 0 and rows[0]["torch_ms"] > 0


def test_the_lstm_kernel_runs_past_lavapipes_loop_bound(tmp_path, tmp_path_factory):
    """The GPU recurrence kernel (hidden 256, as Kokoro's) at 300 steps on this machine's
    adapter against a float64 LSTM: lavapipe ends a loop after 65,535 iterations in all, which
    a sum over h of 256 per step reached at step 254 (every step after it was wrong)."""
    from kokoro_tvm.compile.gpu.lstm import recurrence_kernel_gpu
    from kokoro_tvm.compile.lower import lower
    from kokoro_tvm.runtime.webgpu import PlanLibrary, PlanWeights, WebGpuDevice

    install_lavapipe(tmp_path_factory)
    steps, hidden = 300, 256
    gates = 4 * hidden
    bb = relax.BlockBuilder()
    params = [relax.Var("xproj", relax.TensorType((1, steps, 2, gates), "float32")),
              relax.Var("w", relax.TensorType((2, hidden, gates), "float32")),
              relax.Var("lengths", relax.TensorType((1,), "int32"))]
    with bb.function("main", params, {"num_input": 3}):
        kernel = bb.add_func(recurrence_kernel_gpu(1, steps, hidden, "int32"), "recurrence")
        bb.emit_func_output(bb.emit(relax.call_tir(
            kernel, params, relax.TensorType((1, steps, 2 * hidden), "float32"))))
    (tmp_path / "lstm.plan.json").write_text(json.dumps(build_plan(lower(bb.get(), WEBGPU),
                                                                   WEBGPU)))
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, steps, 2, gates)) * 0.5).astype("float32")
    w = (rng.standard_normal((2, hidden, gates)) * 0.01).astype("float32")
    device = WebGpuDevice()
    (got,) = PlanLibrary(tmp_path / "lstm.plan.json", PlanWeights({}, device))(
        "main", {"xproj": x, "w": w, "lengths": np.array([steps], "int32")})

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    want = np.zeros((steps, 2 * hidden))
    for d in range(2):
        h, c = np.zeros(hidden), np.zeros(hidden)
        for s in range(steps):
            t = s if d == 0 else steps - 1 - s
            a = x[0, t, d] + h @ w[d].astype("float64")
            i, f, g, o = np.split(a, 4)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            want[t, d * hidden:(d + 1) * hidden] = h
    assert np.abs(got[0] - want).max() < 1e-5


def test_a_plan_of_another_version_is_refused(other_built, tmp_path):
    from kokoro_tvm.runtime.webgpu import WebGpuError, read_plan

    source = next((model_folder(other_built, "webgpu") / "lib").glob("*/*/*.plan.json"))
    plan = json.loads(source.read_text())
    plan["version"] += 1
    (tmp_path / "b16.plan.json").write_text(json.dumps(plan))
    with pytest.raises(WebGpuError, match="not a webgpu plan of version 1 .* rebuild it"):
        read_plan(tmp_path / "b16.plan.json")


def test_no_adapter_is_said_in_one_line(other_built):
    """Without a Vulkan driver (and wgpu told to use Vulkan alone), say names what to
    install."""
    env = {**os.environ, "VK_ICD_FILENAMES": "/nonexistent.json", "WGPU_BACKEND_TYPE": "Vulkan"}
    done = subprocess.run([str(BIN / "kokoro-tvm"), "say", "Hi.", "-o", "out.wav",
                           "--model", str(model_folder(other_built, "webgpu"))],
                          capture_output=True, text=True, env=env, cwd=other_built)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("kokoro-tvm:")]
    assert errors == ["kokoro-tvm: error: no WebGPU adapter found: install a GPU's Vulkan, "
                      "Metal or D3D12 driver, or Mesa's CPU driver (Debian: apt-get install "
                      "mesa-vulkan-drivers)"], done.stderr
