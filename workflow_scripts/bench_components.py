#!/usr/bin/env python3
"""Time the libraries of a target's manifest against PyTorch eager (same inputs, same thread
count, in turns in one process); write JSON and a PNG plot of the time ratios. Every library,
or those that serve the lengths given (the smallest bucket that holds each, or the largest).

    TVM_NUM_THREADS=2 python workflow_scripts/bench_components.py --threads 2 \\
        --manifest results/manifest/llvm.json --checkpoint results/assets/kokoro-82m.pth \\
        --model-config results/assets/config.json --params results/params/*.npz \\
        --token-lengths 32 64 512 --frame-lengths 32 240 2048 \\
        --out-json results/bench/components/llvm.json --out-plot results/bench/components/llvm.png
"""
import argparse
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import add_model_arguments, add_threads_argument, check_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
    from kokoro_tvm.measure.bench_components import run

    document = run(args.manifest, args.checkpoint, args.model_config, args.params, args.threads,
                   args.out_json, args.out_plot, args.repeats, lengths)
    print(json.dumps(document, indent=1))


if __name__ == "__main__":
    sys.exit(run_script(main))
