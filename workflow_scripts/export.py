#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.export.export (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.facts import COMPONENT_NAMES
from kokoro_tvm.script_args import add_model_arguments, stage_parser
from kokoro_tvm.stages.export import export
from kokoro_tvm.stages.forkserver import run_stage


def main() -> None:
    parser = stage_parser(export)
    add_model_arguments(parser)
    parser.add_argument("--component", required=True, choices=COMPONENT_NAMES)
    parser.add_argument("--out", required=True, help=paths.EXPORT)
    args = parser.parse_args()
    export(args.checkpoint, args.model_config, args.component, args.out)


if __name__ == "__main__":
    sys.exit(run_stage(main, "torch"))
