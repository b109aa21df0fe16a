#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.dist.write_dist (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import stage_parser
from kokoro_tvm.stages.dist import write_dist


def main() -> None:
    parser = stage_parser(write_dist)
    parser.add_argument("--manifest", required=True, help=paths.MANIFEST)
    parser.add_argument("--model-config", required=True, help=paths.ASSET_CONFIG)
    parser.add_argument("--voices", nargs="+", required=True, help=paths.ASSET_VOICE)
    parser.add_argument("--out", required=True, help=paths.DIST)
    args = parser.parse_args()
    document = write_dist(args.manifest, args.model_config, args.voices, args.out)
    print(f"{args.out}: {len(document['libraries'])} libraries, {len(document['voices'])} voices"
          f" ({len(document['left_out'])} left out: they failed validation)")


if __name__ == "__main__":
    sys.exit(run_script(main))
