#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.manifest.manifest (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import stage_parser
from kokoro_tvm.stages.manifest import manifest


def main() -> None:
    parser = stage_parser(manifest)
    parser.add_argument("--target", required=True)
    parser.add_argument("--metas", nargs="+", required=True, help="the libraries' .meta.json files")
    parser.add_argument("--validations", nargs="+", required=True,
                        help="their validation reports, in the same order")
    parser.add_argument("--out", required=True, help=paths.MANIFEST)
    args = parser.parse_args()
    document = manifest(args.metas, args.validations, args.target, args.out)
    print(f"{args.out}: {len(document['libraries'])} libraries")


if __name__ == "__main__":
    sys.exit(run_script(main))
