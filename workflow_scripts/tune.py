#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.tune.tune (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import add_target_options_argument, stage_parser
from kokoro_tvm.stages.common import without_torch
from kokoro_tvm.stages.tune import tune


def main() -> None:
    parser = stage_parser(tune)
    parser.add_argument("--relax", required=True, help=paths.RELAX)
    parser.add_argument("--bucket", required=True, type=int, help="the length to bind")
    add_target_options_argument(parser)
    parser.add_argument("--max-trials", type=int, required=True, help="measured candidates in all")
    parser.add_argument("--trials-per-task", type=int, required=True,
                        help="measured candidates per kernel at most")
    parser.add_argument("--threads", type=int, default=1,
                        help="cores MetaSchedule measures candidates with")
    parser.add_argument("--out", required=True,
                        help=f"{paths.TUNE} (a folder)")
    args = parser.parse_args()
    without_torch()
    figures = tune(args.relax, args.bucket, args.target_options, args.max_trials,
                   args.trials_per_task, args.out, args.threads)
    print(json.dumps(figures))


if __name__ == "__main__":
    sys.exit(run_script(main))
