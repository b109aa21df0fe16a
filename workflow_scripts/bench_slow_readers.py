#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.bench_slow_readers (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.measure import bench_slow_readers
from kokoro_tvm.script_args import stage_parser


def main() -> None:
    parser = stage_parser(bench_slow_readers)
    parser.add_argument("--model", required=True, help="a model folder (results/dist/TARGET)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runtime-python",
                        help="run the server with this interpreter: that of a runtime-only "
                             "install with the serve extra (no PyTorch), as it is deployed")
    parser.add_argument("--out-json", required=True, help=paths.BENCH_SLOW_READERS)
    args = parser.parse_args()
    figures = bench_slow_readers.run(args.model, args.threads, args.out_json,
                                     args.runtime_python)
    print(bench_slow_readers.summary(figures))


if __name__ == "__main__":
    sys.exit(run_script(main))
