#!/usr/bin/env python3
"""Write results/dist/{target}/: a target's validated libraries, their weights, the model config
and the voices, with a manifest relative to the folder, ready to copy anywhere."""
import argparse
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.stages.dist import write_dist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", required=True, help=paths.MANIFEST)
    parser.add_argument("--model-config", required=True, help=paths.ASSET_CONFIG)
    parser.add_argument("--voices", nargs="+", required=True, help=paths.ASSET_VOICE)
    parser.add_argument("--out", required=True, help=paths.DIST)
    args = parser.parse_args()
    document = write_dist(args.manifest, args.model_config, args.voices, args.out)
    print(f"{args.out}: {len(document['libraries'])} libraries, {len(document['voices'])} voices"
          f" ({len(document['left_out'])} not validated here, left out)")


if __name__ == "__main__":
    sys.exit(run_script(main))
