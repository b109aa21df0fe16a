#!/usr/bin/env python3
"""Bundle what the GPU check needs (default results/gpu_check, under 64 MiB); check.py runs it.

From a build of tools/gpu_check/config.yaml (the real model's sizes, the cuda target, each
component at two buckets of config.yaml: its largest, and a small one):

- libs/: those cuda libraries; kernels/: their CUDA kernels compiled here by nvcc for the
  target's arch (a runtime-only TVM cannot compile them there), by source sha256;
- probes/: one function per Relax op kind our components call (probes.py), built for cuda and
  for a generic x86-64 CPU, to name a wrong op;
- tiles/: the decoder's heaviest convolutions alone under each schedule variant of
  conv_tiles.py, to choose the GPU contraction's tile; lstm/: the LSTM recurrence alone in each
  GPU form of lstm_kernels.py, to choose compile/gpu/lstm.py's default;
- cases.json: the libraries, each component's weight spec (shape, mean, std per tensor: the
  GPU machine regenerates synthetic weights from it and a seed, synthetic.py), the token ids
  of the end-to-end sentences (G2P needs spaCy, which the GPU machine lacks), and the source
  files of this tree by sha256 (sources.py: check.py refuses a bundle prepared from other code,
  so build --root with this tree first);
- python/: the modules of the kokoro package that KModel needs (no pipeline, no misaki) and
  loguru, for the PyTorch reference there; config.json: the model's hyperparameters;
- runtime/: a runtime-only TVM (tvm and tvm_ffi without the compiler, libcudart.so.13) and
  tvm_ffi wheels for other CPython versions;
- webgpu/: where the build has webgpu libraries too (the config's targets), their plans at
  the same buckets, gzipped, and wheels of wgpu (the player's one dependency, with cffi for
  each CPython carried): check.py validates and times them on the GPU's WebGPU adapter
  (Vulkan on Linux) beside the cuda libraries.

Inputs and references are not carried: check.py makes them there from the seed, with PyTorch
on the GPU, through the same functions the validate stage uses.

Usage: python tools/gpu_check/prepare.py --root /tmp/gpu [--out results/gpu_check]
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import conv_tiles  # noqa: E402
import lstm_kernels  # noqa: E402
import probes  # noqa: E402
import sources  # noqa: E402

from kokoro_tvm import paths  # noqa: E402
from kokoro_tvm.compile import gpu  # noqa: E402
from kokoro_tvm.components import COMPONENTS  # noqa: E402
from kokoro_tvm.measure.synthetic import weight_spec  # noqa: E402
from kokoro_tvm.runtime import g2p  # noqa: E402
from kokoro_tvm.runtime.cuda import compile_fatbin, kernel_file  # noqa: E402
from kokoro_tvm.stages.common import load_ir  # noqa: E402

OTHER_PYTHONS = ("3.10", "3.12", "3.13")
SKIP = ("__pycache__", "libtvm_compiler.so", "3rdparty", "src", "include", "cython", "web",
        "cmake", "lib64", "*.pyi")
KOKORO_MODULES = ("model.py", "modules.py", "istftnet.py", "custom_stft.py")
# End-to-end sentences: a short one, for the smallest buckets, and two long ones, for the
# largest; check.py sets each one's speed so that its frames fill this share of the bucket.
SENTENCES = (
    ("Hello there, how are you?", "smallest", 0.8),
    ("The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet "
     "green forest, where nobody can find it until the next morning.", "largest", 0.9),
    ("Compiling a speech model ahead of time lets it run on machines where a large framework "
     "would be too heavy, such as small servers, boards and containers.", "largest", 0.9),
)


def chosen_libraries(root: Path, target: str) -> list[dict]:
    """Per component, the manifest entries at its smallest and largest bucket."""
    entries = json.loads((root / paths.MANIFEST.format(target=target)).read_text())["libraries"]
    chosen = []
    for component in COMPONENTS:
        mine = sorted((e for e in entries if e["component"] == component),
                      key=lambda e: e["bucket"])
        if not mine:
            raise SystemExit(f"{root}: no {target} library of {component}; build "
                             "tools/gpu_check/config.yaml first (README: GPU check)")
        chosen += [mine[0]] + ([mine[-1]] if len(mine) > 1 else [])
    return chosen


def write_kernels(lowered, target, kernels: Path, library: Path | None = None) -> int:
    """The CUDA kernels of a lowered module compiled by nvcc into ``kernels`` (checked against
    the source ``library`` carries, when given); returns how many kernel functions they hold."""
    sources = gpu.cuda_sources(lowered, target)
    binary = library.read_bytes() if library is not None else None
    for code in sources:
        if binary is not None and code.encode() not in binary:
            raise SystemExit(f"{library}: its lowered module gives other CUDA source; rebuild it")
        (kernels / kernel_file(code)).write_bytes(compile_fatbin(code, target.arch))
    return sum(code.count("__global__") for code in sources)


def build_probes(root: Path, chosen: list[dict], target_string: str, out: Path
                 ) -> dict[str, list[dict]]:
    """probes/device.so (the bundle's target) and probes/cpu.so (generic x86-64) from the
    smallest buckets' modules; each probe's parameters (shape, dtype)."""
    import tvm

    from kokoro_tvm.compile.build import build_library
    from kokoro_tvm.compile.lower import lower
    from kokoro_tvm.compile.specialize import specialize
    from kokoro_tvm.compile.targets import make_target

    smallest = {}
    for entry in chosen:
        smallest.setdefault(entry["component"], entry)
    modules = [specialize(load_ir(root / paths.RELAX.format(
        component=e["component"], lstm=e["lstm"])), e["bucket"]) for e in smallest.values()]
    mod = probes.probe_module(modules)
    (out / "probes").mkdir()
    for name, target in (("device", tvm.target.Target(target_string)),
                         ("cpu", make_target(probes.CPU_OPTIONS))):
        lowered = lower(mod, target)
        build_library(lowered, target, out / "probes" / f"{name}.so")
        if name == "device" and target.kind.name == "cuda":
            write_kernels(lowered, target, out / "kernels")
    return probes.signatures(mod)


def build_sweep(sweep, folder: str, target_string: str, out: Path) -> list[dict]:
    """{folder}/{shape}_{variant}.so: each shape of a sweep module (conv_tiles, lstm_kernels)
    under each of its variants."""
    import tvm

    from kokoro_tvm.compile.build import build_library

    target = tvm.target.Target(target_string)
    (out / folder).mkdir()
    built = []
    for shape in sweep.SHAPES:
        for variant in sweep.VARIANTS:
            stem = f"{shape[0]}_{variant}"
            lowered = sweep.lowered(shape, variant, target)
            build_library(lowered, target, out / folder / f"{stem}.so")
            write_kernels(lowered, target, out / "kernels")
            built.append({"stem": stem, "variant": variant, "shape": list(shape),
                          "gflop": sweep.flops(shape) / 1e9})
            print(f"{folder}/{stem}.so", flush=True)
    return built


def copy_python_modules(out: Path) -> None:
    """KModel's modules of the installed kokoro (its __init__ imports the G2P pipeline, which
    needs misaki) and loguru, which kokoro.model imports; the GPU machine's image has the rest
    they import (transformers, huggingface_hub, attrs: tests/test_gpu.py, GPU_MACHINE)."""
    import kokoro
    import loguru

    package = out / "python" / "kokoro"
    package.mkdir(parents=True)
    source = Path(kokoro.__file__).parent
    for name in KOKORO_MODULES:
        shutil.copy(source / name, package / name)
    (package / "__init__.py").write_text(
        f"# KModel's modules of kokoro {version('kokoro')}, without its G2P pipeline.\n"
        "from .model import KModel  # noqa: F401\n")
    loguru_dir = Path(loguru.__file__).parent
    shutil.copytree(loguru_dir, out / "python" / "loguru",
                    ignore=shutil.ignore_patterns("__pycache__"))


def copy_runtime(out: Path, other_pythons) -> None:
    import tvm
    import tvm_ffi
    import typing_extensions

    site = out / "runtime" / "site"
    for package in (tvm, tvm_ffi):
        source = Path(package.__file__).parent
        shutil.copytree(source, site / source.name, ignore=shutil.ignore_patterns(*SKIP))
    shutil.copy(typing_extensions.__file__, site)
    cudart = sorted(glob.glob("/usr/local/cuda*/lib*/libcudart.so.13*"))
    if cudart:
        shutil.copy(cudart[0], out / "runtime" / "libcudart.so.13")
    for python in other_pythons:
        pip_download(out / "runtime" / "wheels", python,
                     [f"apache-tvm-ffi=={version('apache-tvm-ffi')}"])


def pip_download(out: Path, python: str, requirements: list[str], check: bool = False) -> None:
    """Linux x86-64 wheels of ``requirements`` for CPython ``python`` into ``out``."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--implementation", "cp", "--python-version", python,
                    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "-d", str(out), *requirements],
                   check=check)


def copy_webgpu(root: Path, out: Path, other_pythons) -> list[dict]:
    """webgpu/: the root's webgpu libraries at the chosen buckets, gzipped, and the wheels of
    wgpu, pycparser and cffi (for this Python and ``other_pythons``); the cases, or none where
    the root built no webgpu target."""
    if not (root / paths.MANIFEST.format(target="webgpu")).is_file():
        return []
    folder = out / "webgpu"
    folder.mkdir()
    cases = []
    for entry in chosen_libraries(root, "webgpu"):
        stem = f"{entry['component']}_{entry['lstm']}_b{entry['bucket']}"
        with gzip.open(folder / f"{stem}.plan.json.gz", "wb") as plan:
            plan.write((root / entry["library"]).read_bytes())
        cases.append({key: entry[key] for key in ("component", "bucket", "lstm")}
                     | {"stem": stem, "library_sha256": entry["library_sha256"]})
    wheels = folder / "wheels"
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    pip_download(wheels, this, [f"{d}=={version(d)}" for d in ("wgpu", "pycparser", "cffi")],
                 check=True)
    for python in other_pythons:
        pip_download(wheels, python, [f"cffi=={version('cffi')}"])
    return cases


def sentences(config: dict, chosen: list[dict]) -> list[dict]:
    """Token ids of SENTENCES (cut to fit the buckets they are meant for) and their frames."""
    def buckets(axis: str) -> list[int]:
        return sorted({e["bucket"] for e in chosen if COMPONENTS[e["component"]].axis == axis})

    phonemize = g2p.phonemizer("en-us")
    found = []
    for text, which, share in SENTENCES:
        pick = min if which == "smallest" else max
        frames = int(share * pick(buckets("frames")))
        # Every token takes a frame at least: leave room for the durations to vary.
        longest = min(pick(buckets("tokens")) - 2, frames // 2)
        ids = g2p.token_ids(phonemize(text), config["vocab"])[:longest]
        found.append({"text": text, "ids": ids, "frames": frames,
                      "largest_frames": max(buckets("frames"))})
    return found


def prepare(root: Path, out: Path, target: str = "cuda", seed: int = 0,
            other_pythons=OTHER_PYTHONS) -> int:
    """Writes the bundle to ``out``; returns its size in bytes."""
    import tvm

    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "libs").mkdir(parents=True)
    (staging / "kernels").mkdir()
    chosen = chosen_libraries(root, target)
    cases = []
    for entry in chosen:
        name, bucket, lstm = entry["component"], entry["bucket"], entry["lstm"]
        stem = f"{name}_{lstm}_b{bucket}"
        library = root / entry["library"]
        shutil.copy(library, staging / "libs" / f"{stem}.so")
        lowered = root / paths.LOWERED.format(target=target, component=name, lstm=lstm,
                                              bucket=bucket)
        count = (write_kernels(load_ir(lowered),
                               tvm.target.Target(entry["target_string"]), staging / "kernels",
                               library) if entry["device"] == "cuda" else 0)
        # Each function's weight-transform fingerprint, as a model folder's manifest has them.
        transforms = {function: signature["transform"]
                      for function, signature in entry["functions"].items()}
        cases.append({"component": name, "bucket": bucket, "lstm": lstm, "stem": stem,
                      "library_sha256": entry["library_sha256"], "kernels": count,
                      "transforms": transforms})
        print(f"{stem}: {count} kernels", flush=True)
    probe_signatures = build_probes(root, chosen, chosen[0]["target_string"], staging)
    sweeps = {folder: (build_sweep(sweep, folder, chosen[0]["target_string"], staging)
                       if chosen[0]["device"] == "cuda" else [])
              for folder, sweep in (("tiles", conv_tiles), ("lstm", lstm_kernels))}
    config = json.loads((root / paths.ASSET_CONFIG).read_text())
    document = {
        "target": target, "cpu": chosen[0]["cpu"], "seed": seed, "cases": cases,
        "probes": probe_signatures, **sweeps,
        "weights": {c: weight_spec(root / paths.PARAMS.format(component=c)) for c in COMPONENTS},
        "sentences": sentences(config, chosen),
        "webgpu": copy_webgpu(root, staging, other_pythons),
        "versions": {d: version(d) for d in ("apache-tvm", "apache-tvm-ffi", "torch", "kokoro")},
        "sources": sources.digests(REPO),
    }
    (staging / "cases.json").write_text(json.dumps(document, indent=1))
    shutil.copy(root / paths.ASSET_CONFIG, staging / "config.json")
    copy_python_modules(staging)
    copy_runtime(staging, other_pythons)
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True, type=Path,
                        help="working folder of the tools/gpu_check/config.yaml build")
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--out", type=Path, default=Path("results/gpu_check"))
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and inputs there")
    parser.add_argument("--other-pythons", default=",".join(OTHER_PYTHONS),
                        help="CPython versions to carry tvm_ffi wheels for (comma-separated)")
    args = parser.parse_args()
    size = prepare(args.root, args.out, args.target, args.seed,
                   [v for v in args.other_pythons.split(",") if v])
    print(f"{args.out}: {size / 2**20:.1f} MiB")
    if size > 64 * 2**20:
        raise SystemExit(f"{args.out} is over the 64 MiB a GPU machine takes")


if __name__ == "__main__":
    main()
