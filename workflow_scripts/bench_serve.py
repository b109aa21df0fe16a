#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.bench_serve (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.measure import bench_serve
from kokoro_tvm.script_args import stage_parser


def main() -> None:
    parser = stage_parser(bench_serve)
    parser.add_argument("--model", required=True, help="a model folder (results/dist/TARGET)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engines", default=",".join(bench_serve.ENGINES),
                        help="comma-separated, from: " + ", ".join(bench_serve.ENGINES))
    parser.add_argument("--runtime-python",
                        help="run the TVM server with this interpreter: that of a runtime-only "
                             "install with the serve extra (no PyTorch), as it is deployed")
    parser.add_argument("--out-json", required=True, help=paths.BENCH_SERVE)
    args = parser.parse_args()
    engines = args.engines.split(",")
    unknown = [name for name in engines if name not in bench_serve.ENGINES]
    if unknown:
        parser.error(f"--engines: unknown engine {', '.join(map(repr, unknown))}; choose from "
                     f"{', '.join(bench_serve.ENGINES)}, separated by commas")
    figures = bench_serve.run(args.model, engines, args.threads, args.out_json,
                             args.runtime_python)
    print(bench_serve.summary(figures))


if __name__ == "__main__":
    sys.exit(run_script(main))
