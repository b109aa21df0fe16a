#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.spectrogram (its docstring is the --help)."""
import json
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.facts import DEFAULT_VOICE
from kokoro_tvm.measure import spectrogram
from kokoro_tvm.runtime.model_folder import DEFAULT_TARGET
from kokoro_tvm.script_args import stage_parser


def main() -> None:
    parser = stage_parser(spectrogram)
    parser.add_argument("--root", default=".", help="folder holding results/")
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--sentence", required=True)
    parser.add_argument("--voice", default=DEFAULT_VOICE)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help=paths.REPORT_SPECTROGRAM)
    args = parser.parse_args()
    figures = spectrogram.spectrogram_comparison(args.root, args.target, args.sentence,
                                                 args.voice, args.out, args.seed)
    print(json.dumps(figures))


if __name__ == "__main__":
    sys.exit(run_script(main))
