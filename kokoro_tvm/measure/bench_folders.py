"""Two model folders on the same text, side by side in one process: a change's effect on the
runtime (other buckets, schedules or precision) against the folder built before it.

Each round speaks the text once with each folder, taking turns, after one warm-up pass each
(libraries loaded, weights prepared, buffers allocated); the folder that goes first alternates,
so an even number of rounds gives both the same share of each position. The text is spoken as
`kokoro-tvm say` speaks it (sentences joined up to Kokoro's token limit), or as it streams it with
``per_sentence`` (a lead, then a chunk per sentence). Reported per folder: synthesis and
decoder seconds (medians over the rounds, with every round's value), the frames the decoder was
asked for and those it computed (each call padded to its bucket: TvmEngine.decoder_frames) and
the share of those spent on padding; and the ratios to the baseline's.

    python -m kokoro_tvm.measure.bench_folders BASELINE FOLDER [--text FILE] [--words N]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from kokoro_tvm.atomic import write_json
from kokoro_tvm.facts import DEFAULT_VOICE

DEFAULT_TEXT = Path(__file__).resolve().parents[2] / "examples" / "long_text.txt"


def _pass(engine, text: str, voice: str, speed: float, per_sentence: bool) -> dict[str, Any]:
    """One timed pass over the text with a TvmEngine."""
    from kokoro_tvm.runtime.speech import speak

    engine.timings.clear()
    engine.decoder_frames.update(asked=0, computed=0)
    started = time.perf_counter()
    speak(engine, text, voice, speaker=engine.folder, speed=speed, per_sentence=per_sentence)
    return {"synthesis_seconds": time.perf_counter() - started,
            "decoder_seconds": engine.timings["decoder"], **engine.decoder_frames,
            "padding_share": engine.decoder_padding()}


def benchmark(baseline: str | Path, folder: str | Path, text: str, voice: str = DEFAULT_VOICE,
              speed: float = 1.0, rounds: int = 4, per_sentence: bool = False
              ) -> dict[str, Any]:
    """Both folders' figures, measured in interleaved rounds (module docstring)."""
    from kokoro_tvm.runtime.engine import TvmEngine

    engines = {name: TvmEngine(path)
               for name, path in (("baseline", baseline), ("folder", folder))}
    for engine in engines.values():
        _pass(engine, text, voice, speed, per_sentence)  # warm-up
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in engines}
    order = list(engines)
    for _ in range(rounds):
        for name in order:
            measured[name].append(_pass(engines[name], text, voice, speed, per_sentence))
        order.reverse()  # position biases a pass (docs/benchmarks.md, Timing in turns)
    results = {}
    for name, passes in measured.items():
        last = passes[-1]
        results[name] = {
            "path": str(engines[name].folder.path),
            **{key: statistics.median(p[key] for p in passes)
               for key in ("synthesis_seconds", "decoder_seconds")},
            "synthesis_rounds": [p["synthesis_seconds"] for p in passes],
            "frames_asked": last["asked"], "frames_computed": last["computed"],
            "padding_share": last["padding_share"]}
    for key in ("synthesis_seconds", "decoder_seconds", "frames_computed"):
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
    parser.add_argument("--voice", default=DEFAULT_VOICE)
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-sentence", action="store_true",
                        help="speak it as a stream: a lead, then a chunk per sentence")
    parser.add_argument("--out-json", help="also write the figures here")
    args = parser.parse_args(argv)
    words = Path(args.text).read_text(encoding="utf-8").split()
    text = " ".join(words[:args.words] if args.words else words)
    figures = benchmark(args.baseline, args.folder, text, args.voice, args.speed, args.rounds,
                        args.per_sentence)
    for name in ("baseline", "folder"):
        f = figures[name]
        print(f"{name} ({f['path']}): synthesis {f['synthesis_seconds']:.2f} s, decoder "
              f"{f['decoder_seconds']:.2f} s, decoder frames {f['frames_asked']} padded to "
              f"{f['frames_computed']} ({100 * f['padding_share']:.1f}% padding)")
    f = figures["folder"]
    print(f"folder / baseline: synthesis {f['synthesis_seconds_vs_baseline']:.3f}, decoder "
          f"{f['decoder_seconds_vs_baseline']:.3f}, frames computed "
          f"{f['frames_computed_vs_baseline']:.3f}")
    if args.out_json:
        write_json(args.out_json, figures)
    return figures


if __name__ == "__main__":
    main()
