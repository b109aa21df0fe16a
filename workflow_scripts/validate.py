#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.validate.validate (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.facts import COMPONENT_NAMES
from kokoro_tvm.script_args import add_lstm_argument, add_target_options_argument, stage_parser
from kokoro_tvm.stages.common import without_torch
from kokoro_tvm.stages.forkserver import run_stage
from kokoro_tvm.stages.validate import validate


def main() -> None:
    parser = stage_parser(validate)
    parser.epilog = "TVM's threads come from TVM_NUM_THREADS (all cores unset)."
    parser.add_argument("--component", required=True, choices=COMPONENT_NAMES)
    add_lstm_argument(parser)
    parser.add_argument("--bucket", required=True, type=int)
    parser.add_argument("--library", required=True, help=paths.LIBRARY)
    parser.add_argument("--params", required=True, help=paths.PARAMS)
    parser.add_argument("--reference", help=f"{paths.REFERENCE} (none where this machine "
                        "cannot run the library: its report says why)")
    add_target_options_argument(parser)
    parser.add_argument("--out", required=True, help=paths.VALIDATION)
    args = parser.parse_args()
    without_torch()
    report = validate(args.component, args.lstm, args.bucket, args.library, args.params,
                      args.reference, args.out, args.target_options)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(run_stage(main, "tvm"))
