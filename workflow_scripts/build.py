#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.build.build (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.facts import COMPONENT_NAMES
from kokoro_tvm.script_args import add_lstm_argument, add_target_options_argument, stage_parser
from kokoro_tvm.stages.build import build
from kokoro_tvm.stages.common import without_torch
from kokoro_tvm.stages.forkserver import run_stage


def main() -> None:
    parser = stage_parser(build)
    parser.add_argument("--lowered", required=True, help=paths.LOWERED)
    parser.add_argument("--params", required=True,
                        help=f"{paths.PARAMS} (hashed into the metadata)")
    parser.add_argument("--target", required=True, help="the target's name in config.yaml")
    add_target_options_argument(parser)
    parser.add_argument("--component", required=True, choices=COMPONENT_NAMES)
    add_lstm_argument(parser)
    parser.add_argument("--bucket", required=True, type=int)
    parser.add_argument("--out", required=True,
                        help=f"{paths.LIBRARY}, or for webgpu {paths.PLAN}")
    parser.add_argument("--out-meta", required=True, help=paths.LIBRARY_META)
    args = parser.parse_args()
    without_torch()
    dims = {"component": args.component, "lstm": args.lstm, "bucket": args.bucket}
    meta = build(args.lowered, args.params, args.target, args.target_options,
                 dims, args.out, args.out_meta)
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    sys.exit(run_stage(main, "tvm"))
