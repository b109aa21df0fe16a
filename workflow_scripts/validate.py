#!/usr/bin/env python3
"""Check a built library against the PyTorch component on the same inputs; exit 1 if it fails."""
import argparse
import json
import sys

from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import add_model_arguments
from kokoro_tvm.stages.validate import validate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_arguments(parser)
    parser.add_argument("--component", required=True)
    parser.add_argument("--lstm", required=True, help="the library's LSTM method (none, tir, ...)")
    parser.add_argument("--bucket", required=True, type=int)
    parser.add_argument("--library", required=True)
    parser.add_argument("--params", required=True)
    parser.add_argument("--seed", type=int, default=0, help="seeds the example inputs")
    parser.add_argument("--target-options", default='{"kind": "llvm"}',
                        help="the library's TVM target in dict form, as JSON (where it runs)")
    parser.add_argument("--threads", type=int, default=None,
                        help="PyTorch's threads (TVM's come from TVM_NUM_THREADS, set before it "
                             "starts); recorded in the report")
    parser.add_argument("--out", required=True, help="results/validate/{target}/{component}/{lstm}/b{bucket}.json")
    args = parser.parse_args()
    report = validate(args.checkpoint, args.model_config, args.component, args.lstm, args.bucket,
                      args.library, args.params, args.seed, args.out,
                      json.loads(args.target_options), args.threads)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(run_script(main))
