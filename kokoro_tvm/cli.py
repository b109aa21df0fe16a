"""The kokoro-tvm command line: `kokoro-tvm say "text" -o out.wav`."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kokoro_tvm.errors import UserError
from kokoro_tvm.runtime import g2p

ENGINES = ("tvm", "torch")


def _engine(args: argparse.Namespace):
    if args.engine == "torch":
        from kokoro_tvm.model.reference import TorchEngine

        return TorchEngine(args.root)
    from kokoro_tvm.runtime.engine import TvmEngine

    return TvmEngine(args.root, target=args.target, lstm=args.lstm)


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read the text file {path}: {err}") from err


class ProgressBar:
    """``[##########..........] 12/24 pieces`` on one line of ``stream``, redrawn in place;
    nothing for a text spoken in one piece."""

    WIDTH = 30

    def __init__(self, stream):
        self.stream, self.shown = stream, False

    def __call__(self, done: int, total: int) -> None:
        if total < 2:
            return
        filled = self.WIDTH * done // total
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} pieces")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.shown = False


def _progress_bar(args: argparse.Namespace) -> ProgressBar | None:
    """Shown when asked for, or by default on a terminal when no chunk lines are printed."""
    wanted = args.progress
    if wanted is None:
        wanted = sys.stderr.isatty() and not (args.stream or args.verbose)
    return ProgressBar(sys.stderr) if wanted else None


def say(args: argparse.Namespace) -> int:
    import numpy as np

    from kokoro_tvm.facts import SAMPLE_RATE
    from kokoro_tvm.runtime.speech import SpeechError, speak_chunks, write_wav
    from kokoro_tvm.runtime.voices import load_voice

    if args.file is not None:
        if args.text is not None:
            raise UserError("give the text or --file, not both")
        args.text = _read_text(args.file)
    elif args.text is None:
        raise UserError("no text: give it as an argument or with --file PATH")
    if args.output == "-" and not args.stream:
        raise UserError("-o - writes raw PCM as chunks finish: add --stream")
    if not args.text.strip():  # fail before the engine spends seconds loading
        raise SpeechError("the text is empty: give some words to speak")
    load_voice(args.voice, args.root)
    started = time.perf_counter()
    engine = _engine(args)
    loaded = time.perf_counter()
    chunks, first_audio = [], None
    bar = _progress_bar(args)
    for chunk in speak_chunks(engine, args.text, args.voice, lang=args.lang, speed=args.speed,
                              seed=args.seed, root=args.root, per_sentence=args.stream,
                              progress=bar):
        first_audio = first_audio or time.perf_counter() - loaded
        chunks.append(chunk)
        if args.stream and args.output == "-":  # raw 16-bit 24 kHz mono, as each chunk is ready
            pcm = np.clip(chunk * 32767, -32768, 32767).astype("<i2")
            sys.stdout.buffer.write(pcm.tobytes())
            sys.stdout.buffer.flush()
        if args.stream or args.verbose:
            print(f"  chunk {len(chunks)}: {len(chunk) / SAMPLE_RATE:.2f} s of audio at "
                  f"{time.perf_counter() - loaded:.2f} s", file=sys.stderr)
    if bar is not None:
        bar.close()
    audio = np.concatenate(chunks)
    if args.output != "-":
        write_wav(args.output, audio)
    seconds, spent = len(audio) / SAMPLE_RATE, time.perf_counter() - loaded
    print(f"{args.output}: {seconds:.2f} s of audio in {spent:.2f} s (real-time factor "
          f"{spent / seconds:.3f}, {args.engine})", file=sys.stderr)
    if args.verbose:
        print(f"  load {loaded - started:.2f} s, first audio after {first_audio:.2f} s",
              file=sys.stderr)
        for stage, stage_seconds in getattr(engine, "timings", {}).items():
            print(f"  {stage} {stage_seconds:.2f} s", file=sys.stderr)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kokoro-tvm", description=__doc__)
    commands = top.add_subparsers(dest="command", required=True)
    p = commands.add_parser("say", help="synthesize text to a wav file")
    p.add_argument("text", nargs="?", help="the text to speak (or --file)")
    p.add_argument("--file", help="read the text from this UTF-8 file (any length)")
    p.add_argument("-o", "--output", required=True,
                   help="wav file to write (24 kHz, 16-bit); with --stream, - writes raw PCM "
                        "to stdout as each chunk finishes")
    p.add_argument("--voice", default="af_heart",
                   help="a voice name or a blend like af_heart:0.7,am_adam:0.3")
    p.add_argument("--lang", default="en-us", choices=g2p.LANGUAGES)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="seeds SineGen's noise (repeatable audio)")
    p.add_argument("--engine", default="tvm", choices=ENGINES,
                   help="tvm: the compiled libraries (default); torch: the PyTorch reference")
    p.add_argument("--target", default="llvm", help="which target's libraries (tvm engine)")
    p.add_argument("--lstm", default=None,
                   help="LSTM lowering to use when several are built (tvm engine)")
    p.add_argument("--stream", action="store_true", help="emit and report chunks as they finish")
    p.add_argument("--verbose", action="store_true",
                   help="print first-audio latency and per-stage times")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar over the text's pieces (default: on a terminal, "
                        "unless --stream or --verbose print per-chunk lines)")
    p.add_argument("--root", default=".", help="folder holding results/ (the built assets)")
    p.set_defaults(run=say)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except UserError as err:
        print(f"kokoro-tvm: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
