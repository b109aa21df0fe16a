"""End-to-end speed: the TVM runtime, PyTorch eager and onnxruntime (int8 ONNX) on the same text.

Each engine runs in its own child process (one after the other, same sentences, same thread
count), so that its peak memory is its own and no engine warms another's caches. Reported per
engine: real-time factor (synthesis seconds / audio seconds) over all sentences after one
warm-up run over the same sentences (so every library needed is loaded and its weights
prepared), first-audio latency (text in -> first sentence's audio out, streaming a
multi-sentence text), load seconds and peak RSS; plus each engine's RTF relative to PyTorch's.
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "She sells seashells by the seashore, and the shells she sells are surely seashells.",
    "Compilers turn programs written for people into programs written for machines.",
    "On a quiet morning in early spring, the old town slowly woke up to the sound of bells.",
)
ENGINES = ("tvm", "torch", "onnxruntime")


class OnnxEngine:
    """Kokoro's int8 ONNX export under onnxruntime (its own iSTFT, no SineGen noise)."""

    def __init__(self, onnx_path: str | Path, threads: int):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(onnx_path), options,
                                                    providers=["CPUExecutionProvider"])

    def synthesize(self, ids, ref_s, speed, seed):
        feeds = {"tokens": np.array([[0, *ids, 0]], dtype=np.int64),
                 "style": np.asarray(ref_s, dtype=np.float32).reshape(1, -1),
                 "speed": np.array([speed], dtype=np.float32)}
        return self.session.run(None, feeds)[0].reshape(-1)


def _make_engine(name: str, root: Path, target: str, threads: int):
    if name == "tvm":
        from kokoro_tvm.runtime import TvmEngine

        return TvmEngine(root, target=target)
    if name == "torch":
        import torch

        from kokoro_tvm.reference import TorchEngine

        torch.set_num_threads(threads)
        return TorchEngine(root)
    from kokoro_tvm import paths

    return OnnxEngine(paths.artifact(paths.ASSET_ONNX, root), threads)


def _run_engine(name: str, root: Path, target: str, threads: int, voice: str,
                queue: multiprocessing.Queue) -> None:
    os.environ["TVM_NUM_THREADS"] = str(threads)  # read when TVM's thread pool starts
    from kokoro_tvm.speech import SAMPLE_RATE, speak, speak_chunks

    started = time.perf_counter()
    engine = _make_engine(name, root, target, threads)
    load_seconds = time.perf_counter() - started
    for sentence in SENTENCES:  # warm-up: first calls load libraries, prepare weights, allocate
        speak(engine, sentence, voice, root=root)
    synth, audio = 0.0, 0.0
    for sentence in SENTENCES:
        started = time.perf_counter()
        samples = len(speak(engine, sentence, voice, root=root))
        synth += time.perf_counter() - started
        audio += samples / SAMPLE_RATE
    started = time.perf_counter()
    next(iter(speak_chunks(engine, " ".join(SENTENCES), voice, root=root, per_sentence=True)))
    first_audio = time.perf_counter() - started
    queue.put({"engine": name, "rtf": synth / audio, "synthesis_seconds": synth,
               "audio_seconds": audio, "first_audio_seconds": first_audio,
               "load_seconds": load_seconds,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def benchmark(root: str | Path, target: str = "llvm", threads: int = 2, voice: str = "af_heart",
              engines=ENGINES) -> dict[str, Any]:
    """Every engine's figures, measured in turn in child processes."""
    context = multiprocessing.get_context("spawn")
    results = []
    for name in engines:
        queue = context.Queue()
        child = context.Process(target=_run_engine,
                                args=(name, Path(root), target, threads, voice, queue))
        child.start()
        results.append(queue.get())
        child.join()
    torch_rtf = next((r["rtf"] for r in results if r["engine"] == "torch"), None)
    for result in results:
        result["rtf_vs_torch"] = result["rtf"] / torch_rtf if torch_rtf else None
    return {"target": target, "threads": threads, "voice": voice, "sentences": list(SENTENCES),
            "cpu_count": os.cpu_count(), "engines": results}


def plot(figures: dict[str, Any], dest: str | Path) -> None:
    """A bar chart of real-time factors (lower is faster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kokoro_tvm.atomic import atomic_path

    names = [r["engine"] for r in figures["engines"]]
    rtfs = [r["rtf"] for r in figures["engines"]]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(names, rtfs, color=["tab:blue", "tab:orange", "tab:green"][:len(names)])
    ax.set_ylabel("real-time factor (lower is faster)")
    ax.set_title(f"Kokoro-82M, {figures['threads']} threads, target {figures['target']}")
    fig.tight_layout()
    with atomic_path(dest) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
