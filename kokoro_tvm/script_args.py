"""Command-line options several workflow scripts share."""
from __future__ import annotations

import argparse

from kokoro_tvm import paths


def require_options(parser: argparse.ArgumentParser, args: argparse.Namespace,
                    needed: tuple[str, ...]) -> None:
    """Exits with a usage error naming those of ``needed`` (destinations) that were not given:
    the options the chosen ``--source`` reads."""
    missing = ["--" + key.replace("_", "-") for key in needed if getattr(args, key) is None]
    if missing:
        parser.error(f"--source {args.source} needs {' and '.join(missing)}")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The KModel asset files a stage loads the PyTorch model from."""
    parser.add_argument("--checkpoint", required=True, help=paths.ASSET_WEIGHTS)
    parser.add_argument("--model-config", required=True, help=paths.ASSET_CONFIG)
