#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.lower.lower (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.compile.devices import PRECISIONS
from kokoro_tvm.script_args import add_target_options_argument, stage_parser
from kokoro_tvm.stages.common import without_torch
from kokoro_tvm.stages.forkserver import run_stage
from kokoro_tvm.stages.lower import lower


def main() -> None:
    parser = stage_parser(lower)
    parser.add_argument("--relax", required=True, help=paths.RELAX)
    parser.add_argument("--bucket", required=True, type=int, help="the length to bind")
    add_target_options_argument(parser)
    parser.add_argument("--out", required=True, help=paths.LOWERED)
    parser.add_argument("--tuning-db",
                        help="a MetaSchedule database folder (workflow_scripts/tune.py)")
    parser.add_argument("--precision", choices=PRECISIONS, default=PRECISIONS[0],
                        help="int8: the generator's convolutions quantized (CPUs with VNNI)")
    args = parser.parse_args()
    without_torch()
    lower(args.relax, args.bucket, args.target_options, args.out, args.tuning_db, args.precision)


if __name__ == "__main__":
    sys.exit(run_stage(main, "tvm"))
