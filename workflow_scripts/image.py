#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.image.build_image (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import stage_parser
from kokoro_tvm.stages.image import build_image


def main() -> None:
    parser = stage_parser(build_image)
    parser.add_argument("--folder", required=True, help=paths.DIST)
    parser.add_argument("--containerfile", required=True, help="deploy/Containerfile")
    parser.add_argument("--source", required=True, help="the package's source folder")
    parser.add_argument("--base", required=True, help=paths.IMAGE_BASE)
    parser.add_argument("--name", required=True, help="the image's name")
    parser.add_argument("--out", required=True, help=paths.IMAGE)
    args = parser.parse_args()
    built = build_image(args.folder, args.containerfile, args.source, args.out, args.base,
                        args.name)
    print(json.dumps(built))
    print(f"{args.out}: {built['image']}; load it with `{built['builder']} load -i {args.out}`")


if __name__ == "__main__":
    sys.exit(run_script(main))
