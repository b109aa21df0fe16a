#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.web.write_web (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import stage_parser
from kokoro_tvm.stages.web import write_web


def main() -> None:
    parser = stage_parser(write_web)
    parser.add_argument("--folder", required=True, help=paths.DIST.format(target="webgpu"))
    parser.add_argument("--out", required=True, help=paths.WEB)
    args = parser.parse_args()
    document = write_web(args.folder, args.out)
    size = sum(entry["bytes"] for entry in document["files"].values())
    print(f"{args.out}: {len(document['libraries'])} plans, {len(document['voices'])} voices, "
          f"{len(document['files'])} files ({size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    sys.exit(run_script(main))
