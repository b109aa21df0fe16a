"""LSTM lowering methods compared: latency of each LSTM component's library per bucket and method,
beside the compile figures its .meta.json records (IR lines, import and build seconds).

The libraries come from a target's manifest (results/manifest/{target}.json), the weights from
the params files. Inputs follow each library's signature: floats drawn N(0, 1), masks all False
(every position valid: the longest recurrence the bucket allows), token ids 0. Latency is the
median wall time of ``repeats`` calls after one warm-up call; the minimum is reported too,
since this machine is shared. Output: a JSON document and a PNG plot (latency and IR lines
against the bucket, one line per method, one column per component).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_tvm import paths
from kokoro_tvm.atomic import write_json
from kokoro_tvm.measure.figures import pyplot, save_png
from kokoro_tvm.measure.manifest_libraries import with_files
from kokoro_tvm.paths import PathLike


def _inputs(signature: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in signature["inputs"]:
        shape, dtype = spec["shape"], spec["dtype"]
        if dtype.startswith("float"):
            arrays[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        else:  # masks (bool, all valid) and token ids (0 is a valid id)
            arrays[spec["name"]] = np.zeros(shape, dtype=dtype)
    return arrays


def time_library(library: PathLike, params: PathLike, function: str,
                 signature: dict[str, Any], repeats: int, seed: int = 0) -> dict[str, float]:
    """Median and minimum milliseconds of ``repeats`` calls, after one warm-up call (which also
    prepares the weights)."""
    from kokoro_tvm.runtime.bare import call_ms
    from kokoro_tvm.runtime.library import Library, Weights

    call = Library(library, Weights(params)).bind(function, _inputs(signature, seed))
    times = call_ms(call, lambda: None, repeats)
    return {"latency_ms_median": statistics.median(times), "latency_ms_min": min(times),
            "repeats": repeats}


def benchmark(manifest: PathLike, params: list[PathLike], repeats: int = 5
              ) -> dict[str, Any]:
    """Every LSTM library (lstm != none) of the manifest, timed; compile figures from its meta."""
    document = json.loads(Path(manifest).read_text())
    lstm_libraries = [e for e in document["libraries"] if e["lstm"] != paths.WITHOUT_LSTM]
    entries = []
    for lib, library, weights in with_files(manifest, lstm_libraries, params):
        function = sorted(lib["functions"])[0]
        timing = time_library(library, weights, function, lib["functions"][function], repeats)
        entries.append({key: lib[key] for key in ("component", "lstm", "bucket", "ir_lines",
                                                   "import_seconds", "build_seconds")}
                       | {"library": lib["library"], "function": function} | timing)
    return {"target": document["target"], "entries": entries}


def plot(document: dict[str, Any], out: PathLike) -> None:
    """Latency (top) and IR lines (bottom) against the bucket, per component and method."""
    plt = pyplot()

    components = sorted({e["component"] for e in document["entries"]}) or ["(none)"]
    fig, axes = plt.subplots(2, len(components), figsize=(4.5 * len(components), 7),
                             squeeze=False)
    for col, component in enumerate(components):
        mine = [e for e in document["entries"] if e["component"] == component]
        for method in sorted({e["lstm"] for e in mine}):
            rows = sorted((e for e in mine if e["lstm"] == method), key=lambda e: e["bucket"])
            buckets = [e["bucket"] for e in rows]
            axes[0, col].plot(buckets, [e["latency_ms_median"] for e in rows], "o-",
                              label=method)
            axes[1, col].plot(buckets, [e["ir_lines"] for e in rows], "o-", label=method)
        axes[0, col].set_title(f"{component} ({document['target']})")
        axes[0, col].set_ylabel("latency, ms (median)")
        axes[1, col].set_ylabel("IR lines after import")
        for ax in axes[:, col]:
            ax.set_xlabel("bucket")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if mine:
                ax.legend()
    save_png(fig, out)


def run(manifest: PathLike, params: list[PathLike], threads: int, out_json: PathLike,
        out_plot: PathLike, repeats: int = 5) -> dict[str, Any]:
    """results/bench/lstm/{target}.json and .png; ``threads``: TVM's (TVM_NUM_THREADS)."""
    document = benchmark(manifest, params, repeats)
    document.update(threads=threads, repeats=repeats)
    write_json(out_json, document)
    plot(document, out_plot)
    return document
