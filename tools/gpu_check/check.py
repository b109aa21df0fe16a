#!/usr/bin/env python3
"""On a GPU machine with no network: validate, time and speak with the bundled cuda libraries
(tools/gpu_check/prepare.py), with a runtime-only TVM, PyTorch and numpy. Four parts:

1. Each library against PyTorch on the GPU (TF32 off), through ``validate_component``: the
   validate stage's own inputs, metrics and tolerances, on synthetic weights regenerated here
   from the bundle's seed; then TVM and PyTorch CUDA eager timed on the same inputs, with
   PyTorch's FLOP count (GFLOP/s) and the library's kernel count; TVM also from host arrays to
   host arrays, as the engine calls it (what the copies add).
2. End-to-end synthesis of the bundle's sentences with the runtime's engine on the GPU, beside
   KModel on the GPU: real-time factors and their ratio; per stage (text side, f0n, noise,
   decoder) the engine's seconds and its copies between host and device (how many, bytes,
   seconds: a copy to the host waits for the device) beside PyTorch's device time in the same
   modules; each sentence again with the next one's prosody made before its decode, as a stream
   does (the device tensors it keeps must survive those calls); and throughput, audio seconds
   per wall second for a batch of utterances made back to back, as the server's worker makes
   concurrent requests' chunks.
3. The decoder's heaviest convolutions alone under each schedule variant (conv_tiles.py),
   and the LSTM recurrence alone in each GPU form (lstm_kernels.py), beside PyTorch: which
   tile and which form are fastest (reported, not part of the verdict).
4. The op probes: every Relax op kind our components call, on the GPU and on the CPU, the
   same seeded inputs at two scales (1 and 1e4: the sine generator's phases are large).
5. Where the bundle carries webgpu libraries: each on the WebGPU adapter wgpu finds here (the
   GPU's Vulkan driver on Linux), validated as in part 1 and timed beside the cuda library
   and PyTorch on the same inputs; without an adapter, the one line saying why (no part of
   the verdict then: NVIDIA's Vulkan driver is not in every image).

First, before any GPU work, the bundle's recorded sources are compared with this tree
(sources.py): a bundle prepared from other code is refused. ``--verify`` does only that, on any
machine: run it before taking the bundle to a GPU.

``--out`` is rewritten after each library and each part ("complete" is false until the end),
so that a run the GPU machine's time limit stops still returns what it measured.

Usage: python3 tools/gpu_check/check.py --bundle results/gpu_check [--out gpu_check.json]
"""
from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROBE_SCALES = (1.0, 1e4)
STYLE_STD = 0.2


def stale_sources(document: dict) -> list[str]:
    """The files of this tree that differ from those the bundle (its cases.json, ``document``)
    was prepared from (sources.py); every file, for a bundle that recorded none."""
    sys.path.insert(0, str(REPO))  # kokoro_tvm, which sources.py hashes with
    import sources

    return sources.changed(document.get("sources", {}), REPO)


def setup_runtime(bundle: Path) -> None:
    """The bundle's runtime-only TVM, KModel's modules and this repository on sys.path."""
    os.environ["TVM_USE_RUNTIME_LIB"] = "1"
    site = bundle / "runtime" / "site"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    paths = [str(REPO), str(HERE), str(bundle / "python")]
    if not list((site / "tvm_ffi").glob(f"core.{tag.replace('cp', 'cpython-')}*.so")):
        wheel = next((bundle / "runtime" / "wheels").glob(f"apache_tvm_ffi-*-{tag}-*.whl"), None)
        if wheel is None:
            raise SystemExit(f"no tvm_ffi for Python {sys.version.split()[0]} in the bundle")
        extra = Path(tempfile.mkdtemp())
        zipfile.ZipFile(wheel).extractall(extra)
        for so in extra.rglob("*.so"):
            so.chmod(0o755)
        paths.append(str(extra))
    sys.path[:0] = paths + [str(site)]
    try:
        ctypes.CDLL("libcudart.so.13", ctypes.RTLD_GLOBAL)
    except OSError:
        if (bundle / "runtime" / "libcudart.so.13").is_file():
            ctypes.CDLL(str(bundle / "runtime" / "libcudart.so.13"), ctypes.RTLD_GLOBAL)


def setup_webgpu(bundle: Path) -> None:
    """The bundle's wgpu, pycparser and cffi (this Python's) wheels unpacked onto sys.path."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = bundle / "webgpu" / "wheels"
    chosen = [*wheels.glob("wgpu-*.whl"), *wheels.glob("pycparser-*.whl"),
              *wheels.glob(f"cffi-*-{tag}-*.whl")]
    if len(chosen) < 3:
        raise RuntimeError(f"the bundle carries no wgpu and cffi for Python "
                           f"{sys.version.split()[0]}: prepare it with --other-pythons "
                           f"{sys.version_info.major}.{sys.version_info.minor}")
    site = Path(tempfile.mkdtemp(prefix="wgpu_"))
    for wheel in chosen:
        zipfile.ZipFile(wheel).extractall(site)
    for so in site.rglob("*.so"):
        so.chmod(0o755)
    sys.path.insert(0, str(site))


def synthetic_kmodel(bundle: Path, document: dict, device: str):
    """KModel with the bundle's synthetic weights on ``device``, and the weights per component
    (measure/synthetic.py)."""
    from kokoro_tvm.measure import synthetic

    return synthetic.synthetic_kmodel(json.loads((bundle / "config.json").read_text()),
                                      document["weights"], document["seed"], device)


def reference_run(kmodel, name: str, bucket: int, seed: int) -> tuple:
    """The validate stage's example inputs of ``name`` at ``bucket`` and PyTorch's values on
    them: (inputs, the run's tensors, reference_values, the tensors as numpy arrays)."""
    from kokoro_tvm.model.components import TORCH_COMPONENTS, reference_values, run_reference

    inputs = TORCH_COMPONENTS[name].example_inputs(kmodel, bucket, seed)
    env = run_reference(kmodel, name, inputs)
    return (inputs, env, reference_values(kmodel, name, env),
            {k: v.cpu().numpy() for k, v in env.items()})


def worst_relative_error(report: dict) -> float:
    return max((m["value"] for k, m in report["metrics"].items()
                if k.endswith("relative_error") and m["tolerance"] is not None), default=0.0)


def check_library(kmodel, case: dict, bundle: Path, params: Path, weights: dict, seed: int,
                  device: str, repeat: int) -> dict:
    """Validation (the validate stage's metrics and bars) and timings of one library."""
    import torch

    from kokoro_tvm.measure.bench_components import flops
    from kokoro_tvm.measure.validate import validate_component
    from kokoro_tvm.model.components import TORCH_COMPONENTS, run_reference
    from kokoro_tvm.runtime.bare import BareLibrary, median_ms

    name, bucket = case["component"], case["bucket"]
    so = bundle / "libs" / f"{case['stem']}.so"
    component = TORCH_COMPONENTS[name]
    inputs, env, values, reference = reference_run(kmodel, name, bucket, seed)
    report = validate_component(name, bucket, so, params, values, device=device)
    library = BareLibrary(so, weights, device)
    tvm_ms = sum(library.time_ms(fn.name, {i: reference[i] for i in fn.inputs}, repeat)
                 for fn in component.functions)
    # The same calls from host arrays to host arrays, as the engine makes them: what the copies
    # to and from the device add to the library's time.
    round_trip_ms = sum(median_ms(lambda fn=fn: library(fn.name, {i: reference[i]
                                                                  for i in fn.inputs}),
                                  library.device.sync, repeat)
                        for fn in component.functions)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch_ms = median_ms(lambda: run_reference(kmodel, name, inputs), sync, repeat)
    gflop = flops(lambda: run_reference(kmodel, name, inputs)) / 1e9
    worst = worst_relative_error(report)
    return {"case": case["stem"], "passed": report["passed"], "worst_relative_error": worst,
            "metrics": report["metrics"], "tvm_ms": round(tvm_ms, 3),
            "tvm_round_trip_ms": round(round_trip_ms, 3),
            "torch_ms": round(torch_ms, 3), "ratio": round(tvm_ms / torch_ms, 3),
            "gflop": round(gflop, 3), "tvm_gflops": round(gflop / tvm_ms * 1e3, 1),
            "torch_gflops": round(gflop / torch_ms * 1e3, 1), "kernels": case["kernels"]}


def record(rows: list[dict], stem: str, check, line, save) -> None:
    """``check()``'s row for library ``stem`` appended to ``rows`` (where it raises, a failed
    row naming the exception: the next library still runs), saved, and printed as ``line(row)``
    says, or the exception."""
    try:
        row = check()
    except Exception as err:  # noqa: BLE001 - report and go on to the next library
        row = {"case": stem, "passed": False,
               "exception": f"{type(err).__name__}: {str(err)[:500]}"}
    rows.append(row)
    save()
    print(f"{row['case']:26s} {'PASS' if row['passed'] else 'FAIL'}  "
          + (row["exception"] if "exception" in row else line(row)), flush=True)


def check_webgpu_library(kmodel, case: dict, plan: Path, params: Path, gpu, seed: int,
                         repeat: int, beside: dict) -> dict:
    """One webgpu library validated (as check_library does) and timed on ``gpu``, with
    ``beside``'s times (part 1's row of the same component and bucket)."""
    from kokoro_tvm.measure.validate import validate_component
    from kokoro_tvm.model.components import TORCH_COMPONENTS
    from kokoro_tvm.runtime.bare import median_ms
    from kokoro_tvm.runtime.webgpu import PlanLibrary, PlanWeights

    name, bucket = case["component"], case["bucket"]
    _, _, values, reference = reference_run(kmodel, name, bucket, seed)
    report = validate_component(name, bucket, plan, params, values, device="webgpu")
    library = PlanLibrary(plan, PlanWeights(params, gpu))
    webgpu_ms = sum(median_ms(library.bind(fn.name, {i: reference[i] for i in fn.inputs}),
                              lambda: None, repeat)  # bind's call waits
                    for fn in TORCH_COMPONENTS[name].functions)
    return {"case": case["stem"], "passed": report["passed"],
            "worst_relative_error": worst_relative_error(report), "metrics": report["metrics"],
            "webgpu_ms": round(webgpu_ms, 3), "tvm_ms": beside.get("tvm_ms"),
            "torch_ms": beside.get("torch_ms")}


def check_webgpu(kmodel, document: dict, bundle: Path, folder: Path, repeat: int,
                 summary: dict, save) -> None:
    """Part 5: each webgpu library on this machine's WebGPU adapter, validated and timed beside
    part 1's figures for the same component and bucket; ``save()`` after each."""
    from kokoro_tvm import paths

    try:
        setup_webgpu(bundle)
        from kokoro_tvm.runtime.devices import device as make_device

        gpu = make_device("webgpu")
    except Exception as err:  # noqa: BLE001 - no wgpu or no adapter: said in one line
        summary["webgpu_error"] = f"{type(err).__name__}: {str(err)[:500]}"
        print("webgpu not run:", summary["webgpu_error"], flush=True)
        return
    summary["webgpu_adapter"] = gpu.describe()
    print(summary["webgpu_adapter"], flush=True)
    rows = {row["case"]: row for row in summary["libraries"]}
    beside = {(c["component"], c["bucket"]): rows.get(c["stem"], {}) for c in document["cases"]}
    for case in document["webgpu"]:
        plan = folder / f"{case['stem']}.plan.json"
        params = folder / paths.MODEL_PARAMS.format(component=case["component"])

        def check(case=case, plan=plan, params=params) -> dict:
            plan.write_bytes(gzip.decompress((bundle / "webgpu" / f"{plan.name}.gz")
                                             .read_bytes()))
            return check_webgpu_library(kmodel, case, plan, params, gpu, document["seed"],
                                        repeat, beside.get((case["component"], case["bucket"]),
                                                           {}))

        record(summary["webgpu"], case["stem"], check,
               lambda row: (f"WebGPU worst rel err {row['worst_relative_error']:.2e}  "
                            f"{row['webgpu_ms']:.2f} ms  TVM {document['target']} "
                            f"{row['tvm_ms']} ms  PyTorch {row['torch_ms']} ms"), save)


def write_params(folder: Path, weights: dict) -> None:
    """The synthetic weights as a model folder's params files."""
    import numpy as np

    from kokoro_tvm import paths

    for name, arrays in weights.items():
        params = folder / paths.MODEL_PARAMS.format(component=name)
        params.parent.mkdir(parents=True, exist_ok=True)
        np.savez(params, **arrays)


def write_model_folder(folder: Path, bundle: Path, document: dict,
                       passed: dict[str, bool]) -> None:
    """The rest of the model folder the runtime's engine reads, beside ``write_params``'
    files: the bundle's libraries that part 1 validated and the manifest."""
    import platform
    import shutil

    from kokoro_tvm import paths
    from kokoro_tvm.atomic import sha256_file
    from kokoro_tvm.cpu import host_system
    from kokoro_tvm.stages.dist import model_manifest

    files = {paths.MODEL_PARAMS.format(component=name): sha256_file(
        folder / paths.MODEL_PARAMS.format(component=name)) for name in document["weights"]}
    libraries = []
    for case in document["cases"]:
        if not passed[case["stem"]]:
            continue
        dims = {key: case[key] for key in ("component", "lstm", "bucket")}
        library = paths.MODEL_LIBRARY.format(**dims)
        (folder / library).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle / "libs" / f"{case['stem']}.so", folder / library)
        files[library] = sha256_file(folder / library)
        libraries.append({**dims, "library": library, "transforms": case["transforms"],
                          "params": paths.MODEL_PARAMS.format(component=case["component"]),
                          "device": "cuda" if document["target"] == "cuda" else "cpu"})
    manifest = model_manifest(document["target"], platform.machine(), host_system(),
                              document["cpu"], libraries, files)
    (folder / paths.MODEL_MANIFEST).write_text(json.dumps(manifest))


def end_to_end(kmodel, folder: Path, bundle: Path, document: dict, device: str,
               repeat: int) -> tuple[list[dict], dict]:
    """Each sentence by the runtime's engine and by KModel, at the speed that gives it the
    bundle's number of frames: real-time factors, and per stage the engine's time and copies
    beside PyTorch's; then the throughput of a batch of them."""
    import numpy as np
    import torch

    from kokoro_tvm.facts import SAMPLE_RATE, STYLE_DIM
    from kokoro_tvm.measure.metrics import snr_db
    from kokoro_tvm.runtime.bare import median_ms
    from kokoro_tvm.runtime.engine import TvmEngine

    engine = TvmEngine(folder, kernels=[bundle / "kernels"])
    ref_s = STYLE_STD * np.random.default_rng(document["seed"]).standard_normal(
        (1, 2 * STYLE_DIM)).astype(np.float32)
    style = torch.from_numpy(ref_s).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows, batch = [], []
    for sentence in document["sentences"]:
        ids = sentence["ids"]
        tokens = torch.tensor([[0, *ids, 0]], device=device)

        def frames_at(speed: float) -> int:
            with torch.no_grad():
                return int(kmodel.forward_with_tokens(tokens, style, speed)[1].sum())

        speed = frames_at(1.0) / sentence["frames"]
        while frames_at(speed) > sentence["largest_frames"]:  # rounding of the durations
            speed *= 1.1

        def run_torch():
            with torch.no_grad():
                return kmodel.forward_with_tokens(tokens, style, speed)

        tvm_ms = median_ms(lambda: engine.synthesize(ids, ref_s, speed, 0), lambda: None,
                            repeat)
        torch_ms = median_ms(run_torch, sync, repeat)
        engine.timings.clear()
        engine.copies.clear()
        audio, frames = engine.synthesize_with_durations(ids, ref_s, speed, 0)
        torch_stages = torch_stage_ms(kmodel, run_torch, device)
        stages = {stage: {"tvm_ms": round(seconds * 1e3, 2),
                          "torch_ms": torch_stages.get(stage),
                          "copies": _copies(engine.copies[stage])}
                  for stage, seconds in engine.timings.items()}
        stages["other"] = {"torch_ms": torch_stages["other"]}
        batch.append((ids, ref_s, speed))
        # As a stream does: the next chunk's prosody before this one's decode. The device
        # tensors this chunk keeps must survive the next calls of the same libraries.
        kept = engine.prosody(ids, ref_s, speed, 0)
        engine.prosody(ids[:len(ids) // 2], ref_s, speed, 1)
        interleaved_snr = snr_db(engine.decode(kept), audio)
        torch_frames = run_torch()[1].cpu().numpy()
        seconds = len(audio) / SAMPLE_RATE
        rows.append({"tokens": len(ids) + 2, "speed": round(speed, 3),
                     "frames": int(frames.sum()), "torch_frames": int(torch_frames.sum()),
                     "durations_equal": bool(np.array_equal(frames, torch_frames)),
                     "audio_s": round(seconds, 3), "tvm_ms": round(tvm_ms, 2),
                     "torch_ms": round(torch_ms, 2), "tvm_rtf": round(tvm_ms / 1e3 / seconds, 4),
                     "torch_rtf": round(torch_ms / 1e3 / seconds, 4),
                     "speedup": round(torch_ms / tvm_ms, 2), "stages": stages,
                     "interleaved_snr_db": round(interleaved_snr, 1)})
    interleaved = [utterance for _ in range(BATCH_COPIES) for utterance in batch]
    throughput(engine, kmodel, interleaved[:len(batch)], device)  # warm-up: every bucket used
    return rows, throughput(engine, kmodel, interleaved, device)


# The engine's stages (runtime/engine.py), by the components they run.
ENGINE_STAGE = {"bert": "text", "duration": "text", "text_encoder": "text", "f0n": "f0n",
                "decoder": "decoder"}
# How many times each sentence is in the throughput batch (interleaved).
BATCH_COPIES = 3
# A chunk decoded after the next chunk's prosody against the same chunk made alone: the same
# kernels on the same inputs, so only a kept tensor overwritten by the next calls would differ.
INTERLEAVED_SNR_DB = 60.0


def torch_stage_ms(kmodel, run, device: str) -> dict[str, float]:
    """Milliseconds ``run()`` (KModel) spends in each engine stage's modules: the KModel modules
    each component's wrapper calls, timed by hooks (CUDA events on the GPU, which time the
    device's work, wall clock on the CPU); "other" is the rest of the call (the alignment,
    durations, host work and launches between modules)."""
    import torch

    from kokoro_tvm.model.components import TORCH_COMPONENTS

    kmodel_modules = {id(m) for m in kmodel.modules()}

    def called(module) -> list:
        """The KModel modules a wrapper's (or holder's) children are, ModuleLists opened."""
        found = []
        for child in module.children():
            if id(child) in kmodel_modules and not isinstance(child, torch.nn.ModuleList):
                found.append(child)
            else:
                found += called(child)
        return found

    cuda = device == "cuda"
    spans: dict[str, list] = {}
    hooks = []
    for name, component in TORCH_COMPONENTS.items():
        stage = ENGINE_STAGE[name]
        for module in called(component.wrapper(kmodel)):
            def before(_module, _args, stage=stage):
                mark = torch.cuda.Event(enable_timing=True) if cuda else None
                if cuda:
                    mark.record()
                spans.setdefault(stage, []).append([mark or time.perf_counter(), None])

            def after(_module, _args, _out, stage=stage):
                if cuda:
                    mark = torch.cuda.Event(enable_timing=True)
                    mark.record()
                    spans[stage][-1][1] = mark
                else:
                    spans[stage][-1][1] = time.perf_counter()
            hooks += [module.register_forward_pre_hook(before),
                      module.register_forward_hook(after)]
    try:
        started = time.perf_counter()
        run()
        if cuda:
            torch.cuda.synchronize()
        total = (time.perf_counter() - started) * 1e3
    finally:
        for hook in hooks:
            hook.remove()
    stages = {stage: sum(start.elapsed_time(end) if cuda else (end - start) * 1e3
                         for start, end in pairs) for stage, pairs in spans.items()}
    stages["other"] = total - sum(stages.values())
    return {stage: round(ms, 2) for stage, ms in stages.items()}


def _copies(transfers) -> dict:
    """An engine stage's copies (library.Transfers) in milliseconds and bytes."""
    return {"to_device": transfers.to_device, "to_device_bytes": transfers.to_device_bytes,
            "to_device_ms": round(transfers.to_device_seconds * 1e3, 2),
            "to_host": transfers.to_host, "to_host_bytes": transfers.to_host_bytes,
            "to_host_ms": round(transfers.to_host_seconds * 1e3, 2)}


def throughput(engine, kmodel, batch: list[tuple], device: str) -> dict:
    """Audio seconds per wall second for ``batch`` ((ids, style, speed) per utterance) made back
    to back by the engine and by KModel on the same device."""
    import torch

    from kokoro_tvm.facts import SAMPLE_RATE

    started, audio = time.perf_counter(), 0
    for ids, ref_s, speed in batch:
        audio += len(engine.synthesize(ids, ref_s, speed, 0))
    tvm_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with torch.no_grad():
        for ids, ref_s, speed in batch:
            kmodel.forward_with_tokens(torch.tensor([[0, *ids, 0]], device=device),
                                       torch.from_numpy(ref_s).to(device), speed)
    if device == "cuda":
        torch.cuda.synchronize()
    torch_seconds = time.perf_counter() - started
    audio_seconds = audio / SAMPLE_RATE
    return {"utterances": len(batch), "audio_s": round(audio_seconds, 2),
            "tvm_audio_per_second": round(audio_seconds / tvm_seconds, 1),
            "torch_audio_per_second": round(audio_seconds / torch_seconds, 1),
            "speedup": round(torch_seconds / tvm_seconds, 2)}


def _probe_inputs(signature: list[dict], scale: float, seed: int) -> list:
    import numpy as np

    rng = np.random.default_rng(seed)
    # Integers stay below every argument's smallest extent, so any of them may index any axis.
    below = min((d for arg in signature for d in arg["shape"]), default=2)
    inputs = []
    for arg in signature:
        if arg["dtype"].startswith("float"):
            inputs.append((scale * rng.standard_normal(arg["shape"])).astype(arg["dtype"]))
        elif arg["dtype"] == "bool":
            inputs.append(rng.random(arg["shape"]) < 0.5)
        else:
            inputs.append(rng.integers(0, max(1, below), arg["shape"]).astype(arg["dtype"]))
    return inputs


def probe_ops(bundle: Path, document: dict, device: str, tolerance: float) -> list[dict]:
    """Each op probe on ``device`` against the CPU, at every scale."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from kokoro_tvm.measure.metrics import relative_error
    from kokoro_tvm.runtime.devices import device as tvm_device
    from kokoro_tvm.runtime.library import as_tensors

    dev = tvm_device(device, [bundle / "kernels"])
    gpu = VirtualMachine(tvm.runtime.load_module(str(bundle / "probes" / "device.so")), dev)
    cpu = VirtualMachine(tvm.runtime.load_module(str(bundle / "probes" / "cpu.so")), tvm.cpu())
    rows = []
    for index, (name, signature) in enumerate(document["probes"].items()):
        row = {"op": name}
        for scale in PROBE_SCALES:
            inputs = _probe_inputs(signature, scale, document["seed"] + index)
            try:
                outs = [t.numpy() for t in as_tensors(gpu[name](
                    *[tvm.runtime.tensor(a, dev) for a in inputs]))]
                refs = [t.numpy() for t in as_tensors(cpu[name](
                    *[tvm.runtime.tensor(a, tvm.cpu()) for a in inputs]))]
                row[f"error_at_{scale:g}"] = max(relative_error(o, r) for o, r in zip(outs, refs))
            except Exception as err:  # noqa: BLE001 - a failing op is a finding, not the end
                row[f"error_at_{scale:g}"] = float("inf")
                row["exception"] = f"{type(err).__name__}: {str(err)[:300]}"
        row["passed"] = all(row[f"error_at_{s:g}"] <= tolerance for s in PROBE_SCALES)
        rows.append(row)
    return rows


def conv_case(shape: list, seed: int, device: str = "cuda"):
    """Seeded inputs (x, w) of a conv_tiles shape, and PyTorch's convolution of them on
    ``device``."""
    import numpy as np
    import torch

    _, kind, c_in, c_out, kernel, stride, dilation, padding, length = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c_in, length), dtype=np.float32)
    w_shape = (c_out, c_in, kernel) if kind == "conv1d" else (c_in, c_out, kernel)
    w = (rng.standard_normal(w_shape, dtype=np.float32) / np.sqrt(c_in * kernel)).astype(
        np.float32)
    conv = (torch.nn.functional.conv1d if kind == "conv1d"
            else torch.nn.functional.conv_transpose1d)
    tx, tw = torch.from_numpy(x).to(device), torch.from_numpy(w).to(device)
    return [x, w], lambda: conv(tx, tw, stride=stride, padding=padding, dilation=dilation)


def lstm_case(shape: list, seed: int, device: str = "cuda"):
    """Seeded inputs (xproj, w_hh_t, lengths) of an lstm_kernels shape, and the packed_lstm op
    (model/packed_lstm.py: PyTorch's packed LSTM, cuDNN's on the GPU) on them on ``device``:
    the projected inputs of both directions side by side, fed through identity input weights
    (its own input product is extra work, counted in its time)."""
    import lstm_kernels
    import numpy as np
    import torch

    from kokoro_tvm.model.packed_lstm import packed_lstm

    _, steps, hidden = shape
    rng = np.random.default_rng(seed)
    gates = 4 * hidden
    xproj = rng.standard_normal((1, steps, 2, gates), dtype=np.float32)
    w_hh_t = (rng.standard_normal((2, hidden, gates), dtype=np.float32)
              / np.sqrt(hidden)).astype(np.float32)
    lengths = np.array([int(lstm_kernels.VALID * steps)], np.int64)
    eye, zero = torch.eye(gates), torch.zeros(gates, gates)
    bias = torch.zeros(gates)
    weights = [w.to(device) for d, w_ih in enumerate((torch.cat([eye, zero], 1),
                                                      torch.cat([zero, eye], 1)))
               for w in (w_ih, torch.from_numpy(w_hh_t[d].T.copy()), bias, bias)]
    x = torch.from_numpy(xproj.reshape(1, steps, 2 * gates)).to(device)
    length = torch.from_numpy(lengths)

    def reference():
        with torch.no_grad():
            return packed_lstm(x, length, *weights)

    return [xproj, w_hh_t, lengths], reference


def sweep(bundle: Path, document: dict, folder: str, case, repeat: int, tolerance: float,
          device: str = "cuda") -> list[dict]:
    """Each bundled variant of a sweep (``folder``: tiles, lstm) against PyTorch on ``device``:
    relative error, milliseconds and TFLOP/s of both; ``case(shape, seed, device)`` gives the
    inputs and PyTorch's computation."""
    import torch
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from kokoro_tvm.measure.metrics import relative_error
    from kokoro_tvm.runtime.bare import median_ms
    from kokoro_tvm.runtime.devices import device as tvm_device

    dev = tvm_device(device, [bundle / "kernels"])
    torch_sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    for entry in document.get(folder, []):
        row = {"shape": entry["shape"][0], "variant": entry["variant"]}
        try:
            inputs, reference = case(entry["shape"], document["seed"], device)
            library = bundle / folder / f"{entry['stem']}.so"
            vm = VirtualMachine(tvm.runtime.load_module(str(library)), dev)
            args = [tvm.runtime.tensor(a, dev) for a in inputs]
            out = vm["main"](*args).numpy()
            ref = reference().cpu().numpy()
            error = relative_error(out, ref)
            tvm_ms = median_ms(lambda: vm["main"](*args), dev.sync, repeat)
            torch_ms = median_ms(reference, torch_sync, repeat)
            row.update(relative_error=error, passed=error <= tolerance, tvm_ms=round(tvm_ms, 3),
                       torch_ms=round(torch_ms, 3),
                       tvm_tflops=round(entry["gflop"] / tvm_ms, 3),
                       torch_tflops=round(entry["gflop"] / torch_ms, 3))
        except Exception as err:  # noqa: BLE001 - a failing variant is a finding
            row.update(passed=False, exception=f"{type(err).__name__}: {str(err)[:300]}")
        rows.append(row)
        print(folder, json.dumps(row), flush=True)
    return rows


def fastest(rows: list[dict]) -> dict:
    """The sweep's variant to choose: of those that passed at every shape, the least time summed
    over the shapes, with its time at each shape over the best of those variants there;
    ``variant`` None if none passed everywhere."""
    shapes = {row["shape"] for row in rows}
    by_variant: dict[str, dict[str, float]] = {}
    for row in rows:
        if row.get("passed"):
            by_variant.setdefault(row["variant"], {})[row["shape"]] = row["tvm_ms"]
    complete = {v: times for v, times in by_variant.items() if set(times) == shapes}
    if not complete:
        return {"variant": None, "reason": "no variant passed at every shape"}
    variant = min(complete, key=lambda v: sum(complete[v].values()))
    best = {shape: min(times[shape] for times in complete.values()) for shape in shapes}
    return {"variant": variant, "tvm_ms": complete[variant],
            "against_best": {s: round(complete[variant][s] / best[s], 3) for s in sorted(shapes)}}


def check_model(kmodel, weights: dict, args, document: dict, device: str,
                summary: dict, save) -> None:
    """Parts 1 and 2: every library, then the sentences end to end; ``save()`` after each."""
    from kokoro_tvm import paths

    folder = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    write_params(folder, weights)
    for case in document["cases"]:
        params = folder / paths.MODEL_PARAMS.format(component=case["component"])
        record(summary["libraries"], case["stem"],
               lambda case=case, params=params: check_library(
                   kmodel, case, args.bundle, params, weights[case["component"]],
                   document["seed"], device, args.repeat),
               lambda row: (f"worst rel err {row['worst_relative_error']:.2e}  TVM "
                            f"{row['tvm_ms']:.2f} ms  (from host arrays "
                            f"{row['tvm_round_trip_ms']:.2f} ms)  PyTorch {row['torch_ms']:.2f} ms"
                            f"  ratio {row['ratio']:.2f}  {row['gflop']:.2f} GFLOP: TVM "
                            f"{row['tvm_gflops']} / PyTorch {row['torch_gflops']} GFLOP/s  "
                            f"kernels {row['kernels']}"), save)
    if document.get("webgpu"):
        check_webgpu(kmodel, document, args.bundle, folder, args.repeat, summary, save)
    write_model_folder(folder, args.bundle, document,
                       {r["case"]: r["passed"] for r in summary["libraries"]})
    try:
        summary["end_to_end"], summary["throughput"] = end_to_end(
            kmodel, folder, args.bundle, document, device, max(3, args.repeat // 3))
        for row in summary["end_to_end"]:
            print("e2e", json.dumps(row), flush=True)
        print("throughput", json.dumps(summary["throughput"]), flush=True)
    except Exception as err:  # noqa: BLE001 - reported; the probes still run
        summary["end_to_end_error"] = f"{type(err).__name__}: {str(err)[:500]}"
        print("e2e failed:", summary["end_to_end_error"], flush=True)
    save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=REPO / "results" / "gpu_check")
    parser.add_argument("--out", type=Path, default=None, help="JSON of every figure")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per median")
    parser.add_argument("--verify", action="store_true",
                        help="only check that the bundle was prepared from this tree, and exit")
    parser.add_argument("--stale-ok", action="store_true",
                        help="run a bundle prepared from other code (its files are reported)")
    args = parser.parse_args()
    document = json.loads((args.bundle / "cases.json").read_text())
    stale = stale_sources(document)
    if stale and not args.stale_ok:
        names = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
        raise SystemExit(f"{args.bundle} was prepared from other code than this tree (differing: "
                         f"{names}); build and prepare it again (README: GPU check), or pass "
                         "--stale-ok")
    if args.verify:
        print(f"{args.bundle} was prepared from this tree")
        return
    setup_runtime(args.bundle)
    import torch
    import tvm

    from kokoro_tvm.atomic import write_text
    from kokoro_tvm.measure.metrics import TIGHT_RELATIVE

    # PyTorch's reference in full float32: TF32 convolutions and matmuls are off by ~1e-3.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda" if document["target"] == "cuda" else "cpu"
    print(f"tvm {tvm.__version__} (runtime only), torch {torch.__version__}, python "
          f"{sys.version.split()[0]}, device "
          f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}", flush=True)
    started = time.perf_counter()
    summary: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                     "stale_sources": stale, "complete": False, "libraries": [],
                     "end_to_end": [], "probes": [], "webgpu": []}

    def save() -> None:
        """The figures so far ("complete" false until the end): a run stopped by the GPU
        machine's time limit still returns each part it finished."""
        if args.out:
            write_text(args.out, json.dumps(summary, indent=1, default=str))
    try:
        kmodel, weights = synthetic_kmodel(args.bundle, document, device)
    except Exception as err:  # noqa: BLE001 - without PyTorch's model, the probes still run
        summary["model_error"] = f"{type(err).__name__}: {str(err)[:500]}"
        print("PyTorch model failed:", summary["model_error"], flush=True)
    else:
        check_model(kmodel, weights, args, document, device, summary, save)
    if device == "cuda":
        summary["tiles"] = sweep(args.bundle, document, "tiles", conv_case, args.repeat,
                                 TIGHT_RELATIVE)
        save()
        summary["lstm"] = sweep(args.bundle, document, "lstm", lstm_case, args.repeat,
                                TIGHT_RELATIVE)
        # compile/gpu/contraction.py's tile and compile/gpu/lstm.py's DEFAULT_KERNEL, from this
        summary["choices"] = {folder: fastest(summary[folder]) for folder in ("tiles", "lstm")}
        print("choices", json.dumps(summary["choices"]), flush=True)
        save()
    summary["probes"] = probe_ops(args.bundle, document, device, TIGHT_RELATIVE)
    failed = [p for p in summary["probes"] if not p["passed"]]
    print(f"op probes: {len(summary['probes']) - len(failed)}/{len(summary['probes'])} pass"
          + "".join(f"\n  FAIL {json.dumps(p)}" for p in failed), flush=True)
    summary["passed"] = (all(r["passed"] for r in summary["libraries"] + summary["webgpu"])
                         and not failed
                         and not {"model_error", "end_to_end_error"} & set(summary)
                         and all(r["interleaved_snr_db"] >= INTERLEAVED_SNR_DB
                                 for r in summary["end_to_end"]))
    summary["seconds"] = round(time.perf_counter() - started, 1)
    summary["complete"] = True
    save()
    print(f"all passed: {summary['passed']} ({summary['seconds']} s)")
    sys.exit(0 if summary["passed"] else 1)


if __name__ == "__main__":
    main()
