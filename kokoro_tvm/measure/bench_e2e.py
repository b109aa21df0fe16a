"""End-to-end speed: the TVM runtime, PyTorch eager and onnxruntime (int8 ONNX) on the same text.

Each engine lives in its own child process (same sentences, same thread count), so that its
peak memory is its own. The children load and warm up one after another (one run over the
sentences: every library needed is loaded and its weights prepared), then measure in rounds,
taking turns: round 1 TVM, PyTorch, onnxruntime, round 2 the same, ... so that a change in the
machine's load or clock during the run hits every engine alike (docs/benchmarks.md, Timing in
turns). Reported per engine: real-time factor
(synthesis seconds / audio seconds over all sentences), median over the rounds with every
round's value; first-audio latency (text in -> first sentence's audio out, streaming a
long paragraph, PARAGRAPH, or the whole of a given text), median over the rounds; the worst
stall of each of STREAMED (or of the given text) streamed whole (metrics.worst_stall: the
longest silence of a player that starts at the first chunk), median over the rounds with every
round's value; load seconds, peak RSS and whether PyTorch was loaded (the TVM engine runs in a
runtime-only install when given its interpreter); plus each engine's median RTF relative to
PyTorch's.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import queue
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kokoro_tvm.atomic import write_json
from kokoro_tvm.measure.figures import pyplot, save_png

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "She sells seashells by the seashore, and the shells she sells are surely seashells.",
    "Compilers turn programs written for people into programs written for machines.",
    "On a quiet morning in early spring, the old town slowly woke up to the sound of bells.",
)
# First audio is measured on a long paragraph, streamed (runtime/speech.py: a lead, then one
# sentence per chunk): the sentences above, then more, so that the G2P of the rest would show
# if the runtime waited for it.
PARAGRAPH = " ".join((
    *SENTENCES,
    "Nobody in the bakery could remember who had first suggested opening before dawn.",
    "By six o'clock, the queue reached the corner; by seven, it had turned it.",
    "The river, swollen by a week of rain, carried branches past the mill at walking pace.",
    "Please keep your ticket until the end of the journey, as inspectors may ask to see it.",
    "Why the committee met on a Sunday, nobody would say.",
    "Her grandmother kept every letter she had ever received, tied in bundles by year.",
    "At the far end of the hall, a single lamp lit the piano and the empty chairs around it.",
    "When the results finally arrived, they confirmed what the team had suspected for months.",
))
# Streams whose stalls are measured (runtime/speech.py, Pacing): the first-audio paragraph, three
# sentences whose first is long (its lead is followed by most of a sentence), and a short
# sentence before a long one (whose audio is all there is to play while the long one starts).
THREE_SENTENCES = " ".join((
    "When the last train had left and the platform lights were dimmed one by one, the station"
    " master walked slowly along the tracks, listening for anything out of place.",
    "Nothing moved.",
    "He locked the gate, put the keys in his coat pocket, and went home through the snow.",
))
SHORT_THEN_LONG = ("Good morning. Before we begin, please make sure that your phone is switched"
                   " off, that your bags are under the seat in front of you, and that you know"
                   " where the nearest exit is.")
STREAMED = {"paragraph": PARAGRAPH, "three_sentences": THREE_SENTENCES,
            "short_then_long": SHORT_THEN_LONG}
ENGINES = ("tvm", "torch", "onnxruntime")
ROUNDS = 5


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
    """An engine and the folder its voices and vocabulary come from: the TVM runtime reads the
    target's model folder, the others the build's assets (the same voices)."""
    from kokoro_tvm import paths
    from kokoro_tvm.runtime.model_folder import AssetFolder

    if name == "tvm":
        from kokoro_tvm.runtime.engine import TvmEngine

        engine = TvmEngine(paths.artifact(paths.DIST, root, target=target))
        return engine, engine.folder
    if name == "torch":
        import torch

        from kokoro_tvm.model.reference import TorchEngine

        torch.set_num_threads(threads)
        return TorchEngine(root), AssetFolder.of_build(root)
    return (OnnxEngine(paths.artifact(paths.ASSET_ONNX, root), threads),
            AssetFolder.of_build(root))


def _serve_engine(name: str, root: Path, target: str, threads: int, voice: str,
                  texts: Sequence[str], streams: dict[str, str], requests: multiprocessing.Queue,
                  replies: multiprocessing.Queue) -> None:
    """A child process: load and warm up one engine, then answer "round" requests with one
    timed pass over ``texts``, the first-audio latency of the first of ``streams`` and the
    worst stall of each, and "stop" with its figures."""
    os.environ["TVM_NUM_THREADS"] = str(threads)  # read when TVM's thread pool starts
    if name == "tvm":  # as `kokoro-tvm say` runs it
        from kokoro_tvm.runtime.process import speak_only

        speak_only()
    from kokoro_tvm.facts import SAMPLE_RATE
    from kokoro_tvm.measure.metrics import worst_stall
    from kokoro_tvm.runtime.g2p import sentences
    from kokoro_tvm.runtime.speech import speak, speak_chunks

    def streamed(text: str) -> tuple[float, float, str]:
        """First-audio seconds, the worst stall and the first chunk's text of ``text``
        streamed whole, each chunk taken as soon as it is ready."""
        ready, audio, spoken, started = [], [], [], time.perf_counter()
        for chunk in speak_chunks(engine, text, voice, speaker=speaker, per_sentence=True):
            ready.append(time.perf_counter() - started)
            audio.append(len(chunk.samples) / SAMPLE_RATE)
            spoken.append(chunk.text)
        return ready[0], worst_stall(ready, audio), spoken[0]

    started = time.perf_counter()
    engine, speaker = _make_engine(name, root, target, threads)
    load_seconds = time.perf_counter() - started
    for sentence in texts:  # warm-up: first calls load libraries, prepare weights, allocate
        speak(engine, sentence, voice, speaker=speaker)
    warm = {stream: streamed(text) for stream, text in streams.items()}  # windows' buckets
    first = next(iter(streams))  # whose first audio is measured
    # Whether first audio is a lead (the first sentence's first words) or a whole sentence.
    led = len(warm[first][2].split()) < len(sentences(streams[first])[0].split())
    replies.put("ready")
    while requests.get() == "round":
        synth, audio = 0.0, 0.0
        for sentence in texts:
            started = time.perf_counter()
            samples = len(speak(engine, sentence, voice, speaker=speaker))
            synth += time.perf_counter() - started
            audio += samples / SAMPLE_RATE
        timed = {stream: streamed(text) for stream, text in streams.items()}
        replies.put({"synthesis_seconds": synth, "audio_seconds": audio,
                     "first_audio_seconds": timed[first][0],
                     "worst_stall_seconds": {stream: stall
                                             for stream, (_, stall, _) in timed.items()}})
    replies.put({"load_seconds": load_seconds, "python": sys.executable,
                 "first_audio_lead": led,
                 "torch_loaded": "torch" in sys.modules,
                 "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


REPLY = "bench_e2e reply: "  # marks the child's replies among whatever else it prints


class _Pipes:
    """A child's end of the requests and replies when it runs as `python -m` of this module:
    requests are lines on stdin, replies JSON lines on stdout."""

    def get(self) -> str:
        return sys.stdin.readline().strip()

    def put(self, reply) -> None:
        sys.stdout.write(REPLY + json.dumps(reply) + "\n")
        sys.stdout.flush()


class _OtherPython:
    """An engine's child run by another interpreter (a runtime-only install), answering the
    same requests as the multiprocessing children, through _Pipes. multiprocessing cannot do
    this: its spawned children take the parent's sys.path, so they would import the parent's
    packages (PyTorch included)."""

    def __init__(self, python: str, *args):
        self.process = subprocess.Popen([python, "-m", __name__, *map(str, args)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith(REPLY):
                self.replies.put(json.loads(line[len(REPLY):]))

    def put(self, request: str) -> None:
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()

    def is_alive(self) -> bool:
        return self.process.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()

    def join(self) -> None:
        self.process.wait()


def _reply(name: str, child, replies: multiprocessing.Queue):
    """The child's next reply; an error instead of waiting forever if the child has died."""
    while True:
        try:
            return replies.get(timeout=5)
        except queue.Empty:
            if not child.is_alive():
                raise RuntimeError(f"the {name} engine's process exited (code {child.exitcode}) "
                                   "before replying; its error is above") from None


def benchmark(root: str | Path, target: str, threads: int, voice: str, engines: Sequence[str],
              rounds: int = ROUNDS, runtime_python: str | None = None,
              texts: Sequence[str] = SENTENCES, streams: dict[str, str] = STREAMED
              ) -> dict[str, Any]:
    """Every engine's figures, measured in interleaved rounds (module docstring), synthesis
    timed on ``texts``, first audio on the first of ``streams``, stalls on each. The TVM
    engine runs under ``runtime_python`` when given: the interpreter of a runtime-only install
    (no PyTorch), whose memory is what a deployment pays."""
    context = multiprocessing.get_context("spawn")
    children = {}
    for name in engines:  # one at a time, so that loading and warm-up do not overlap
        if name == "tvm" and runtime_python:
            child = _OtherPython(runtime_python, name, root, target, threads, voice,
                                 json.dumps(list(texts)), json.dumps(streams))
            requests, replies = child, child.replies
        else:
            requests, replies = context.Queue(), context.Queue()
            child = context.Process(target=_serve_engine, args=(
                name, Path(root), target, threads, voice, texts, streams, requests, replies))
            child.start()
        _reply(name, child, replies)
        children[name] = (child, requests, replies)
    measured: dict[str, list[dict[str, float]]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, (child, requests, replies) in children.items():
            requests.put("round")
            measured[name].append(_reply(name, child, replies))
    results = []
    for name, (child, requests, replies) in children.items():
        requests.put("stop")
        result = {"engine": name, **_reply(name, child, replies)}
        child.join()
        rtfs = [m["synthesis_seconds"] / m["audio_seconds"] for m in measured[name]]
        result.update(rtf=statistics.median(rtfs), rtf_rounds=rtfs,
                      audio_seconds=measured[name][0]["audio_seconds"],
                      synthesis_seconds=statistics.median(
                          m["synthesis_seconds"] for m in measured[name]),
                      first_audio_seconds=statistics.median(
                          m["first_audio_seconds"] for m in measured[name]),
                      worst_stall_seconds={stream: statistics.median(
                          m["worst_stall_seconds"][stream] for m in measured[name])
                          for stream in streams},
                      worst_stall_rounds={stream: [m["worst_stall_seconds"][stream]
                                                   for m in measured[name]]
                                          for stream in streams})
        results.append(result)
    torch_rtf = next((r["rtf"] for r in results if r["engine"] == "torch"), None)
    for result in results:
        result["rtf_vs_torch"] = result["rtf"] / torch_rtf if torch_rtf else None
    return {"target": target, "threads": threads, "voice": voice, "sentences": list(texts),
            "first_audio_text": next(iter(streams.values())), "streamed": streams,
            "rounds": rounds,
            "cpu_count": os.cpu_count(), "engines": results}


def plot(figures: dict[str, Any], dest: str | Path) -> None:
    """A bar chart of real-time factors (lower is faster)."""
    plt = pyplot()

    names = [r["engine"] for r in figures["engines"]]
    rtfs = [r["rtf"] for r in figures["engines"]]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(names, rtfs, color=["tab:blue", "tab:orange", "tab:green"][:len(names)])
    ax.set_ylabel("real-time factor (lower is faster)")
    ax.set_title(f"Kokoro-82M, {figures['threads']} threads, target {figures['target']}")
    save_png(fig, dest)


def run(root: str | Path, target: str, threads: int, voice: str, engines: list[str],
        rounds: int, out_json: str | Path, out_plot: str | Path,
        runtime_python: str | None = None, texts: Sequence[str] = SENTENCES,
        streams: dict[str, str] = STREAMED) -> dict[str, Any]:
    """results/bench/e2e/{target}.json and .png."""
    figures = benchmark(root, target, threads, voice, engines, rounds, runtime_python, texts,
                        streams)
    write_json(out_json, figures)
    plot(figures, out_plot)
    return figures


if __name__ == "__main__":  # an engine's child under another interpreter (_OtherPython)
    name, root, target, threads, voice, texts, streams = sys.argv[1:]
    _serve_engine(name, Path(root), target, int(threads), voice, json.loads(texts),
                  json.loads(streams), _Pipes(), _Pipes())
