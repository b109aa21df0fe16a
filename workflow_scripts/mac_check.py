#!/usr/bin/env python3
"""Command line of kokoro_tvm.stages.mac_check.mac_check_bundle (its docstring is the --help)."""
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import stage_parser
from kokoro_tvm.stages.mac_check import mac_check_bundle


def main() -> None:
    parser = stage_parser(mac_check_bundle)
    parser.add_argument("--libraries", nargs="+", required=True, help=paths.LIBRARY)
    parser.add_argument("--metas", nargs="+", required=True, help=paths.LIBRARY_META)
    parser.add_argument("--params", nargs="+", required=True, help=paths.PARAMS)
    parser.add_argument("--model-config", required=True, help=paths.ASSET_CONFIG)
    parser.add_argument("--voice", required=True, help=paths.ASSET_VOICE)
    parser.add_argument("--source", required=True, help="the package's source folder")
    parser.add_argument("--seed", type=int, default=0, help="of the synthetic weights")
    parser.add_argument("--out", required=True, help=paths.MAC_CHECK)
    args = parser.parse_args()
    size = mac_check_bundle(args.libraries, args.metas, args.params, args.model_config,
                            args.voice, args.source, args.out, args.seed)
    print(f"{args.out}: {size / 2**20:.1f} MiB; on the Mac: see {args.out}/README.txt")


if __name__ == "__main__":
    sys.exit(run_script(main))
