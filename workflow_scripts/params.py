#!/usr/bin/env python3
"""Write one component's weights (.npz, named as its libraries' inputs), shared by all its
buckets."""
import argparse
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.facts import COMPONENT_NAMES
from kokoro_tvm.script_args import add_model_arguments
from kokoro_tvm.stages.params import write_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_arguments(parser)
    parser.add_argument("--component", required=True, choices=COMPONENT_NAMES)
    parser.add_argument("--out", required=True, help=paths.PARAMS)
    args = parser.parse_args()
    write_params(args.checkpoint, args.model_config, args.component, args.out)


if __name__ == "__main__":
    sys.exit(run_script(main))
