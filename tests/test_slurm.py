"""Cluster builds on a real Slurm: the tiny config through profiles/slurm and slurm-generic.

A one-node Slurm cluster (munged, slurmctld, slurmd; tests/slurm/cluster.py) runs on localhost
for this module and is shut down by the fixture's finalizer, failures included. Debian's
packages are installed with apt-get when missing (docs/cluster.md, The test cluster).

Two of the tiny config's llvm libraries, the first and the last component (every stage from the
weights to validation), are built on the cluster and compared with the session's local build of
the same code (conftest's ``built``): bit-identical libraries and params, the same function
signatures, validations that pass. The other tests work on copies of the cluster build.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import conftest
import pytest
from conftest import BIN, TINY, apt_lock, copy_workflow, dry_run

from kokoro_tvm import paths

sys.path.insert(0, str(Path(__file__).parent / "slurm"))
from cluster import Cluster, install_with_apt, missing_programs  # noqa: E402

pytestmark = pytest.mark.slurm

WORKFLOW_PARTS = (*conftest.WORKFLOW_PARTS, "profiles")  # the cluster profiles too
# The libraries built on the cluster (the tiny config's one bucket, no LSTM): the build job the
# cancellation test interrupts, and the library the cluster-generic test rebuilds ("rebuild one
# bucket", README).
LIBRARY = {"target": "llvm", "lstm": "none", "bucket": 16}
DECODER_LIB = paths.LIBRARY.format(component="decoder", **LIBRARY)
BERT_LIB = paths.LIBRARY.format(component="bert", **LIBRARY)
# What the cluster builds: both libraries, validated.
VALIDATIONS = [paths.VALIDATION.format(component=c, **LIBRARY) for c in ("bert", "decoder")]
# Overrides of the profiles for a 2-CPU test cluster whose jobs take seconds: poll more often
# than a production profile should, and run validate on one CPU so that two library groups
# (one CPU each) share the node instead of queueing behind each other.
TEST_OVERRIDES = {
    "slurm": ["--slurm-init-seconds-before-status-checks", "1", "--set-threads", "validate=1"],
    "slurm-generic": ["--seconds-between-status-checks", "2", "--set-threads", "validate=1"],
}


@pytest.fixture(scope="module")
def slurm_workflow(tmp_path_factory) -> Path:
    """A copy of the workflow (profiles included), so that edits to the checkout while the
    module runs do not make its builds stale (Snakemake's code rerun trigger)."""
    return copy_workflow(tmp_path_factory.mktemp("workflow"), WORKFLOW_PARTS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if missing_programs():
        with apt_lock(tmp_path_factory):
            install_with_apt()
    # A short path: munge's socket path must fit in a sockaddr_un (108 bytes).
    root = Path(tmp_path_factory.mktemp("slurm"))
    cluster = Cluster(root, cpus=2)
    try:
        started = time.monotonic()
        cluster.start()
        print(f"slurm cluster up in {time.monotonic() - started:.1f} s")
        yield cluster
    finally:
        cluster.stop()
        left = cluster.running()
        assert not left, f"daemons still running after stop: {left}"


def on_cluster(cluster: Cluster, workflow: Path, workdir: Path, profile: str, *args: str,
               check: bool = True, wait: bool = True):
    """snakemake with ``profiles/{profile}`` in ``workdir``, talking to the test cluster.

    profiles/default is read as well (Snakemake's workflow profile beside the Snakefile): it
    holds the per-rule resources, the cluster profiles hold the executor settings and groups.
    """
    command = [str(BIN / "snakemake"), "--snakefile", str(workflow / "Snakefile"),
               "--directory", str(workdir), "--profile", str(workflow / "profiles" / profile),
               *args, *TEST_OVERRIDES[profile], "--configfile", str(TINY)]
    env = cluster.env({**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake --profile {profile} {' '.join(args)} failed:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def copy_build(source: Path, dest: Path) -> Path:
    """A copy of a finished build folder, Snakemake's metadata and timestamps included."""
    shutil.copytree(source, dest, symlinks=True,
                    ignore=shutil.ignore_patterns("locks", "incomplete", "slurm_logs"))
    return dest


def dry_run_jobs(workflow: Path, workdir: Path, *targets: str) -> list[str]:
    """The rules of the jobs a local dry run would execute (empty: nothing to do)."""
    return [job["rule"] for job in dry_run(workdir, *targets, snakefile=workflow / "Snakefile")]


def library_view(workdir: Path, library: str) -> dict:
    """What must not depend on where a library was built: its bytes' and its params' hashes
    and its function signatures (the build's .meta.json)."""
    meta = json.loads((workdir / library).with_suffix(".meta.json").read_text())
    return {key: meta[key] for key in ("library_sha256", "params_sha256", "functions")}


@pytest.fixture(scope="module")
def slurm_build(cluster, slurm_workflow, tmp_path_factory) -> tuple[Path, float, str]:
    """Both libraries and their validations, every job on the cluster through profiles/slurm."""
    workdir = tmp_path_factory.mktemp("onslurm")
    started = time.monotonic()
    done = on_cluster(cluster, slurm_workflow, workdir, "slurm", *VALIDATIONS)
    return workdir, time.monotonic() - started, done.stdout + done.stderr


def test_slurm_build_matches_the_local_build(slurm_build, built, cluster, slurm_workflow):
    workdir, seconds, log = slurm_build
    # The build strips the import's timings from the module (stages/build.py), so the same
    # code and inputs give the same library bytes, on the cluster or here.
    for library in (BERT_LIB, DECODER_LIB):
        assert library_view(workdir, library) == library_view(built, library), library
    for report in VALIDATIONS:
        assert json.loads((workdir / report).read_text())["passed"], report
        assert json.loads((built / report).read_text())["passed"], report

    # Every job ran on the cluster, grouped: count the Slurm jobs that ran.
    jobs = cluster.run("squeue", "--noheader", "--states=all", "--format=%i %T").stdout.split()
    states = dict(zip(jobs[::2], jobs[1::2]))
    submitted = log.count("has been submitted with SLURM jobid")
    print(f"\nslurm build {seconds:.0f} s, {submitted} slurm jobs ({sorted(set(states.values()))})")
    # One job for the assets, one per component's program, one per library.
    assert submitted == 5 and all(s == "COMPLETED" for s in states.values()), (submitted, states)
    # Nothing is left to do, locally or on the cluster.
    assert dry_run_jobs(slurm_workflow, workdir, *VALIDATIONS) == []


def test_slurm_generic_profile_rebuilds_one_library(cluster, slurm_workflow, slurm_build,
                                                    tmp_path):
    """`snakemake --profile profiles/slurm-generic <one library>` rebuilds just that library."""
    source, _, _ = slurm_build
    workdir = copy_build(source, tmp_path / "generic")
    library = workdir / BERT_LIB
    expected = json.loads(library.with_suffix(".meta.json").read_text())["library_sha256"]
    library.unlink()
    library.with_suffix(".meta.json").unlink()
    done = on_cluster(cluster, slurm_workflow, workdir, "slurm-generic", BERT_LIB)
    log = done.stdout + done.stderr
    assert log.count("with external jobid") == 1 and "rule build:" in log, log
    meta = json.loads(library.with_suffix(".meta.json").read_text())
    assert meta["library_sha256"] == expected


def test_cancelled_job_leaves_no_library_and_a_rerun_completes(cluster, slurm_workflow,
                                                                slurm_build,
                                                                tmp_path):
    """scancel while the decoder's build runs on the cluster: no library that looks finished;
    the next run builds it."""
    source, _, _ = slurm_build
    workdir = copy_build(source, tmp_path / "cancel")
    library = workdir / DECODER_LIB
    meta = library.with_suffix(".meta.json")
    library.unlink()
    meta.unlink()
    # No retry (profiles/slurm has one): this run is to end with the cancelled job.
    process = on_cluster(cluster, slurm_workflow, workdir, "slurm", DECODER_LIB, "--retries", "0",
                         wait=False)
    try:
        build_pid = wait_for_build_process(workdir, process, timeout=300)
        # Cancel once the library is being written (its temporary file exists, for about 5 s
        # of code generation and linking here), as tests/test_pipeline.py's kill does: a
        # writer that wrote the final name directly would leave a library that looks finished.
        wait_for_temporary_library(library, build_pid, timeout=300)
        assert Path(f"/proc/{build_pid}").exists(), "the build ended before it was cancelled"
        job_ids = cluster.run("squeue", "--noheader", "--states=RUNNING",
                              "--format=%i").stdout.split()
        assert job_ids, "no running slurm job"
        cluster.run("scancel", *job_ids)
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0, output
    assert wait_until_gone(build_pid, timeout=30), "the build survived scancel"
    assert not library.exists() and not meta.exists(), output
    # No other file under the library's name either (a temp file may remain; it is named
    # .b16.*.tmp.so and never taken for the library).
    # (Snakemake removes the folder it made for the failed job's outputs.)
    if library.parent.exists():
        assert not [p for p in library.parent.iterdir() if p.name.startswith("b16")]
    assert dry_run_jobs(slurm_workflow, workdir, DECODER_LIB) == ["build"]

    # The same request again. (Asking for the manifest instead would do nothing: Snakemake
    # does not rebuild a missing intermediate file whose consumers are up to date.)
    done = on_cluster(cluster, slurm_workflow, workdir, "slurm", DECODER_LIB)
    assert library.exists() and meta.exists(), done.stdout + done.stderr
    assert json.loads(meta.read_text())["library_sha256"] == json.loads(
        (source / DECODER_LIB).with_suffix(".meta.json").read_text())["library_sha256"]
    assert dry_run_jobs(slurm_workflow, workdir, DECODER_LIB) == []


def wait_for_build_process(workdir: Path, snakemake: subprocess.Popen, timeout: float) -> int:
    """The PID of workflow_scripts/build.py running in ``workdir`` (started by the cluster)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if snakemake.poll() is not None:
            raise AssertionError(f"snakemake ended before the build ran:\n"
                                 f"{snakemake.stdout.read()}")
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                command = (proc / "cmdline").read_bytes().split(b"\0")
                cwd = os.readlink(proc / "cwd")
            except OSError:
                continue
            if cwd == str(workdir) and any(c.endswith(b"workflow_scripts/build.py")
                                           for c in command):
                return int(proc.name)
        time.sleep(0.2)
    raise AssertionError("the build job did not start")


def wait_for_temporary_library(library: Path, build_pid: int, timeout: float) -> None:
    """Returns once the build (``build_pid``) has made ``library``'s temporary file (atomic.py's
    .{stem}.*.tmp{suffix} beside it)."""
    deadline = time.monotonic() + timeout
    while not list(library.parent.glob(f".{library.stem}.*.tmp{library.suffix}")):
        assert Path(f"/proc/{build_pid}").exists(), "the build ended without a temporary file"
        assert time.monotonic() < deadline, f"no temporary library after {timeout} s"
        time.sleep(0.01)


def wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.2)
    return False
