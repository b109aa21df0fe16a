"""Two model folders on the same text, side by side in one process: a change's effect on the
runtime (other buckets, schedules or precision) against the folder built before it.

Each round speaks the text once with each folder, taking turns, after one warm-up pass each
(libraries loaded, weights prepared, buffers allocated). The text is spoken as `kokoro-tvm say`
speaks it (sentences joined up to Kokoro's token limit), or one sentence per chunk with
``per_sentence`` (a stream's chunks, without its lead). Reported per folder: synthesis and
decoder seconds (medians over the rounds, with every round's value), the frames of audio, the
frames the decoder computed (each chunk padded to its bucket) and the share of those spent on
padding; and the medians' ratio to the baseline's.

    python -m kokoro_tvm.measure.bench_folders BASELINE FOLDER [--text FILE] [--words N]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_tvm.atomic import write_json

DEFAULT_TEXT = Path(__file__).resolve().parents[2] / "examples" / "long_text.txt"


class FrameCounter:
    """An engine (runtime/engine.TvmEngine) whose chunks' frames are counted: those of the audio
    and those its decoder computes, each chunk padded to its bucket."""

    def __init__(self, engine):
        self.engine = engine
        self.audio_frames = 0
        self.decoded_frames = 0

    def synthesize(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int
                   ) -> np.ndarray:
        prosody = self.engine.prosody(ids, ref_s, speed, seed)
        frames = prosody.asr.shape[-1]
        self.audio_frames += frames
        self.decoded_frames += self.engine.decode_frames(frames)
        return self.engine.decode(prosody)


def _pass(counter: FrameCounter, text: str, voice: str, speed: float, per_sentence: bool
          ) -> dict[str, Any]:
    """One timed pass over the text."""
    from kokoro_tvm.runtime.speech import speak

    engine = counter.engine
    counter.audio_frames = counter.decoded_frames = 0
    engine.timings.clear()
    started = time.perf_counter()
    speak(counter, text, voice, speaker=engine.folder, speed=speed, per_sentence=per_sentence)
    return {"synthesis_seconds": time.perf_counter() - started,
            "decoder_seconds": engine.timings["decoder"],
            "audio_frames": counter.audio_frames, "decoded_frames": counter.decoded_frames}


def benchmark(baseline: str | Path, folder: str | Path, text: str, voice: str = "af_heart",
              speed: float = 1.0, rounds: int = 3, per_sentence: bool = False
              ) -> dict[str, Any]:
    """Both folders' figures, measured in interleaved rounds (module docstring)."""
    from kokoro_tvm.runtime.engine import TvmEngine

    counters = {name: FrameCounter(TvmEngine(path))
                for name, path in (("baseline", baseline), ("folder", folder))}
    for counter in counters.values():
        _pass(counter, text, voice, speed, per_sentence)  # warm-up
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in counters}
    for _ in range(rounds):
        for name, counter in counters.items():
            measured[name].append(_pass(counter, text, voice, speed, per_sentence))
    results = {}
    for name, passes in measured.items():
        last = passes[-1]
        results[name] = {
            "path": str(counters[name].engine.folder.path),
            **{key: statistics.median(p[key] for p in passes)
               for key in ("synthesis_seconds", "decoder_seconds")},
            "synthesis_rounds": [p["synthesis_seconds"] for p in passes],
            "audio_frames": last["audio_frames"], "decoded_frames": last["decoded_frames"],
            "padding_share": 1 - last["audio_frames"] / last["decoded_frames"]}
    for key in ("synthesis_seconds", "decoder_seconds", "decoded_frames"):
        results["folder"][f"{key}_vs_baseline"] = (results["folder"][key]
                                                    / results["baseline"][key])
    return {"text_words": len(text.split()), "voice": voice, "speed": speed, "rounds": rounds,
            "per_sentence": per_sentence, **results}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="the model folder built before the change")
    parser.add_argument("folder", help="the model folder built after it")
    parser.add_argument("--text", default=str(DEFAULT_TEXT), help="a UTF-8 text file")
    parser.add_argument("--words", type=int, default=300,
                        help="speak the text's first N words (default 300; 0: all)")
    parser.add_argument("--voice", default="af_heart")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-sentence", action="store_true",
                        help="one sentence per chunk, as a stream (without its lead)")
    parser.add_argument("--out-json", help="also write the figures here")
    args = parser.parse_args(argv)
    words = Path(args.text).read_text(encoding="utf-8").split()
    text = " ".join(words[:args.words] if args.words else words)
    figures = benchmark(args.baseline, args.folder, text, args.voice, args.speed, args.rounds,
                        args.per_sentence)
    for name in ("baseline", "folder"):
        f = figures[name]
        print(f"{name} ({f['path']}): synthesis {f['synthesis_seconds']:.2f} s, decoder "
              f"{f['decoder_seconds']:.2f} s, {f['audio_frames']} frames of audio, "
              f"{f['decoded_frames']} decoded ({100 * f['padding_share']:.1f}% padding)")
    f = figures["folder"]
    print(f"folder / baseline: synthesis {f['synthesis_seconds_vs_baseline']:.3f}, decoder "
          f"{f['decoder_seconds_vs_baseline']:.3f}, decoded frames "
          f"{f['decoded_frames_vs_baseline']:.3f}")
    if args.out_json:
        write_json(args.out_json, figures)
    return figures


if __name__ == "__main__":
    main()
