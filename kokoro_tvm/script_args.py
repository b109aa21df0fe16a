"""The workflow scripts' command lines: their parser, and the options several share."""
from __future__ import annotations

import argparse
import inspect
import json

from kokoro_tvm import paths
from kokoro_tvm.facts import LSTM_METHOD_NAMES


def stage_parser(described) -> argparse.ArgumentParser:
    """A workflow script's parser whose --help is the docstring of what it runs (its stage
    function, or its measurement module): there, and only there, is the stage described."""
    return argparse.ArgumentParser(description=inspect.getdoc(described),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_engines_argument(parser: argparse.ArgumentParser, engines: tuple[str, ...]) -> None:
    """A benchmark's --engines: a comma-separated choice of ``engines``, all by default
    (read back with ``chosen_engines``)."""
    parser.add_argument("--engines", default=",".join(engines),
                        help="comma-separated, from: " + ", ".join(engines))


def chosen_engines(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   engines: tuple[str, ...]) -> list[str]:
    """The engines --engines names, or a usage error naming those not among ``engines``."""
    chosen = args.engines.split(",")
    unknown = [name for name in chosen if name not in engines]
    if unknown:
        parser.error(f"--engines: unknown engine {', '.join(map(repr, unknown))}; choose from "
                     f"{', '.join(engines)}, separated by commas")
    return chosen


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


def _target_options(text: str) -> dict:
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e})") from None
    if not isinstance(options, dict) or "kind" not in options:
        raise argparse.ArgumentTypeError("a TVM target in dict form with a 'kind' is needed")
    return options


def add_target_options_argument(parser: argparse.ArgumentParser) -> None:
    """--target-options: a target's entry of config.yaml's target_options, as JSON."""
    parser.add_argument("--target-options", required=True, type=_target_options,
                        help='the TVM target in dict form, as JSON, e.g. {"kind": "llvm", '
                             '"mcpu": "host"} (config.yaml: target_options)')


def add_lstm_argument(parser: argparse.ArgumentParser) -> None:
    """--lstm: how the component's LSTMs are lowered, checked before any work."""
    parser.add_argument("--lstm", required=True, choices=(paths.WITHOUT_LSTM, *LSTM_METHOD_NAMES),
                        help=f"LSTM lowering method ({paths.WITHOUT_LSTM} for a component "
                             "without LSTMs)")


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """--threads of a script that times TVM libraries: TVM reads its thread count from
    TVM_NUM_THREADS when it starts, so the two must agree (``check_threads``)."""
    parser.add_argument("--threads", type=int, required=True,
                        help="threads TVM runs with (set TVM_NUM_THREADS to the same)")


def check_threads(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    import os

    if os.environ.get("TVM_NUM_THREADS") != str(args.threads):
        parser.error(f"set TVM_NUM_THREADS={args.threads} (TVM reads it when it starts)")
