#!/usr/bin/env python3
"""Command line of kokoro_tvm.assets.sources.write_weights (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.assets.sources import SOURCE_OPTIONS, SOURCES, write_weights
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import require_options, stage_parser


def main() -> None:
    parser = stage_parser(write_weights)
    parser.add_argument("--source", required=True, choices=sorted(SOURCES))
    parser.add_argument("--onnx", help="assembled int8 ONNX (source int8-onnx)")
    parser.add_argument("--hf-repo", help="Hugging Face repository (source hf)")
    parser.add_argument("--checkpoint", help="KModel checkpoint (source path)")
    parser.add_argument("--model-config", help="config.json (source path)")
    parser.add_argument("--seed", type=int, default=0, help="source random")
    parser.add_argument("--random-model", default="{}",
                        help="JSON overrides of Kokoro-82M's hyperparameters (source random)")
    parser.add_argument("--out-checkpoint", required=True, help=paths.ASSET_WEIGHTS)
    parser.add_argument("--out-config", required=True, help=paths.ASSET_CONFIG)
    parser.add_argument("--out-provenance", required=True, help=paths.ASSET_PROVENANCE)
    args = parser.parse_args()
    require_options(parser, args, SOURCE_OPTIONS[args.source])
    settings = {"source": args.source, "hf_repo": args.hf_repo, "checkpoint": args.checkpoint,
                "model_config": args.model_config, "seed": args.seed,
                "random_model": json.loads(args.random_model)}
    provenance = write_weights(settings, args.out_checkpoint, args.out_config,
                               args.out_provenance, onnx_path=args.onnx)
    print(json.dumps({k: v for k, v in provenance.items() if not isinstance(v, (list, dict))}))


if __name__ == "__main__":
    sys.exit(run_script(main))
