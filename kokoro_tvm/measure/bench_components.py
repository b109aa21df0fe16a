"""Per-component latency: a target's built libraries against PyTorch eager, side by side.

For each library of the target's manifest (component, LSTM method, bucket; all of them, or those
that serve given lengths: ``selected_libraries``) and each of its functions: the component's
example inputs at that bucket (real weights), the library's call and the PyTorch wrapper's
method timed in turns in one process (TVM, PyTorch, TVM, ...) so that load from other processes
hits both alike, with the same thread count (TVM's pool reads ``TVM_NUM_THREADS`` at start-up:
the caller sets it). Each timed call follows an untimed one of the same engine: the other
engine's threads keep spinning for a while after its call, and on few cores a short library
timed right after PyTorch ran at less than half its speed.

Reported per function: median milliseconds of each, their ratio, FLOPs (PyTorch's flop counter
on the same call: matmuls and convolutions) and the GFLOP/s each reaches, beside two peaks at
that thread count and each library's share of them: the best GFLOP/s PyTorch's BLAS reaches on
a large square matmul (``practical_peak_gflops``), and the FMA units' ceiling
(``fma_peak_gflops``, ``measure.peak``; CPU targets only). The FLOPs are the direct algorithm's
for both engines, so a library that needs fewer (the decoder's Winograd convolutions) shows
its speed as an equivalent rate, which may exceed the FMA ceiling. Output: a JSON document
and a PNG plot of the time ratios. For example:

    TVM_NUM_THREADS=2 python workflow_scripts/bench_components.py --threads 2 \\
        --manifest results/manifest/llvm.json --checkpoint results/assets/kokoro-82m.pth \\
        --model-config results/assets/config.json --params results/params/*.npz \\
        --token-lengths 32 64 512 --frame-lengths 32 240 2048 \\
        --out-json results/bench/components/llvm.json --out-plot results/bench/components/llvm.png
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from kokoro_tvm.atomic import write_json
from kokoro_tvm.measure.figures import pyplot, save_png
from kokoro_tvm.measure.manifest_libraries import with_files
from kokoro_tvm.model.components import TORCH_COMPONENTS, method, run_reference
from kokoro_tvm.model.patches import patched
from kokoro_tvm.paths import PathLike
from kokoro_tvm.runtime.bare import call_ms
from kokoro_tvm.runtime.devices import device, library_types

PEAK_MATMUL_SIZE = 2048


def _interleaved_ms(first: Callable[[], object], second: Callable[[], object],
                    repeats: int) -> tuple[float, float]:
    """Median milliseconds of two calls timed in turns, each timed call right after an untimed
    one of the same (module docstring)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for call, out in ((first, times[0]), (second, times[1])):
            out += call_ms(call, lambda: None, 1)  # one untimed call, then one timed
    return statistics.median(times[0]), statistics.median(times[1])


def flops(call: Callable[[], object]) -> int:
    """FLOPs of ``call`` by PyTorch's flop counter (matmuls and convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        call()
    return int(counter.get_total_flops())


def practical_peak_gflops(threads: int, repeats: int = 5) -> float:
    """Best GFLOP/s of a float32 PEAK_MATMUL_SIZE^2 matmul in PyTorch at ``threads`` threads."""
    torch.set_num_threads(threads)
    a = torch.randn(PEAK_MATMUL_SIZE, PEAK_MATMUL_SIZE)
    b = torch.randn(PEAK_MATMUL_SIZE, PEAK_MATMUL_SIZE)
    best_ms = min(call_ms(lambda: torch.mm(a, b), lambda: None, repeats))
    return 2 * PEAK_MATMUL_SIZE ** 3 / best_ms / 1e6


def bench_library(kmodel, entry: dict[str, Any], library_path: PathLike, params: PathLike,
                  repeats: int, seed: int = 0) -> list[dict[str, Any]]:
    """One library: a row per function with both latencies, their ratio and GFLOP/s."""
    component = TORCH_COMPONENTS[entry["component"]]
    inputs = component.example_inputs(kmodel, entry["bucket"], seed)
    env = run_reference(kmodel, component.name, inputs)
    arrays = {name: value.detach().numpy() for name, value in env.items()}
    library_type, weights_type = library_types(entry["device"])
    library = library_type(library_path, weights_type(params, device(entry["device"])))
    wrapper = component.wrapper(kmodel).eval()
    rows = []
    for fn in component.functions:
        run_tvm = library.bind(fn.name, arrays)
        torch_call, args = getattr(wrapper, method(fn)), tuple(env[i] for i in fn.inputs)

        def run_torch():
            with patched(component.patches), torch.no_grad():
                torch_call(*args)

        counted = flops(run_torch)
        tvm_ms, torch_ms = _interleaved_ms(run_tvm, run_torch, repeats)
        rows.append({
            "component": component.name, "lstm": entry["lstm"], "bucket": entry["bucket"],
            "function": fn.name, "tvm_ms": round(tvm_ms, 3), "torch_ms": round(torch_ms, 3),
            "ratio": round(tvm_ms / torch_ms, 3), "gflop": round(counted / 1e9, 4),
            "tvm_gflops": round(counted / tvm_ms / 1e6, 2),
            "torch_gflops": round(counted / torch_ms / 1e6, 2)})
    return rows


def serving_buckets(buckets: Iterable[int], lengths: Iterable[int]) -> set[int]:
    """The buckets the runtime would run ``lengths`` in: for each, the smallest bucket that
    holds it, or the largest (longer speech is split into chunks that fit it)."""
    buckets = sorted(buckets)
    return {next((b for b in buckets if b >= length), buckets[-1]) for length in lengths}


def selected_libraries(libraries: list[dict[str, Any]],
                       lengths: Mapping[str, Iterable[int]] | None) -> list[dict[str, Any]]:
    """The manifest's libraries that serve ``lengths`` (bucket axis -> lengths: "tokens",
    "frames"), per component and LSTM method; every library when ``lengths`` is None."""
    if lengths is None:
        return list(libraries)
    buckets: dict[tuple[str, str], set[int]] = {}
    for entry in libraries:
        buckets.setdefault((entry["component"], entry["lstm"]), set()).add(entry["bucket"])
    chosen = {key: serving_buckets(found, lengths[TORCH_COMPONENTS[key[0]].axis])
              for key, found in buckets.items()}
    return [e for e in libraries if e["bucket"] in chosen[e["component"], e["lstm"]]]


def benchmark(manifest: PathLike, checkpoint: PathLike, model_config: PathLike,
              params: list[PathLike], threads: int, repeats: int = 5,
              lengths: Mapping[str, Iterable[int]] | None = None) -> dict[str, Any]:
    """The manifest's libraries that serve ``lengths`` (``selected_libraries``; all without),
    each timed against PyTorch at ``threads`` threads."""
    from kokoro_tvm.model.kmodel import load_kmodel

    torch.set_num_threads(threads)
    document = json.loads(Path(manifest).read_text())
    kmodel = load_kmodel(model_config, checkpoint, disable_complex=True)
    rows = []
    for entry, library, weights in with_files(
            manifest, selected_libraries(document["libraries"], lengths), params):
        rows += bench_library(kmodel, entry, library, weights, repeats)
    peaks = {"practical_peak_gflops": round(practical_peak_gflops(threads), 1),
             "fma_peak_gflops": cpu_fma_peak(document["libraries"])}
    for row in rows:
        row.update(shares_of_peaks(row["tvm_gflops"], peaks))
    return {"target": document["target"], "threads": threads, "repeats": repeats,
            "lengths": None if lengths is None else {k: list(v) for k, v in lengths.items()},
            **peaks,
            "worst_ratio": max((r["ratio"] for r in rows), default=None), "rows": rows}


def cpu_fma_peak(libraries: list[dict[str, Any]]) -> float | None:
    """The FMA ceiling (``measure.peak``) of the libraries' CPU target on this machine; None
    for other devices."""
    import tvm

    from kokoro_tvm.measure.peak import fma_peak_gflops

    targets = {entry["target_string"] for entry in libraries}
    if not targets:
        return None
    target = tvm.target.Target(json.loads(targets.pop()))
    return round(fma_peak_gflops(target), 1) if "cpu" in target.keys else None


def shares_of_peaks(gflops: float, peaks: dict[str, float | None]) -> dict[str, float | None]:
    """What fraction of each peak (``practical_peak_gflops``: PyTorch's matmul;
    ``fma_peak_gflops``: the FMA ceiling) a library's GFLOP/s is."""
    return {name.replace("_gflops", "_share"): None if peak is None else round(gflops / peak, 3)
            for name, peak in peaks.items()}


def plot(document: dict[str, Any], out: PathLike) -> None:
    """TVM/PyTorch time ratio against the bucket, one line per component function and method."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 5))
    series: dict[str, list[dict]] = {}
    for row in document["rows"]:
        series.setdefault(f"{row['component']}.{row['function']} ({row['lstm']})", []).append(row)
    for label, rows in sorted(series.items()):
        rows.sort(key=lambda r: r["bucket"])
        ax.plot([r["bucket"] for r in rows], [r["ratio"] for r in rows], "o-", label=label)
    ax.axhline(1.0, color="grey", lw=1)
    ax.axhline(1.3, color="red", lw=1, ls="--", label="1.3x: at most 30% slower than PyTorch")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bucket (tokens or frames)")
    ax.set_ylabel("TVM time / PyTorch time")
    ax.set_title(f"{document['target']}, {document['threads']} threads")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    save_png(fig, out)


def run(manifest: PathLike, checkpoint: PathLike, model_config: PathLike,
        params: list[PathLike], threads: int, out_json: PathLike, out_plot: PathLike,
        repeats: int = 5, lengths: Mapping[str, Iterable[int]] | None = None) -> dict[str, Any]:
    """results/bench/components/{target}.json and .png."""
    document = benchmark(manifest, checkpoint, model_config, params, threads, repeats, lengths)
    write_json(out_json, document)
    plot(document, out_plot)
    return document

