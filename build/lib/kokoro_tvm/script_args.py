"""Command-line options several workflow scripts share."""
from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The KModel asset files a stage loads the PyTorch model from."""
    parser.add_argument("--checkpoint", required=True, help="results/assets/kokoro-82m.pth")
    parser.add_argument("--model-config", required=True, help="results/assets/config.json")
