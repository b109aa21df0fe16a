#!/usr/bin/env python3
"""Bundle what the GPU check needs into one folder (default results/gpu_check, under 64 MiB):

- libs/: the cuda libraries of every component at its smallest and largest built bucket
  (from results/manifest/cuda.json of a `snakemake --config targets='["cuda"]' all` run);
- cases/: per library, the example inputs and every PyTorch output (reference computed here),
  with weights replaced by seeded synthetic ones (synthetic.py) that check.py regenerates;
- cases.json: functions, inputs, outputs, tolerances (those of kokoro_tvm/validate.py), and each
  component's weight spec (name, shape, mean, std);
- runtime/: a runtime-only TVM (the tvm package without libtvm_compiler and sources, tvm_ffi,
  typing_extensions, libcudart.so.13) and wheels/: tvm_ffi for other CPython versions.

Usage: .venv/bin/python tools/gpu_check/prepare.py --root /tmp/run [--out results/gpu_check]
"""
from __future__ import annotations

import argparse
import glob
import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import synthetic  # noqa: E402

from kokoro_tvm import paths  # noqa: E402
from kokoro_tvm.components import COMPONENTS, run_reference  # noqa: E402
from kokoro_tvm.model import load_kmodel  # noqa: E402
from kokoro_tvm.validate import (SPECTRAL_TOLERANCES, TIGHT_RELATIVE, probe_inputs,  # noqa: E402
                                 snr_db)

OTHER_PYTHONS = ("3.10", "3.12", "3.13")
SKIP = ("__pycache__", "libtvm_compiler.so", "3rdparty", "src", "include", "cython", "web",
        "cmake", "lib64", "*.pyi")


def chosen_libraries(root: Path, target: str) -> list[dict]:
    """Per component, the manifest entries at its smallest and largest bucket."""
    entries = json.loads((root / paths.MANIFEST.format(target=target)).read_text())["libraries"]
    chosen = []
    for component in COMPONENTS:
        mine = sorted((e for e in entries if e["component"] == component), key=lambda e: e["bucket"])
        chosen += [mine[0]] + ([mine[-1]] if len(mine) > 1 else [])
    return chosen


def synthesize(kmodel, seed: int) -> dict[str, dict]:
    """Replaces every component's weights by synthetic ones; returns the specs per component."""
    specs = {}
    for name, component in COMPONENTS.items():
        spec = {}
        for key, param in component.wrapper(kmodel).named_parameters():
            data = param.detach().double()
            spec[key] = {"shape": list(param.shape), "mean": float(data.mean()),
                         "std": float(data.std()) if data.numel() > 1 else 0.0}
            with torch.no_grad():
                param.copy_(torch.from_numpy(synthetic.synthetic(key, param.shape, spec[key]["mean"],
                                                                  spec[key]["std"], seed)))
        specs[name] = spec
    return specs


def precompile_kernels(lowered: Path, library: Path, kernels: Path) -> int:
    """TVM 0.27's CUDA libraries carry their kernels as CUDA C source, compiled when the
    library is loaded (``tvm_callback_cuda_compile``: NVRTC via cuda-bindings, or nvcc), which
    a runtime-only TVM cannot do. So the kernels are compiled here with nvcc, keyed by the
    sha256 of their source, and check.py hands them to the loader. Rebuilding from the lowered
    module gives the very source inside the library (checked)."""
    import hashlib

    import tvm
    from tvm import relax
    from tvm.support.nvcc import compile_cuda

    from kokoro_tvm.compile import gpu

    meta = json.loads(library.with_suffix(".meta.json").read_text())
    target = tvm.target.Target(meta["target_string"])
    with gpu.nvcc_compile():
        executable = relax.build(tvm.ir.load_json(lowered.read_text()), target,
                                 relax_pipeline=None)
    found, binary = 0, library.read_bytes()

    def visit(module):
        nonlocal found
        if module.kind == "cuda":
            code = module.inspect_source("cuda")
            assert code.encode() in binary, f"{library}: rebuilt CUDA source differs"
            with target:
                fatbin = compile_cuda(code, target_format="fatbin", compiler="nvcc")
            (kernels / f"{hashlib.sha256(code.encode()).hexdigest()}.fatbin").write_bytes(
                bytes(fatbin))
            found += 1
        for imported in module.imports:
            visit(imported)

    visit(executable.mod)
    return found


def copy_runtime(out: Path) -> None:
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
    wheels = out / "runtime" / "wheels"
    for python in OTHER_PYTHONS:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", "--implementation", "cp", "--python-version", python,
                        "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
                        "--platform", "manylinux_2_17_x86_64", "-d", str(wheels),
                        f"apache-tvm-ffi=={version('apache-tvm-ffi')}"], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True, type=Path, help="workflow folder with results/")
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--out", type=Path, default=Path("results/gpu_check"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    (args.out / "libs").mkdir(parents=True)
    (args.out / "cases").mkdir()
    (args.out / "kernels").mkdir()
    kmodel = load_kmodel(args.root / paths.ASSET_CONFIG, args.root / paths.ASSET_WEIGHTS,
                         disable_complex=True)
    specs = synthesize(kmodel, args.seed)
    cases = []
    for entry in chosen_libraries(args.root, args.target):
        name, bucket = entry["component"], entry["bucket"]
        component = COMPONENTS[name]
        stem = f"{name}_{entry['lstm']}_b{bucket}"
        shutil.copy(args.root / entry["library"], args.out / "libs" / f"{stem}.so")
        lowered = args.root / paths.LOWERED.format(target=args.target, component=name,
                                                   lstm=entry["lstm"], bucket=bucket)
        precompile_kernels(lowered, args.root / entry["library"], args.out / "kernels")
        inputs = component.example_inputs(kmodel, bucket, args.seed)
        env = run_reference(kmodel, name, inputs)
        # The waveform's SNR bar is relative to PyTorch's own under a rounding-sized change.
        probe = (run_reference(kmodel, name, probe_inputs(component, inputs))
                 if component.spectral_outputs else {})
        np.savez(args.out / "cases" / f"{stem}.npz",
                 **{k: v.detach().cpu().numpy() for k, v in env.items()})
        cases.append({
            "component": name, "bucket": bucket, "lstm": entry["lstm"], "stem": stem,
            "library_sha256": entry["library_sha256"],
            "inputs": sorted(inputs),
            "functions": [{"name": f.name, "inputs": list(f.inputs), "outputs": list(f.outputs),
                           "tight": bool(f.tight)} for f in component.functions],
            "spectral_outputs": list(component.spectral_outputs),
            "probe_snr_db": {out: snr_db(probe[out].cpu().numpy(), env[out].cpu().numpy())
                             for out in component.spectral_outputs},
        })
        print(stem, flush=True)
    document = {"target": args.target, "seed": args.seed, "tight_relative": TIGHT_RELATIVE,
                "spectral_tolerances": SPECTRAL_TOLERANCES, "cases": cases, "weights": specs,
                "versions": {d: version(d) for d in ("apache-tvm", "apache-tvm-ffi", "torch")}}
    (args.out / "cases.json").write_text(json.dumps(document, indent=1))
    shutil.copy(args.root / paths.ASSET_CONFIG, args.out / "config.json")
    copy_runtime(args.out)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"{args.out}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
