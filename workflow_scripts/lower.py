#!/usr/bin/env python3
"""Apply a target's Relax pipeline to an imported module, stopping before code generation."""
import argparse
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.stages.common import without_torch
from kokoro_tvm.stages.lower import lower


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--relax", required=True, help=paths.RELAX)
    parser.add_argument("--target-options", required=True,
                        help='TVM target in dict form, as JSON, e.g. {"kind": "llvm", '
                             '"mcpu": "host"}')
    parser.add_argument("--out", required=True, help=paths.LOWERED)
    parser.add_argument("--tuning-db",
                        help="a MetaSchedule database folder (workflow_scripts/tune.py)")
    parser.add_argument("--precision", choices=("float32", "int8"), default="float32",
                        help="int8: the generator's convolutions quantized (CPUs with VNNI)")
    args = parser.parse_args()
    without_torch()
    lower(args.relax, json.loads(args.target_options), args.out, args.tuning_db, args.precision)


if __name__ == "__main__":
    sys.exit(run_script(main))
