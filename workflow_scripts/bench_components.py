#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.bench_components (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.measure import bench_components
from kokoro_tvm.script_args import (
    add_model_arguments,
    add_threads_argument,
    check_threads,
    stage_parser,
)


def main() -> None:
    parser = stage_parser(bench_components)
    parser.add_argument("--manifest", required=True, help=paths.MANIFEST)
    add_model_arguments(parser)
    parser.add_argument("--params", nargs="+", required=True,
                        help=f"{paths.PARAMS} of every component")
    add_threads_argument(parser)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per function")
    parser.add_argument("--token-lengths", type=int, nargs="+", metavar="TOKENS",
                        help="time the token components' buckets that serve these lengths "
                             "(with --frame-lengths; both omitted: every library)")
    parser.add_argument("--frame-lengths", type=int, nargs="+", metavar="FRAMES",
                        help="the same for the frame components")
    parser.add_argument("--out-json", required=True, help=paths.BENCH_COMPONENTS)
    parser.add_argument("--out-plot", required=True, help=paths.BENCH_COMPONENTS_PLOT)
    args = parser.parse_args()
    check_threads(parser, args)
    if (args.token_lengths is None) != (args.frame_lengths is None):
        parser.error("give both --token-lengths and --frame-lengths, or neither (every library)")
    if any(n < 1 for n in (args.token_lengths or []) + (args.frame_lengths or [])):
        parser.error("lengths count tokens or frames: give whole numbers of at least 1")
    lengths = None if args.token_lengths is None else {
        "tokens": args.token_lengths, "frames": args.frame_lengths}
    document = bench_components.run(args.manifest, args.checkpoint, args.model_config,
                                    args.params, args.threads, args.out_json, args.out_plot,
                                    args.repeats, lengths)
    print(json.dumps(document, indent=1))


if __name__ == "__main__":
    sys.exit(run_script(main))
