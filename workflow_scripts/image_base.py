#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.image.describe_base (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.atomic import write_json
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import stage_parser
from kokoro_tvm.stages.image import describe_base


def main() -> None:
    parser = stage_parser(describe_base)
    parser.add_argument("--base", required=True, help="the image it starts FROM (image.base)")
    parser.add_argument("--builder", required=True, choices=["podman", "docker"])
    parser.add_argument("--out", required=True, help=paths.IMAGE_BASE)
    args = parser.parse_args()
    write_json(args.out, describe_base(args.builder, args.base))


if __name__ == "__main__":
    sys.exit(run_script(main))
