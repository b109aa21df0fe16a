#!/usr/bin/env python3
"""On a GPU machine with no network: run every bundled cuda library (tools/gpu_check/prepare.py)
with a runtime-only TVM and numpy, compare with the PyTorch outputs computed at bundling time,
and time each function. Tolerances are kokoro_tvm/validate.py's (carried in cases.json): each
function on the reference values of its inputs, max abs error / output scale <= 1e-4; the
decoder's waveform (its functions chained on the GPU) by SNR >= 12 dB and log-mel L1 <= 0.25.
With torch + CUDA and the kokoro package present, PyTorch CUDA is timed on the same inputs too.

Usage: python3 tools/gpu_check/check.py --bundle results/gpu_check [--out result.json]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def setup_runtime(bundle: Path) -> None:
    """Runtime-only TVM from the bundle on sys.path; tvm_ffi for this CPython if not 3.11."""
    os.environ["TVM_USE_RUNTIME_LIB"] = "1"
    site = bundle / "runtime" / "site"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if not list((site / "tvm_ffi").glob(f"core.{tag.replace('cp', 'cpython-')}*.so")):
        wheel = next((bundle / "runtime" / "wheels").glob(f"apache_tvm_ffi-*-{tag}-*.whl"), None)
        if wheel is None:
            raise SystemExit(f"no tvm_ffi for Python {sys.version.split()[0]} in the bundle")
        extra = Path(tempfile.mkdtemp())
        zipfile.ZipFile(wheel).extractall(extra)
        for so in extra.rglob("*.so"):
            so.chmod(0o755)
        sys.path.insert(0, str(extra))
        sys.path.insert(1, str(site))  # tvm, typing_extensions
        os.environ["PYTHONPATH"] = f"{extra}:{site}"
    else:
        sys.path.insert(0, str(site))
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(HERE))
    cudart = bundle / "runtime" / "libcudart.so.13"
    try:
        ctypes.CDLL("libcudart.so.13", ctypes.RTLD_GLOBAL)
    except OSError:
        ctypes.CDLL(str(cudart), ctypes.RTLD_GLOBAL)


def use_precompiled_kernels(folder: Path) -> None:
    """The libraries' CUDA source is compiled at load; here the loader gets the fatbin that
    prepare.py compiled with nvcc from that same source (runtime-only TVM has no compiler)."""
    import hashlib

    import tvm_ffi

    @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
    def _precompiled(code, *_):
        path = folder / f"{hashlib.sha256(code.encode()).hexdigest()}.fatbin"
        if not path.is_file():
            raise RuntimeError(f"no precompiled kernels for this CUDA source ({path.name})")
        return bytearray(path.read_bytes())


def relative_error(out, ref) -> float:
    import numpy as np

    if out.shape != ref.shape:
        return float("inf")
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(np.abs(out.astype(np.float64) - ref))) if out.size else 0.0
    return err / scale if scale > 0 else err


# Spectral metrics as in kokoro_tvm/validate.py (which imports torch, absent here).
def _log_mel(audio, n_fft=1024, hop=256, n_mels=80, sr=24_000):
    import numpy as np

    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)  # noqa: E731
    edges = hz(np.linspace(mel(0.0), mel(sr / 2), n_mels + 2))
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    lower = (freqs[None, :] - edges[:-2, None]) / (edges[1:-1, None] - edges[:-2, None])
    upper = (edges[2:, None] - freqs[None, :]) / (edges[2:, None] - edges[1:-1, None])
    bank = np.maximum(0.0, np.minimum(lower, upper))
    x = np.pad(np.asarray(audio, dtype=np.float64).reshape(-1), (n_fft // 2, n_fft // 2),
               mode="reflect")
    frames = 1 + (len(x) - n_fft) // hop
    index = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    spec = np.abs(np.fft.rfft(x[index] * np.hanning(n_fft + 1)[:-1], axis=1)) ** 2
    return np.log(np.maximum(bank @ spec.T, 1e-5))


def spectral(out, ref) -> dict[str, float]:
    import numpy as np

    noise = float(np.sum((out.astype(np.float64) - ref) ** 2))
    snr = float(10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / max(noise, 1e-30)))
    return {"snr_db": snr, "log_mel_l1": float(np.mean(np.abs(_log_mel(out) - _log_mel(ref))))}


def torch_timings(bundle: Path, document: dict, repeat: int) -> dict[str, float] | None:
    """PyTorch CUDA milliseconds per case (all functions), if torch, CUDA and kokoro are here."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        import numpy as np
        import synthetic

        from kokoro_tvm.components import COMPONENTS, run_reference
        from kokoro_tvm.model import build_kmodel
    except Exception as err:  # noqa: BLE001 - any missing piece means no PyTorch timing
        print(f"PyTorch CUDA timing skipped: {type(err).__name__}: {err}")
        return None
    kmodel = build_kmodel(json.loads((bundle / "config.json").read_text()), None,
                          disable_complex=True)
    for name, spec in document["weights"].items():
        params = dict(COMPONENTS[name].wrapper(kmodel).named_parameters())
        with torch.no_grad():
            for key, s in spec.items():
                params[key].copy_(torch.from_numpy(
                    synthetic.synthetic(key, s["shape"], s["mean"], s["std"], document["seed"])))
    kmodel = kmodel.cuda()
    times = {}
    for case in document["cases"]:
        data = np.load(bundle / "cases" / f"{case['stem']}.npz")
        inputs = {k: torch.from_numpy(data[k]).cuda() for k in case["inputs"]}
        run_reference(kmodel, case["component"], inputs)
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            run_reference(kmodel, case["component"], inputs)
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - start) * 1e3)
        times[case["stem"]] = float(np.median(samples))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=REPO / "results" / "gpu_check")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    setup_runtime(args.bundle)
    import numpy as np
    import synthetic
    import tvm

    from kokoro_tvm.bare import BareLibrary, load_cuda_runtime

    load_cuda_runtime()
    use_precompiled_kernels(args.bundle / "kernels")
    dev = tvm.cuda(0)
    print(f"device: {dev.device_name} (compute {dev.compute_version}), tvm {tvm.__version__}, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}", flush=True)
    document = json.loads((args.bundle / "cases.json").read_text())
    tight = document["tight_relative"]
    bars = document["spectral_tolerances"]
    weights = {}
    results = []
    for case in document["cases"]:
        name = case["component"]
        if name not in weights:
            weights[name] = synthetic.weights(document["weights"][name], document["seed"])
        ref = dict(np.load(args.bundle / "cases" / f"{case['stem']}.npz"))
        started = time.perf_counter()
        library = BareLibrary(args.bundle / "libs" / f"{case['stem']}.so", weights[name], "cuda")
        row = {"case": case["stem"], "load_s": round(time.perf_counter() - started, 3),
               "metrics": {}, "ms": {}}
        passed = True
        env = {k: ref[k] for k in case["inputs"]}
        for fn in case["functions"]:
            outs = library(fn["name"], {i: ref[i] for i in fn["inputs"]})
            for out_name, out in zip(fn["outputs"], outs):
                rel = relative_error(out, ref[out_name])
                row["metrics"][f"{fn['name']}.{out_name}.relative_error"] = rel
                if fn["tight"]:
                    passed &= bool(rel <= tight)
            row["ms"][fn["name"]] = round(library.time_ms(
                fn["name"], {i: ref[i] for i in fn["inputs"]}, args.repeat), 3)
            env.update(zip(fn["outputs"], library(fn["name"], {i: env[i] for i in fn["inputs"]})))
        for out_name in case["spectral_outputs"]:
            found = spectral(env[out_name], ref[out_name])
            row["metrics"].update({f"chained.{out_name}.{k}": v for k, v in found.items()})
            snr_bar = min(bars["snr_db_cap"],
                          case["probe_snr_db"][out_name] - bars["snr_below_probe_db"])
            passed &= found["snr_db"] >= snr_bar and found["log_mel_l1"] <= bars["log_mel_l1"]
        row["passed"] = bool(passed)
        results.append(row)
        worst = max((v for k, v in row["metrics"].items() if k.endswith("relative_error")),
                    default=0.0)
        print(f"{case['stem']:28s} {'PASS' if passed else 'FAIL'}  max rel err {worst:.2e}  "
              + "  ".join(f"{f} {ms:.3f} ms" for f, ms in row["ms"].items())
              + "".join(f"  {k.split('.')[-1]} {v:.3g}" for k, v in row["metrics"].items()
                        if k.startswith("chained.")), flush=True)
    try:
        torch_ms = torch_timings(args.bundle, document, args.repeat)
    except Exception as err:  # noqa: BLE001 - PyTorch timing is optional
        print(f"PyTorch CUDA timing failed: {type(err).__name__}: {err}")
        torch_ms = None
    if torch_ms:
        for row in results:
            row["torch_cuda_ms"] = round(torch_ms[row["case"]], 3)
            print(f"{row['case']:28s} PyTorch CUDA {torch_ms[row['case']]:.3f} ms  "
                  f"TVM {sum(row['ms'].values()):.3f} ms", flush=True)
    summary = {"device": dev.device_name, "compute_version": dev.compute_version,
               "passed": all(r["passed"] for r in results), "results": results}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))
    print(f"all passed: {summary['passed']} ({len(results)} libraries)")
    sys.exit(0 if summary["passed"] else 1)


if __name__ == "__main__":
    main()
