"""The kokoro-tvm command line: `kokoro-tvm say "text" -o out.wav`, `kokoro-tvm voices`.

A thin layer over the API (runtime/kokoro.py): every argument is checked before the model
loads, and a failed run leaves an existing output file as it was.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import time
from pathlib import Path

from kokoro_tvm import paths
from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import DEFAULT_VOICE, SAMPLE_RATE
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.kokoro import SPEED_RANGE
from kokoro_tvm.runtime.model_folder import DEFAULT_MODEL
from kokoro_tvm.serve import DEFAULT_MAX_CHUNK_SECONDS, chunk_frames

ENGINES = ("tvm", "torch")


def _read_text(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        where = "standard input" if path == "-" else f"the text file {path}"
        raise UserError(f"cannot read {where}: {err}") from err


def _engine(args: argparse.Namespace, folder):
    """None for the compiled libraries (Kokoro loads them), or the PyTorch reference on the
    folder's weights."""
    if args.engine == "tvm":
        return None
    try:
        from kokoro_tvm.model.reference import TorchEngine
    except ImportError as err:
        raise UserError(f"--engine torch needs PyTorch and kokoro ({err.name} is missing): "
                        "pip install 'kokoro-tvm[build]'") from err
    return TorchEngine.of_model_folder(folder)


class ProgressBar:
    """``[##########..........] 12/24 sentences`` on one line of ``stream``, redrawn in place;
    nothing for a text of one sentence."""

    WIDTH = 30

    def __init__(self, stream):
        self.stream, self.shown = stream, False

    def __call__(self, done: int, total: int) -> None:
        if total < 2:
            return
        filled = self.WIDTH * done // total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r[{bar}] {done}/{total} sentences")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.shown = False


def _engine_name(args, tts) -> str:
    """The engine, and for ours the device it runs on (a WebGPU adapter by name)."""
    device = getattr(tts.engine, "device_name", None)
    return f"{args.engine} engine on {device}" if device else f"{args.engine} engine"


def _progress_bar(args: argparse.Namespace) -> ProgressBar | None:
    """Shown when asked for, or by default on a terminal when no chunk lines are printed."""
    wanted = args.progress
    if wanted is None:
        wanted = sys.stderr.isatty() and not (args.stream or args.verbose)
    return ProgressBar(sys.stderr) if wanted else None


def _text(args: argparse.Namespace) -> str:
    if args.file is not None:
        if args.text is not None:
            raise UserError("give the text or --file, not both")
        return _read_text(args.file)
    if args.text is None:
        raise UserError("no text: give it as an argument, - to read standard input, or --file PATH")
    return _read_text("-") if args.text == "-" else args.text


def say(args: argparse.Namespace) -> int:
    import numpy as np

    from kokoro_tvm.runtime.audio_file import check_output, pcm16, write_audio
    from kokoro_tvm.runtime.kokoro import Kokoro, check_request
    from kokoro_tvm.runtime.model_folder import ModelFolder
    from kokoro_tvm.runtime.subtitles import SubtitleStream, check_subtitles, write_subtitles

    # Everything that can be wrong is found here, before seconds of loading and synthesis.
    text = _text(args)
    if args.output == "-":
        if not args.stream:
            raise UserError("-o - writes raw PCM as chunks finish: add --stream")
    else:
        check_output(args.output)
    if args.subtitles is not None:
        check_subtitles(args.subtitles)
    folder = ModelFolder(_model_path(args))
    check_request(folder, text, args.voice, args.speed, args.lang, args.seed)
    folder.check_lstm(args.lstm)
    started = time.perf_counter()
    tts = Kokoro(folder, engine=_engine(args, folder), lstm=args.lstm)
    loaded = time.perf_counter()
    chunks, words, first_audio = [], [], None
    bar = _progress_bar(args)
    # Streamed subtitles are written as the chunks come (and left as far as they got if the
    # run fails); otherwise whole, with the audio.
    subtitles = SubtitleStream(args.subtitles) if args.stream and args.subtitles else None
    for chunk in tts.stream(text, args.voice, args.speed, args.lang, seed=args.seed,
                            per_sentence=args.stream, progress=bar):
        first_audio = first_audio or time.perf_counter() - loaded
        chunks.append(chunk.samples)
        words.extend(chunk.words)
        if subtitles is not None:
            subtitles.add(chunk.words)
        if args.stream and args.output == "-":  # raw 16-bit mono PCM, as each chunk is ready
            sys.stdout.buffer.write(pcm16(chunk.samples).tobytes())
            sys.stdout.buffer.flush()
        if args.stream or args.verbose:
            print(f"  chunk {len(chunks)} at {chunk.start_seconds:.2f} s of audio, "
                  f"{len(chunk.samples) / SAMPLE_RATE:.2f} s long, ready after "
                  f"{time.perf_counter() - loaded:.2f} s: {chunk.text[:50]!r}", file=sys.stderr)
    if bar is not None:
        bar.close()
    audio = np.concatenate(chunks)
    if args.output != "-":
        write_audio(args.output, audio)
    seconds, spent = len(audio) / SAMPLE_RATE, time.perf_counter() - loaded
    if subtitles is not None:
        cues = subtitles.close(seconds)
    elif args.subtitles is not None:
        cues = write_subtitles(args.subtitles, words, seconds)
    if args.subtitles is not None:
        print(f"{args.subtitles}: {cues} subtitles of {len(words)} words", file=sys.stderr)
    print(f"{args.output}: {seconds:.2f} s of audio in {spent:.2f} s (real-time factor "
          f"{spent / seconds:.3f}, {_engine_name(args, tts)})", file=sys.stderr)
    if args.verbose:
        print(f"  load {loaded - started:.2f} s, first audio after {first_audio:.2f} s",
              file=sys.stderr)
        for stage, stage_seconds in getattr(tts.engine, "timings", {}).items():
            print(f"  {stage} {stage_seconds:.2f} s", file=sys.stderr)
        padding = getattr(tts.engine, "decoder_padding", lambda: None)()  # TvmEngine's alone
        if padding is not None:
            frames = tts.engine.decoder_frames
            print(f"  decoder frames: {frames['asked']}, padded to {frames['computed']} "
                  f"({100 * padding:.1f}% padding)", file=sys.stderr)
    return 0


def voices(args: argparse.Namespace) -> int:
    from kokoro_tvm.runtime.model_folder import ModelFolder
    from kokoro_tvm.runtime.voices import describe_voice

    for name in ModelFolder(_model_path(args)).voices:
        voice = describe_voice(name)
        language = (f"{voice.language}\t{voice.language_name}" if voice.language
                    else "-\t(its name names no language: give --lang)")
        row = [name, language, voice.gender or "-"]
        if voice.unavailable:
            row.append(f"unavailable: {voice.unavailable}")
        print("\t".join(row))
    return 0


def serve(args: argparse.Namespace) -> int:
    from kokoro_tvm.runtime.model_folder import ModelFolder

    try:
        from kokoro_tvm.serve.app import Limits
        from kokoro_tvm.serve.server import ready_model
        from kokoro_tvm.serve.server import serve as run_server
    except ImportError as err:
        raise UserError(f"serve needs the server's packages ({err.name} is missing): "
                        "pip install 'kokoro-tvm[serve]'") from err
    for name in ("max_chars", "max_queue", "timeout", "max_chunk_seconds", "send_timeout"):
        if not getattr(args, name) > 0:
            raise UserError(f"--{name.replace('_', '-')} must be more than 0")
    if not args.grace_period >= 0:
        raise UserError("--grace-period must be 0 or more seconds")
    if args.threads is not None:
        if args.threads < 1:
            raise UserError("--threads must be 1 or more")
        os.environ["TVM_NUM_THREADS"] = str(args.threads)  # read at the libraries' first call
    limits = Limits(max_chars=args.max_chars, max_queue=args.max_queue, timeout=args.timeout)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port number: give one from 0 to 65535")
    for proxy in args.trusted_proxy:
        try:
            ipaddress.ip_network(proxy)
        except ValueError:
            raise UserError(f"--trusted-proxy {proxy} is not an IP address or network: give "
                            "the proxy's address as it connects, e.g. 127.0.0.1 or "
                            "10.0.0.0/8") from None
    if args.web is not None:
        missing = [name for name in ("index.html", "model/manifest.json")
                   if not (Path(args.web) / name).is_file()]
        if missing:
            raise UserError(f"--web {args.web} is not a web folder (it has no "
                            f"{' or '.join(missing)}): build one with `snakemake --cores 2 web` "
                            "and give results/web")
    folder = ModelFolder(_model_path(args))
    folder.check_lstm(args.lstm)
    started = time.perf_counter()
    tts = ready_model(folder, engine=_engine(args, folder), lstm=args.lstm,
                      max_frames=chunk_frames(args.max_chunk_seconds))
    print(f"kokoro-tvm: {folder.path} ready in {time.perf_counter() - started:.1f} s "
          f"({len(tts.voices)} voices, {_engine_name(args, tts)})", file=sys.stderr)
    run_server(tts, args.host, args.port, limits, args.api_key, args.grace_period,
               args.send_timeout, args.trusted_proxy, args.web)
    return 0


def _model_argument(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--model",
                       help="a model folder: results/dist/TARGET of a build, or a copy of it "
                            f"anywhere (default: {DEFAULT_MODEL})")
    where.add_argument("--target",
                       help="the model folder this build wrote for TARGET (cuda, llvm_int8, "
                            "...): --target cuda is --model " + paths.DIST.format(target="cuda"))


def _model_path(args: argparse.Namespace) -> str:
    if args.model:
        return args.model
    return paths.DIST.format(target=args.target) if args.target else DEFAULT_MODEL


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kokoro-tvm", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True)
    p = commands.add_parser("say", help="synthesize text to an audio file")
    p.add_argument("text", nargs="?", help="the text to speak; - reads standard input (or --file)")
    p.add_argument("--file", help="read the text from this UTF-8 file (any length)")
    p.add_argument("-o", "--output", required=True,
                   help="audio file to write: .wav, .flac, .ogg (.mp3 where libsndfile has it); "
                        f"{SAMPLE_RATE // 1000} kHz mono; with --stream, - writes raw 16-bit PCM "
                        "to stdout as each chunk finishes")
    _model_argument(p)
    p.add_argument("--voice", default=DEFAULT_VOICE,
                   help="a voice name or a blend like af_heart:0.7,am_adam:0.3 (kokoro-tvm voices)")
    p.add_argument("--lang", default=None, choices=g2p.LANGUAGES,
                   help="the G2P's language (default: the voice's, from its first letter)")
    p.add_argument("--speed", type=float, default=1.0,
                   help="{} to {} (default 1: Kokoro's normal pace)".format(*SPEED_RANGE))
    p.add_argument("--seed", type=int, default=0,
                   help="0 to 2**64-1: seeds SineGen's noise (the same seed, the same audio)")
    p.add_argument("--engine", default="tvm", choices=ENGINES,
                   help="tvm: the compiled libraries (default); torch: the PyTorch reference on "
                        "the same weights (needs kokoro-tvm[build])")
    p.add_argument("--lstm", default=None,
                   help="LSTM lowering to use when the folder has several (tvm engine)")
    p.add_argument("--subtitles", metavar="PATH",
                   help="also write the words' timings as subtitles: .srt or .vtt (with --stream, "
                        "each line as soon as it is final)")
    p.add_argument("--stream", action="store_true",
                   help="one chunk per sentence, reported (and with -o -, written) as it finishes")
    p.add_argument("--verbose", action="store_true",
                   help="print first-audio latency and per-stage times")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar over the text's sentences (default: on a terminal, "
                        "unless --stream or --verbose print per-chunk lines)")
    p.set_defaults(run=say)
    s = commands.add_parser("serve", help="serve OpenAI's speech API (POST /v1/audio/speech)")
    _model_argument(s)
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    s.add_argument("--port", type=int, default=8880, help="port to listen on (default 8880)")
    s.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on every /v1 route")
    s.add_argument("--engine", default="tvm", choices=ENGINES,
                   help="tvm: the compiled libraries (default); torch: the PyTorch reference")
    s.add_argument("--lstm", default=None, help="LSTM lowering, as for say")
    s.add_argument("--max-chars", type=int, default=4096,
                   help="longest 'input' accepted, in characters (default 4096, OpenAI's)")
    s.add_argument("--max-queue", type=int, default=16,
                   help="speech requests admitted at once; more get 503 (default 16)")
    s.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a speech request may take from admission (default 600)")
    s.add_argument("--max-chunk-seconds", type=float, default=DEFAULT_MAX_CHUNK_SECONDS,
                   help="longest audio decoded in one call (default %(default)s): longer "
                        "sentences are split at a clause or word boundary, so that no call "
                        "holds the engine (and its memory) long while others wait")
    s.add_argument("--threads", type=int, default=None,
                   help="threads the libraries run on (default: the cores this process may "
                        "use, within a container's CPU limit)")
    s.add_argument("--send-timeout", type=float, default=60.0,
                   help="seconds a client may leave its audio unread before it is dropped and "
                        "its request ended (default 60, nginx's send_timeout; Linux)")
    s.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDRESS",
                   help="a reverse proxy's address or network (repeat for more): requests from "
                        "it are logged as from the client its X-Forwarded-For names; from any "
                        "other address the header is ignored (default: no proxy is trusted)")
    s.add_argument("--grace-period", type=float, default=25.0,
                   help="seconds the requests in flight may take to finish after SIGTERM "
                        "(default 25: within Kubernetes' 30 s before it kills); /health "
                        "answers 503 meanwhile and new requests are refused")
    s.add_argument("--web", default=None, metavar="FOLDER",
                   help="also serve a web folder (results/web of `snakemake web`: the page that "
                        "speaks in the browser, on WebGPU) at /web/")
    s.set_defaults(run=serve)
    v = commands.add_parser("voices", help="list the voices of a model folder: name, language, "
                                           "gender, and why any cannot be spoken here")
    _model_argument(v)
    v.set_defaults(run=voices)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("say", "serve") and args.engine == "tvm":
        from kokoro_tvm.runtime.process import speak_only

        speak_only()
    try:
        return args.run(args)
    except UserError as err:
        print(f"kokoro-tvm: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
