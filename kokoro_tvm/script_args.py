"""Command-line options several workflow scripts share."""
from __future__ import annotations

import argparse

from kokoro_tvm import paths


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The KModel asset files a stage loads the PyTorch model from."""
    parser.add_argument("--checkpoint", required=True, help=paths.ASSET_WEIGHTS)
    parser.add_argument("--model-config", required=True, help=paths.ASSET_CONFIG)
