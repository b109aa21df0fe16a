#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.validation_report (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.measure import validation_report
from kokoro_tvm.script_args import stage_parser


def main() -> None:
    parser = stage_parser(validation_report)
    parser.add_argument("--target", required=True)
    parser.add_argument("--validations", nargs="+", required=True,
                        help=paths.VALIDATION)
    parser.add_argument("--out", required=True, help=paths.REPORT_VALIDATION)
    args = parser.parse_args()
    print(json.dumps(validation_report.validation_table(args.validations, args.target, args.out)))


if __name__ == "__main__":
    sys.exit(run_script(main))
