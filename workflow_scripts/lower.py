#!/usr/bin/env python3
"""Apply a target's Relax pipeline to an imported module, stopping before code generation."""
import argparse
import json
import sys

from kokoro_tvm import stages
from kokoro_tvm.errors import run_script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--relax", required=True, help="results/relax/{component}/{lstm}/b{bucket}.json")
    parser.add_argument("--target-options", required=True,
                        help='TVM target in dict form, as JSON, e.g. {"kind": "llvm", "mcpu": "host"}')
    parser.add_argument("--out", required=True, help="results/lowered/{target}/{component}/{lstm}/b{bucket}.json")
    args = parser.parse_args()
    stages.lower(args.relax, json.loads(args.target_options), args.out)


if __name__ == "__main__":
    sys.exit(run_script(main))
