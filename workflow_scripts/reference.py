#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.reference.reference (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.facts import COMPONENT_NAMES
from kokoro_tvm.script_args import add_model_arguments, stage_parser
from kokoro_tvm.stages.common import keep_freed_memory
from kokoro_tvm.stages.forkserver import run_stage
from kokoro_tvm.stages.reference import reference


def main() -> None:
    parser = stage_parser(reference)
    add_model_arguments(parser)
    parser.add_argument("--component", required=True, choices=COMPONENT_NAMES)
    parser.add_argument("--bucket", required=True, type=int)
    parser.add_argument("--seed", type=int, default=0, help="seeds the example inputs")
    parser.add_argument("--out", required=True, help=paths.REFERENCE)
    args = parser.parse_args()
    keep_freed_memory()
    reference(args.checkpoint, args.model_config, args.component, args.bucket, args.out,
              args.seed)


if __name__ == "__main__":
    sys.exit(run_stage(main, "torch"))
