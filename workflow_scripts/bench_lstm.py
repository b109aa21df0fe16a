#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.bench_lstm (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.measure import bench_lstm
from kokoro_tvm.script_args import add_threads_argument, check_threads, stage_parser


def main() -> None:
    parser = stage_parser(bench_lstm)
    parser.add_argument("--manifest", required=True, help=paths.MANIFEST)
    parser.add_argument("--params", nargs="+", required=True,
                        help=f"{paths.PARAMS} of the LSTM components")
    add_threads_argument(parser)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per library")
    parser.add_argument("--out-json", required=True, help=paths.BENCH_LSTM)
    parser.add_argument("--out-plot", required=True, help=paths.BENCH_LSTM_PLOT)
    args = parser.parse_args()
    check_threads(parser, args)
    document = bench_lstm.run(args.manifest, args.params, args.threads, args.out_json,
                              args.out_plot, args.repeats)
    print(json.dumps(document, indent=1))


if __name__ == "__main__":
    sys.exit(run_script(main))
