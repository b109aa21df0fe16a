"""Shared fixtures: the repository, a Snakemake runner in a scratch folder, the tiny config."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "tiny.yaml"
REAL_SMALL = REPO / "tests" / "data" / "real_small.yaml"
BIN = Path(sys.executable).parent
# Targets this machine builds but cannot run (tests/test_targets.py, tests/test_gpu.py).
OTHER_TARGETS = ["cuda", "aarch64"]


def model_folder(root: Path, target: str = "llvm") -> Path:
    """The model folder a build in ``root`` wrote for ``target``."""
    from kokoro_tvm import paths

    return paths.artifact(paths.DIST, root, target=target)


def run_snakemake(workdir: Path, *args: str, configfiles=(TINY,), check: bool = True,
                  snakefile: Path = REPO / "Snakefile") -> subprocess.CompletedProcess:
    """Runs the workflow in ``workdir`` (results/ land there) with the given config overrides."""
    command = [str(BIN / "snakemake"), "--snakefile", str(snakefile), "--directory", str(workdir),
               "--cores", "2"]
    command += list(args)
    if configfiles:  # last: --configfile takes every following word as a file
        command += ["--configfile", *map(str, configfiles)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> Path:
    """A scratch folder with the tiny random-weight assets built by the workflow."""
    workdir = tmp_path_factory.mktemp("tiny")
    run_snakemake(workdir, "results/assets/kokoro-82m.pth", "results/assets/voices/af_heart.npy")
    return workdir


@pytest.fixture(scope="session")
def real_assets(tmp_path_factory) -> Path:
    """A scratch folder with the default (real Kokoro-82M) assets built by the workflow."""
    workdir = tmp_path_factory.mktemp("real")
    run_snakemake(workdir, "results/assets/kokoro-82m.pth", "results/assets/voices/af_heart.npy",
                  "results/assets/voices/am_adam.npy", configfiles=())
    return workdir


WORKFLOW_PARTS = ("Snakefile", "config.yaml", "rules", "workflow_scripts", "envs", "kokoro_tvm")


def copy_workflow(dest: Path, parts=WORKFLOW_PARTS) -> Path:
    """The workflow's files copied to ``dest``, so that edits to the checkout (or by a test)
    do not make a build stale through Snakemake's code rerun trigger."""
    for part in parts:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / part)
    return dest


@pytest.fixture(scope="session")
def workflow(tmp_path_factory) -> Path:
    """A copy of the workflow whose code files tests may edit without touching the repository."""
    return copy_workflow(tmp_path_factory.mktemp("workflow"))


@pytest.fixture(scope="session")
def real_built(workflow, tmp_path_factory) -> Path:
    """A finished `snakemake all` with the real weights and tests/data/real_small.yaml."""
    workdir = tmp_path_factory.mktemp("real_built")
    run_snakemake(workdir, "all", snakefile=workflow / "Snakefile", configfiles=(REAL_SMALL,))
    return workdir


@pytest.fixture(scope="session")
def real_int8_built(real_built, workflow) -> Path:
    """``real_built`` with the int8 target (config.yaml's llvm_int8) built beside llvm; skips
    where this CPU cannot run int8 libraries (no AVX-512 VNNI)."""
    from kokoro_tvm.compile.quantize import missing_features
    from kokoro_tvm.compile.targets import make_target

    missing = missing_features(make_target({"kind": "llvm", "mcpu": "host"}))
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(missing)}: int8 libraries cannot run here")
    run_snakemake(real_built, "all", "--config", 'targets=["llvm","llvm_int8"]',
                  snakefile=workflow / "Snakefile", configfiles=(REAL_SMALL,))
    return real_built


@pytest.fixture(scope="session")
def built(workflow, tmp_path_factory) -> Path:
    """A finished `snakemake all` on the tiny config."""
    workdir = tmp_path_factory.mktemp("built")
    run_snakemake(workdir, "all", snakefile=workflow / "Snakefile")
    return workdir


@pytest.fixture(scope="session")
def aarch64_env() -> Path:
    """tools/cross/aarch64_env.sh's folder: the aarch64 target's cross linker, and Debian's
    arm64 Python under qemu-user with a runtime-only TVM (installed with apt if missing)."""
    done = subprocess.run([str(REPO / "tools/cross/aarch64_env.sh")], capture_output=True,
                          text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def other_built(built, workflow, aarch64_env) -> Path:
    """The tiny config's cuda and aarch64 libraries beside its llvm ones (built with the same
    workflow copy, so that the llvm build stays up to date for the staleness tests); the
    aarch64 ones need the cross linker, whichever test asks first."""
    run_snakemake(built, "all", "--config", f"targets={json.dumps(OTHER_TARGETS)}",
                  snakefile=workflow / "Snakefile")
    return built
