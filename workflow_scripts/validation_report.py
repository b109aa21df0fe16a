#!/usr/bin/env python3
"""One target's validation reports as an HTML table (for `snakemake --report`)."""
import argparse
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", required=True)
    parser.add_argument("--validations", nargs="+", required=True,
                        help=paths.VALIDATION)
    parser.add_argument("--out", required=True, help=paths.REPORT_VALIDATION)
    args = parser.parse_args()
    from kokoro_tvm.measure.validation_report import validation_table

    print(json.dumps(validation_table(args.validations, args.target, args.out)))


if __name__ == "__main__":
    sys.exit(run_script(main))
