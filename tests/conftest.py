"""Shared fixtures: the repository, a Snakemake runner in a scratch folder, the tiny config.

The suite runs in two pytest-xdist workers (pyproject's addopts), one module at a time each, so
that one fills the core the other leaves idle (serial compilation, Slurm's polling, pip). The
session fixtures that build or install are made once for both (``once``).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from filelock import FileLock

from kokoro_tvm.runtime.cuda import find_nvcc

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "tiny.yaml"
# The tiny config's one bucket, the same for every component.
TINY_BUCKET = 16
README = REPO / "README.md"
# The real build's buckets (tests/test_main_command.py): one default bucket per component, as few
# as the end-to-end tests need to speak short sentences in minutes on 2 cores. Sentences of up to
# 62 tokens fit 64 tokens; test_e2e's take 95-138 frames at speed 1, which 160 holds with little
# padding (the decoder's time grows with its bucket, and these tests speak dozens of sentences);
# the frame buckets' 64 is also a stream's lead (runtime/speech.py, LEAD_FRAMES), so that one
# short utterance can run through two buckets.
REAL_BUCKETS = {"bert": [64], "duration": [64], "text_encoder": [64], "f0n": [64, 160],
                "decoder": [64, 160]}
BIN = Path(sys.executable).parent
# Targets this machine builds but cannot run (tests/test_targets.py, tests/test_gpu.py).
OTHER_TARGETS = ["cuda", "aarch64", "macos_arm64", "metal"]
# Compiling CUDA kernels (building the cuda target, or a kernel's CUDA source) needs nvcc, which
# a fresh machine may lack; no test needs a GPU.
needs_nvcc = pytest.mark.skipif(
    find_nvcc() is None, reason="nvcc (NVIDIA's CUDA compiler) is not installed here: CUDA "
    "kernels cannot be compiled (install the CUDA toolkit, or put nvcc on PATH)")

# An utterance for the tiny build (tests/test_runtime.py, tests/test_runtime_only.py): token ids
# that are 16 tokens with the pads, and the speed at which the random weights' ~25 frames a
# token come to the 16 frames of the tiny config's one decoder bucket.
TINY_IDS = [50, 83, 54, 156, 57, 43, 44, 45, 46, 47, 48, 50, 51, 52]
TINY_SPEED = 40.0

# Modules that start the shared builds (real_built, built), then the longest, in that order; the
# rest keep pytest's order. A worker takes the next module when it finishes one: started first,
# the builds are ready before the modules behind them ask, and the longest modules do not end
# the run alone.
FIRST_MODULES = ["test_e2e.py", "test_cli.py", "test_slurm.py", "test_gpu.py", "test_serve.py",
                 "test_compile.py",
                 "test_runtime_only.py", "test_pipeline.py", "test_targets.py", "test_lstm.py",
                 "test_tune.py", "test_int8_onnx.py", "test_assets.py", "test_reference.py",
                 "test_padding.py"]
if missing := [name for name in FIRST_MODULES if not (REPO / "tests" / name).is_file()]:
    raise RuntimeError(f"tests/conftest.py's FIRST_MODULES names no module {missing}: rename "
                       "them there too")


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return FIRST_MODULES.index(name) if name in FIRST_MODULES else len(FIRST_MODULES)

    items.sort(key=rank)  # stable: each module's own order stays


def run_folder(tmp_path_factory) -> Path:
    """The run's scratch folder, which every worker's own is inside."""
    own = tmp_path_factory.getbasetemp()
    return own.parent if os.environ.get("PYTEST_XDIST_WORKER") else own


def once(tmp_path_factory, name: str, make: Callable[[Path], str]) -> str:
    """``make(folder)``'s answer, computed once per run for every xdist worker: the first to ask
    runs it under a file lock with a fresh ``folder`` of the run, the others wait and get the
    same answer (or its failure)."""
    shared = run_folder(tmp_path_factory)
    done, failed = shared / f"{name}.done", shared / f"{name}.failed"
    with FileLock(shared / f"{name}.lock"):
        if failed.exists():
            pytest.fail(f"{name} failed in another worker:\n{failed.read_text()}", pytrace=False)
        if not done.exists():
            try:
                done.write_text(make(shared / name))
            except Exception as error:
                failed.write_text(f"{type(error).__name__}: {error}")
                raise
        return done.read_text()


def model_folder(root: Path, target: str = "llvm") -> Path:
    """The model folder a build in ``root`` wrote for ``target``."""
    from kokoro_tvm import paths

    return paths.artifact(paths.DIST, root, target=target)


def run_snakemake(workdir: Path, *args: str, configfiles=(TINY,), check: bool = True,
                  snakefile: Path = REPO / "Snakefile",
                  command: Sequence[str] = ("snakemake", "--cores", "2"),
                  timeout: float | None = None) -> subprocess.CompletedProcess:
    """Runs ``command`` (its first word found in this environment, as an activated one would)
    on the workflow in ``workdir`` (results/ land there) with ``args`` and the given config
    overrides, for at most ``timeout`` seconds (subprocess.TimeoutExpired)."""
    command = [str(BIN / command[0]), *command[1:], "--snakefile", str(snakefile),
               "--directory", str(workdir), *args]
    if configfiles:  # last: --configfile takes every following word as a file
        command += ["--configfile", *map(str, configfiles)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def dry_run(workdir: Path, *args: str, snakefile: Path = REPO / "Snakefile",
            configfiles=(TINY,), **command) -> list[dict]:
    """The jobs `snakemake -n *args` in ``workdir`` would execute, in its order (empty: nothing
    to do): each job's rule, output as printed, input paths and wildcards."""
    done = run_snakemake(workdir, "-n", *args, snakefile=snakefile, configfiles=configfiles,
                         **command)
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", done.stdout + done.stderr):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        if not rule:
            continue
        fields = {name: re.search(rf"\n\s+{name}: (.*)", block)
                  for name in ("output", "input", "wildcards")}
        jobs.append({
            "rule": rule.group(1),
            "output": fields["output"].group(1) if fields["output"] else "",
            "inputs": {Path(p) for p in fields["input"].group(1).split(", ")}
            if fields["input"] else set(),
            "wildcards": dict(w.split("=", 1) for w in fields["wildcards"].group(1).split(", "))
            if fields["wildcards"] else {}})
    return jobs


def workflow_lock(workflow: Path) -> FileLock:
    """Held by a test that edits the shared workflow copy (tests/test_pipeline.py) and by the
    session's builds with it, so that no build in the other worker reads an edit."""
    return FileLock(workflow.with_name(f"{workflow.name}.edits.lock"))


@contextlib.contextmanager
def edited(workflow: Path, name: str) -> Iterator[None]:
    """The workflow copy's file ``name`` with a line appended (an edit, not a touch: Snakemake
    compares checksums of small inputs), restored afterwards with its timestamps; no build of
    the other worker runs meanwhile (``workflow_lock``)."""
    path = workflow / name
    with workflow_lock(workflow):
        original, stat = path.read_text(), path.stat()
        path.write_text(original + "\n# an edit\n")
        try:
            yield
        finally:
            path.write_text(original)
            os.utime(path, (stat.st_atime, stat.st_mtime))


def run_workflow(workdir: Path, workflow: Path, *args: str, **kwargs) -> None:
    """``run_snakemake`` with the shared ``workflow`` copy's Snakefile, under its lock."""
    with workflow_lock(workflow):
        run_snakemake(workdir, *args, snakefile=workflow / "Snakefile", **kwargs)


def snakemake_once(tmp_path_factory, name: str, *args: str, workflow: Path | None = None,
                   **kwargs) -> Path:
    """A folder of the run in which ``run_snakemake(folder, *args, **kwargs)`` ran once, with
    the checkout's Snakefile or the shared ``workflow`` copy's (under its lock)."""
    def make(folder: Path) -> str:
        if workflow is None:
            run_snakemake(folder, *args, **kwargs)
        else:
            run_workflow(folder, workflow, *args, **kwargs)
        return str(folder)

    return Path(once(tmp_path_factory, name, make))


def with_length(component: str, inputs: dict, length: int) -> dict:
    """``inputs`` of ``component`` with its mask marking the first ``length`` positions of the
    bucket valid and the rest padding (what they hold is left as it is)."""
    import torch

    from kokoro_tvm.components import COMPONENTS

    spec = COMPONENTS[component]
    mask = inputs[spec.mask_input]
    padding = torch.arange(mask.shape[-1])[None, :] >= length
    return dict(inputs, **{spec.mask_input: (~padding).to(mask.dtype) if spec.mask_marks_valid
                           else padding})


@pytest.fixture(scope="module")
def tiny_kmodel():
    """KModel with tests/data/tiny.yaml's random weights (seed 0), in eval mode, in Python: for
    tests of the PyTorch side and of single components that need no build."""
    import torch
    import yaml

    from kokoro_tvm.assets.model_config import kokoro_config
    from kokoro_tvm.model.kmodel import build_kmodel

    config = kokoro_config(yaml.safe_load(TINY.read_text())["weights"]["random_model"])
    torch.manual_seed(0)
    return build_kmodel(config, disable_complex=True).eval()


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> Path:
    """A scratch folder with the tiny random-weight assets built by the workflow."""
    return snakemake_once(tmp_path_factory, "tiny", "results/assets/kokoro-82m.pth",
                          "results/assets/voices/af_heart.npy")


@pytest.fixture(scope="session")
def real_assets(tmp_path_factory) -> Path:
    """A scratch folder with the default (real Kokoro-82M) assets built by the workflow."""
    return snakemake_once(tmp_path_factory, "real", "results/assets/kokoro-82m.pth",
                          "results/assets/voices/af_heart.npy",
                          "results/assets/voices/am_adam.npy", configfiles=())


# With the package's metadata and the deploy/ files, which the image stage builds from.
WORKFLOW_PARTS = ("Snakefile", "config.yaml", "rules", "workflow_scripts", "envs", "kokoro_tvm",
                  "deploy", "pyproject.toml", "README.md")


def copy_workflow(dest: Path, parts=WORKFLOW_PARTS) -> Path:
    """The workflow's files copied to ``dest``, so that edits to the checkout (or by a test)
    do not make a build stale through Snakemake's code rerun trigger."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in parts:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / part)
    return dest


@pytest.fixture(scope="session")
def workflow(tmp_path_factory) -> Path:
    """A copy of the workflow whose code files tests may edit without touching the repository
    (one for both workers: the builds below record its paths)."""
    return Path(once(tmp_path_factory, "workflow", lambda folder: str(copy_workflow(folder))))


def readme_build_command() -> list[str]:
    """The README's main command, the `snakemake` part of its install-and-build line, as
    words: what a newcomer runs first, so the tests run it as written."""
    lines = [line for line in README.read_text().splitlines()
             if "pip install" in line and "snakemake" in line]
    if len(lines) != 1:
        raise AssertionError(f"README.md has {len(lines)} install-and-build lines (pip install "
                             "... && snakemake ...), not one")
    command = lines[0].split("&&")[-1]
    words = shlex.split(command)
    if words[0] != "snakemake" or words[-1] != "all":
        raise AssertionError(f"the README's build command is not `snakemake ... all`: {command}")
    return words


def real_build_config() -> list[str]:
    """The ``--config`` words that narrow the default config.yaml to REAL_BUCKETS."""
    return ["--config", f"buckets={json.dumps(REAL_BUCKETS)}"]


@pytest.fixture(scope="session")
def real_built(workflow, tmp_path_factory) -> Path:
    """The README's main command, run as written on the default config.yaml (the real weights,
    every voice, target option and LSTM method) with REAL_BUCKETS."""
    return snakemake_once(tmp_path_factory, "real_built", *real_build_config(),
                          workflow=workflow, configfiles=(), command=readme_build_command())


@pytest.fixture(scope="session")
def real_int8_built(real_built, workflow, tmp_path_factory) -> Path:
    """``real_built`` with the int8 target (config.yaml's llvm_int8) built beside llvm; skips
    where this CPU cannot run int8 libraries (no AVX-512 VNNI)."""
    from kokoro_tvm.compile.quantize import missing_features
    from kokoro_tvm.compile.targets import make_target

    missing = missing_features(make_target({"kind": "llvm", "mcpu": "host"}))
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(missing)}: int8 libraries cannot run here")

    def make(_) -> str:
        run_workflow(real_built, workflow, "all", *real_build_config(),
                     'targets=["llvm","llvm_int8"]', configfiles=())
        return str(real_built)

    return Path(once(tmp_path_factory, "real_int8_built", make))


@pytest.fixture(scope="session")
def built(workflow, tmp_path_factory) -> Path:
    """A finished `snakemake all` on the tiny config."""
    return snakemake_once(tmp_path_factory, "built", "all", workflow=workflow)


# The tiny config with frame buckets that hold a word at speed 1 (the random weights give 150
# to 200 frames a word): a model that speaks any text, as noise, for the tests of what is done
# with its audio (files, the server's streams, whose chunks SPEAKING_CHUNK_SECONDS bounds to
# 256 frames); about 2 minutes on 2 cores.
SPEAKING_CONFIG = ["--config", 'targets=["llvm"]', "buckets=" + json.dumps(
    {"bert": [16], "duration": [16], "text_encoder": [16], "f0n": [64, 256],
     "decoder": [64, 256]})]
SPEAKING_CHUNK_SECONDS = "6.4"


@pytest.fixture(scope="session")
def speaking_built(workflow, tmp_path_factory) -> Path:
    """`snakemake all` on the tiny config with SPEAKING_CONFIG's buckets."""
    return snakemake_once(tmp_path_factory, "speaking_built", "all", *SPEAKING_CONFIG,
                          workflow=workflow)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """An empty folder on a filesystem of its own of 1 MiB (a tmpfs, mounted for the test: it
    needs root), for writes that meet a full disk (``fill``)."""
    folder = tmp_path / "small_disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs for a full disk needs root: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def fill(folder: Path) -> Path:
    """``folder``'s filesystem filled to its last byte by one file, which is returned."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
    return filler


def apt_lock(tmp_path_factory) -> FileLock:
    """Held while a fixture may install with apt: two workers' apt-get would fight for dpkg's
    lock, and the loser fails."""
    return FileLock(run_folder(tmp_path_factory) / "apt.lock")


def install_lavapipe(tmp_path_factory) -> None:
    """Mesa's lavapipe, the CPU Vulkan driver the webgpu target's libraries run on where there is
    no GPU (Debian's mesa-vulkan-drivers, installed with apt where missing: root)."""
    if list(Path("/usr/share/vulkan/icd.d").glob("lvp_icd.*.json")):
        return
    with apt_lock(tmp_path_factory):
        for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q",
                        "--no-install-recommends", "mesa-vulkan-drivers"]):
            subprocess.run(command, check=True, capture_output=True)


@pytest.fixture(scope="session")
def aarch64_env(tmp_path_factory) -> Path:
    """tools/cross/aarch64_env.sh's folder: the aarch64 target's cross linker, and Debian's
    arm64 Python under qemu-user with a runtime-only TVM (installed with apt if missing)."""
    def make(_) -> str:
        with apt_lock(tmp_path_factory):
            done = subprocess.run([str(REPO / "tools/cross/aarch64_env.sh")],
                                  env={**os.environ, "PYTHON": sys.executable},
                                  capture_output=True, text=True, check=True)
        return done.stdout.strip().splitlines()[-1]

    return Path(once(tmp_path_factory, "aarch64_env", make))


@pytest.fixture(scope="session")
def other_built(built, workflow, aarch64_env, tmp_path_factory) -> Path:
    """The tiny config's libraries of the other targets (cuda, aarch64, macos_arm64, metal, and
    webgpu, which runs here on WebGPU's adapter) beside its llvm ones, in a copy of ``built``
    (so that no test sees ``built`` change under it; the same workflow copy, so that the llvm
    build stays up to date); the aarch64 ones need the cross linker, the cuda ones nvcc (left
    out without it: the tests of them skip)."""
    targets = [t for t in OTHER_TARGETS if t != "cuda" or find_nvcc() is not None]
    targets.append("webgpu")

    def make(folder: Path) -> str:
        install_lavapipe(tmp_path_factory)
        shutil.copytree(built, folder, symlinks=True)
        run_workflow(folder, workflow, "all", "--config", f"targets={json.dumps(targets)}")
        return str(folder)

    return Path(once(tmp_path_factory, "other_built", make))


@pytest.fixture(scope="session")
def chromium(tmp_path_factory) -> str:
    """Debian's Chromium, installed with apt where it is missing (tests/test_page.py,
    tests/test_web.py)."""
    found = shutil.which("chromium")
    if found is None:
        with apt_lock(tmp_path_factory):
            if shutil.which("chromium") is None:
                done = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"],
                                      capture_output=True, text=True)
                assert done.returncode == 0, (
                    f"no chromium and apt-get could not install it (run `apt-get install "
                    f"chromium` as root):\n{done.stderr[-2000:]}")
        found = shutil.which("chromium")
    return found


@contextlib.contextmanager
def launched_chromium(executable: str, args: Sequence[str] = ()) -> Iterator[object]:
    """Headless Chromium at ``executable`` with ``args``, driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=list(args))
        try:
            yield launched
        finally:
            launched.close()


def only_origin(page, origin: str) -> list[str]:
    """Refuses every request of ``page`` to anywhere but ``origin``; the list it returns
    records them."""
    foreign: list[str] = []

    def route(request_route):
        url = request_route.request.url
        if url == origin or url.startswith(origin + "/"):
            request_route.continue_()
        else:
            foreign.append(url)
            request_route.abort()

    page.route("**/*", route)
    return foreign

