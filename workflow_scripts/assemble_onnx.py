#!/usr/bin/env python3
"""Command line of kokoro_tvm.assets.int8_onnx.assemble_onnx (its docstring is the --help)."""
import sys

from kokoro_tvm.assets.int8_onnx import assemble_onnx
from kokoro_tvm.errors import run_script
from kokoro_tvm.script_args import stage_parser


def main() -> None:
    parser = stage_parser(assemble_onnx)
    parser.add_argument("--out", required=True, help="where to write the .onnx file")
    args = parser.parse_args()
    print(f"{args.out}: sha256 {assemble_onnx(args.out)}")


if __name__ == "__main__":
    sys.exit(run_script(main))
