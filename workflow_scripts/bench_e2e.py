#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.bench_e2e (its docstring is the --help)."""
import json
import sys
from pathlib import Path

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.facts import DEFAULT_VOICE
from kokoro_tvm.measure import bench_e2e
from kokoro_tvm.runtime.model_folder import DEFAULT_TARGET
from kokoro_tvm.script_args import add_engines_argument, chosen_engines, stage_parser


def main() -> None:
    parser = stage_parser(bench_e2e)
    parser.add_argument("--root", default=".", help="folder holding results/")
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--voice", default=DEFAULT_VOICE)
    add_engines_argument(parser, bench_e2e.ENGINES)
    parser.add_argument("--rounds", type=int, default=bench_e2e.ROUNDS,
                        help="measuring rounds, engines taking turns (median reported)")
    parser.add_argument("--runtime-python", default=None,
                        help="run the TVM engine with this interpreter: that of a runtime-only "
                             "install (pip install kokoro-tvm), so that its peak memory is a "
                             "deployment's, without PyTorch")
    parser.add_argument("--text", default=None,
                        help="a text file, one sentence per line, timed instead of the "
                             "benchmark's own sentences; its lines joined are the one text "
                             "streamed for first audio and stalls")
    parser.add_argument("--out-json", required=True, help=paths.BENCH_E2E)
    parser.add_argument("--out-plot", required=True, help=paths.BENCH_E2E_PLOT)
    args = parser.parse_args()
    engines = chosen_engines(parser, args, bench_e2e.ENGINES)
    texts, streams = bench_e2e.SENTENCES, bench_e2e.STREAMED
    if args.text:
        try:
            lines = Path(args.text).read_text(encoding="utf-8").splitlines()
        except OSError as err:
            parser.error(f"--text {args.text}: {err.strerror}")
        except UnicodeDecodeError:
            parser.error(f"--text {args.text}: not UTF-8 text; give a UTF-8 file, one sentence "
                         "per line")
        texts = [line.strip() for line in lines if line.strip()]
        if not texts:
            parser.error(f"--text {args.text}: no sentence in the file")
        streams = {"text": " ".join(texts)}
    figures = bench_e2e.run(args.root, args.target, args.threads, args.voice,
                            engines, args.rounds, args.out_json, args.out_plot,
                            args.runtime_python, texts, streams)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    sys.exit(run_script(main))
