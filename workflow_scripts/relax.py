#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.relax.relax (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import add_lstm_argument, stage_parser
from kokoro_tvm.stages.relax import relax


def main() -> None:
    parser = stage_parser(relax)
    parser.add_argument("--exported", required=True, help=paths.EXPORT)
    add_lstm_argument(parser)
    parser.add_argument("--out", required=True, help=paths.RELAX)
    args = parser.parse_args()
    print(json.dumps(relax(args.exported, args.lstm, args.out)))


if __name__ == "__main__":
    sys.exit(run_script(main))
