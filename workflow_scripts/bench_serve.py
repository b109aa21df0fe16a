#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.bench_serve (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.measure import bench_serve
from kokoro_tvm.script_args import add_engines_argument, chosen_engines, stage_parser


def main() -> None:
    parser = stage_parser(bench_serve)
    parser.add_argument("--model", required=True, help="a model folder (results/dist/TARGET)")
    parser.add_argument("--threads", type=int, default=2)
    add_engines_argument(parser, bench_serve.ENGINES)
    parser.add_argument("--runtime-python",
                        help="run the TVM server with this interpreter: that of a runtime-only "
                             "install with the serve extra (no PyTorch), as it is deployed")
    parser.add_argument("--out-json", required=True, help=paths.BENCH_SERVE)
    args = parser.parse_args()
    engines = chosen_engines(parser, args, bench_serve.ENGINES)
    figures = bench_serve.run(args.model, engines, args.threads, args.out_json,
                             args.runtime_python)
    print(bench_serve.summary(figures))


if __name__ == "__main__":
    sys.exit(run_script(main))
