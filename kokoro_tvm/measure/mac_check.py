"""The Mac check: run on a Mac with the bundle `snakemake mac_check` writes (stages/mac_check.py)
and the runtime installed from its wheel; no PyTorch needed. Three parts, the report rewritten
after each library and each part ("complete" is false until the end):

1. Each library against PyTorch's outputs on its example inputs, through ``validate_component``
   (the validate stage's own metrics and bars), with the bundle's synthetic weights, on the
   device its target names (metal: the Apple GPU; webgpu: the WebGPU adapter wgpu finds, on a
   Mac the Apple GPU through Metal; cpu); its first call timed from loading the library (on
   Metal and WebGPU its shaders are compiled then) and its median call after that.
2. Per target, three sentences spoken end to end by the runtime's engine from a model folder
   made of the bundle, each at the speed that fills the bundle's frame bucket: seconds and
   real-time factor.
3. Where PyTorch and kokoro are installed, KModel with the same weights on the same sentences,
   on MPS and on the CPU.

A library whose device this machine lacks is reported as skipped with the reason (so the same
script runs end to end on Linux on an llvm twin of the bundle: tests/test_mac_check.py).
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_tvm import paths
from kokoro_tvm.atomic import sha256_file, write_json
from kokoro_tvm.components import COMPONENTS
from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.measure import synthetic

REPEAT = 10


def _params(document: dict, folder: Path) -> dict[str, Path]:
    """Each component's synthetic weights as a params file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    for component, spec in document["weights"].items():
        made[component] = folder / f"{component}.npz"
        np.savez(made[component], **synthetic.weights(spec, document["seed"]))
    return made


def check_library(bundle: Path, case: dict, params: Path, repeat: int) -> dict[str, Any]:
    """Validation and timings of one library (``case`` from cases.json)."""
    from kokoro_tvm.cpu import cannot_run_reason
    from kokoro_tvm.measure.validate import load_reference, validate_component
    from kokoro_tvm.runtime.bare import median_ms
    from kokoro_tvm.runtime.devices import device, library_types

    found = {key: case[key] for key in ("target", "component", "lstm", "bucket", "device")}
    reason = cannot_run_reason(case["host_architecture"], case["cpu"], case["system"])
    if reason is not None:
        return {**found, "status": "skipped", "reason": reason}
    try:
        dev = device(case["device"])
    except UserError as err:
        return {**found, "status": "skipped", "reason": str(err)}
    so_path = bundle / case["library"]
    reference = load_reference(bundle / case["reference"])
    component = COMPONENTS[case["component"]]
    started = time.perf_counter()
    library_type, weights_type = library_types(case["device"])
    library = library_type(so_path, weights_type(params, dev), case["transforms"])
    # Each function's inputs: the component's, or an earlier function's outputs (as validation
    # feeds them).
    values = {**{name: reference[f"input.{name}"] for name in component.inputs},
              **{name: reference[f"output.{name}"] for name in component.outputs}}
    calls = {function.name: library.bind(function.name,
                                         {name: values[name] for name in function.inputs})
             for function in component.functions}
    for call in calls.values():  # loading, the weights' preparation and each first call
        call()
    dev.sync()
    found["first_call_ms"] = (time.perf_counter() - started) * 1e3
    timings = {name: median_ms(call, dev.sync, repeat) for name, call in calls.items()}
    result = validate_component(case["component"], case["bucket"], so_path, params, reference,
                                device=case["device"])
    return {**found, "status": "passed" if result["passed"] else "failed",
            "passed": result["passed"], "median_ms": timings, "metrics": result["metrics"]}


def model_folder(bundle: Path, document: dict, target: str, params: dict[str, Path],
                 folder: Path) -> Path:
    """A model folder of ``target``'s bundled libraries with the synthetic weights."""
    from kokoro_tvm.cpu import host_machine, host_system
    from kokoro_tvm.stages.dist import model_manifest

    files, libraries = {}, []

    def place(source: Path, name: str) -> None:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, folder / name)
        files[name] = sha256_file(folder / name)

    for case in document["cases"]:
        if case["target"] != target:
            continue
        dims = {key: case[key] for key in ("component", "lstm", "bucket")}
        library = (paths.MODEL_PLAN if case["device"] == "webgpu"
                   else paths.MODEL_LIBRARY).format(**dims)
        place(bundle / case["library"], library)
        params_name = paths.MODEL_PARAMS.format(component=case["component"])
        if params_name not in files:
            place(params[case["component"]], params_name)
        libraries.append({**dims, "library": library, "params": params_name,
                          "device": case["device"], "transforms": case["transforms"],
                          "validated": True})
    place(bundle / paths.MODEL_CONFIG, paths.MODEL_CONFIG)
    voice = paths.MODEL_VOICE.format(voice=document["voice"])
    place(bundle / voice, voice)
    manifest = model_manifest(target, host_machine(), host_system(),
                              {"mcpu": None, "extensions": []}, libraries, files,
                              [document["voice"]])
    write_json(folder / paths.MODEL_MANIFEST, manifest)
    return folder


def _sentences(document: dict, target: str) -> tuple[list[list[int]], int]:
    """The sentences' token ids cut to the bundle's token bucket, and the frames each fills."""
    buckets = {axis: max(case["bucket"] for case in document["cases"]
                         if case["target"] == target and COMPONENTS[case["component"]].axis == axis)
               for axis in ("tokens", "frames")}
    frames = int(document["e2e_share"] * buckets["frames"])
    # Every token takes a frame at least: the pads and tokens fit both buckets.
    tokens = min(buckets["tokens"], frames) - 2
    return [s["ids"][:tokens] for s in document["sentences"]], frames


def _filling_speed(engine, ids: list[int], style: np.ndarray, frames: int, seed: int) -> float:
    """A speed at which ``ids`` take about ``frames`` frames (at most the bucket's)."""
    from kokoro_tvm.runtime.speech import ChunkTooLong

    speed = 1.0
    while True:
        try:
            total = int(engine.prosody(ids, style, speed, seed).durations.sum())
        except ChunkTooLong:  # longer than the frame bucket at this speed
            speed *= 2
            continue
        if total <= frames:
            return speed * total / frames
        speed *= total / frames


def speak_tvm(folder: Path, document: dict, target: str) -> dict[str, Any]:
    """The engine on the sentences: each one's speed (so that it fills the frame bucket),
    seconds and real-time factor."""
    from kokoro_tvm.runtime.engine import TvmEngine
    from kokoro_tvm.runtime.voices import style_for

    sentences, frames = _sentences(document, target)
    table = np.load(folder / paths.MODEL_VOICE.format(voice=document["voice"]))
    started = time.perf_counter()
    engine = TvmEngine(folder)
    load_seconds = time.perf_counter() - started
    spoken = []
    for i, ids in enumerate(sentences):
        style = style_for(table, len(ids))
        speed = _filling_speed(engine, ids, style, frames, i)
        started = time.perf_counter()
        audio = engine.synthesize(ids, style, speed, i)
        seconds = time.perf_counter() - started
        spoken.append({"tokens": len(ids), "speed": speed, "seconds": seconds,
                       "audio_seconds": len(audio) / SAMPLE_RATE,
                       "real_time_factor": len(audio) / SAMPLE_RATE / seconds})
    return {"load_seconds": load_seconds, "sentences": spoken}


def speak_torch(bundle: Path, document: dict, target: str, spoken: list[dict]) -> dict:
    """KModel with the same weights on the same sentences and speeds, on MPS and the CPU;
    where PyTorch or kokoro is missing, or MPS is, says so."""
    try:
        import torch
    except ImportError:
        return {"skipped": "PyTorch is not installed (pip install torch kokoro)"}
    try:
        import kokoro  # noqa: F401 - KModel's package
    except ImportError:
        return {"skipped": "kokoro is not installed (pip install kokoro)"}
    from kokoro_tvm.runtime.voices import style_for

    config = json.loads((bundle / paths.MODEL_CONFIG).read_text())
    sentences, _ = _sentences(document, target)
    table = np.load(bundle / paths.MODEL_VOICE.format(voice=document["voice"]))
    results = {}
    for name in ("mps", "cpu"):
        if name == "mps" and not torch.backends.mps.is_available():
            results[name] = {"skipped": "no MPS device"}
            continue
        kmodel, _ = synthetic.synthetic_kmodel(config, document["weights"], document["seed"],
                                               name)
        timed = []
        for ids, done in zip(sentences, spoken):
            tokens = torch.tensor([[0, *ids, 0]], device=name)
            style = torch.from_numpy(style_for(table, len(ids))).to(name)
            with torch.no_grad():
                kmodel.forward_with_tokens(tokens, style, done["speed"])  # warm-up
                if name == "mps":
                    torch.mps.synchronize()
                started = time.perf_counter()
                audio, _ = kmodel.forward_with_tokens(tokens, style, done["speed"])
                if name == "mps":
                    torch.mps.synchronize()
                seconds = time.perf_counter() - started
            timed.append({"seconds": seconds, "audio_seconds": audio.numel() / SAMPLE_RATE,
                          "real_time_factor": audio.numel() / SAMPLE_RATE / seconds})
        results[name] = {"sentences": timed}
    return results


def bundle_targets(bundle: Path) -> list[str]:
    """The targets whose libraries ``bundle`` carries."""
    document = json.loads((bundle / "cases.json").read_text())
    return sorted({case["target"] for case in document["cases"]})


def check(bundle: Path, out: Path, repeat: int = REPEAT,
          targets: list[str] | None = None) -> dict[str, Any]:
    """Every part (see the module docstring) on ``bundle``, for ``targets`` of it (default:
    all); the report, also written to ``out``."""
    document = json.loads((bundle / "cases.json").read_text())
    if targets is not None:
        document["cases"] = [c for c in document["cases"] if c["target"] in targets]
    report: dict[str, Any] = {
        "machine": {"system": platform.system(), "release": platform.release(),
                    "machine": platform.machine(), "processor": platform.processor(),
                    "python": platform.python_version()},
        "bundle_versions": document["versions"], "complete": False, "libraries": [],
        "end_to_end": {}}
    write_json(out, report)
    with tempfile.TemporaryDirectory() as work:
        params = _params(document, Path(work) / "params")
        for case in document["cases"]:
            report["libraries"].append(check_library(bundle, case, params[case["component"]],
                                                     repeat))
            print(json.dumps({k: v for k, v in report["libraries"][-1].items()
                              if k != "metrics"}), flush=True)
            write_json(out, report)
        for target in sorted({case["target"] for case in document["cases"]}):
            results = [r for r in report["libraries"] if r["target"] == target]
            if any(r["status"] == "skipped" for r in results):
                report["end_to_end"][target] = {"skipped": results[0]["reason"]}
                continue
            folder = model_folder(bundle, document, target, params, Path(work) / target)
            tvm_result = speak_tvm(folder, document, target)
            report["end_to_end"][target] = {
                "tvm": tvm_result,
                "torch": speak_torch(bundle, document, target, tvm_result["sentences"])}
            write_json(out, report)
    checked = [r for r in report["libraries"] if r["status"] != "skipped"]
    report["passed"] = bool(checked) and all(r["passed"] for r in checked)
    report["complete"] = True
    write_json(out, report)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=Path(sys.argv[0]).resolve().parent,
                        help="the bundle's folder (default: the one check.py is in)")
    parser.add_argument("--out", type=Path, default=Path("mac_check.json"))
    parser.add_argument("--repeat", type=int, default=REPEAT, help="calls per median")
    parser.add_argument("--targets", nargs="+", metavar="TARGET",
                        help="check only these of the bundle's targets (default: all)")
    args = parser.parse_args()
    if args.targets is not None:
        carried = bundle_targets(args.bundle)
        unknown = sorted(set(args.targets) - set(carried))
        if unknown:
            parser.error(f"--targets {' '.join(unknown)}: the bundle carries only "
                         f"{', '.join(carried)}")
    report = check(args.bundle, args.out, args.repeat, args.targets)
    skipped = [r for r in report["libraries"] if r["status"] == "skipped"]
    if len(skipped) == len(report["libraries"]):
        print(f"{args.out}: no library could run here ({skipped[0]['reason']})")
        sys.exit(2)
    print(f"{args.out}: {'passed' if report['passed'] else 'FAILED'}; "
          f"{len(skipped)} libraries skipped")
    sys.exit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
