"""The Mac check run on Linux, as a Mac owner runs it, on its llvm twin (tests/data/tiny.yaml's
mac_check section: the tiny build's llvm libraries instead of the Mac targets'): `snakemake
mac_check` writes the bundle; a fresh venv installs the bundle's wheel (the runtime alone, no
PyTorch) and runs its check.py, which validates every library against the bundled PyTorch
outputs, times it, and speaks the three sentences end to end; with PyTorch and kokoro installed
(this suite's environment) it also speaks them with KModel on the CPU, and says MPS is absent.
The webgpu libraries run as on a Mac, but on lavapipe's adapter; only the device differs on a
Mac (metal and webgpu: the Apple GPU), where nothing has run yet.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_workflow

from kokoro_tvm import paths
from kokoro_tvm.facts import COMPONENT_NAMES
from kokoro_tvm.stages.mac_check import CHECK_SCRIPT, MAX_BYTES, SENTENCES, WHEELS

TARGETS = ("llvm", "webgpu")  # tests/data/tiny.yaml's mac_check.targets


@pytest.fixture(scope="module")
def bundle(other_built, workflow, tmp_path_factory) -> Path:
    """The bundle of the tiny build's llvm and webgpu libraries (other_built's)."""
    root = tmp_path_factory.mktemp("mac_check") / "build"
    shutil.copytree(other_built, root, symlinks=True)
    run_workflow(root, workflow, "mac_check")
    return root / paths.MAC_CHECK


def _check(python: Path, bundle: Path, report: Path, *targets: str) -> dict:
    chosen = ["--targets", *targets] if targets else []
    done = subprocess.run([str(python), str(bundle / CHECK_SCRIPT), "--out", str(report),
                           "--repeat", "3", *chosen],
                          capture_output=True, text=True, cwd=report.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text())


def _assert_checked(report: dict, targets: tuple[str, ...] = TARGETS) -> None:
    assert report["complete"] is True and report["passed"] is True
    libraries = report["libraries"]
    assert sorted((r["target"], r["component"]) for r in libraries) == sorted(
        (target, c) for target in targets for c in COMPONENT_NAMES)
    for result in libraries:
        assert result["status"] == "passed"
        assert result["first_call_ms"] > 0 and all(ms > 0 for ms in result["median_ms"].values())
        assert result["metrics"] and all(m["passed"] for m in result["metrics"].values()
                                         if "passed" in m)
    assert sorted(report["end_to_end"]) == sorted(targets)
    for target in targets:
        spoken = report["end_to_end"][target]["tvm"]["sentences"]
        assert len(spoken) == len(SENTENCES)
        for sentence in spoken:
            assert sentence["audio_seconds"] > 0 and sentence["real_time_factor"] > 0


def test_bundle_carries_what_the_mac_needs(bundle):
    cases = json.loads((bundle / "cases.json").read_text())
    assert {(c["target"], c["component"], c["bucket"]) for c in cases["cases"]} == {
        (target, component, 16) for target in TARGETS for component in COMPONENT_NAMES}
    for case in cases["cases"]:
        assert (bundle / case["library"]).is_file() and (bundle / case["reference"]).is_file()
    assert set(cases["weights"]) == set(COMPONENT_NAMES)
    assert [len(s["ids"]) > 5 for s in cases["sentences"]] == [True] * len(SENTENCES)
    (wheel,) = (bundle / WHEELS).glob("kokoro_tvm-*.whl")
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    assert size < MAX_BYTES and wheel.stat().st_size > 0


def test_check_runs_with_the_bundles_wheel_alone(bundle, tmp_path):
    """The Mac owner's steps: a venv, the bundle's wheel with its webgpu extra, check.py; no
    PyTorch."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (wheel,) = (bundle / WHEELS).glob("kokoro_tvm-*.whl")
    done = subprocess.run([str(venv / "bin/pip"), "install", "-q", f"{wheel}[webgpu]"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    report = _check(venv / "bin/python", bundle, tmp_path / "mac_check.json")
    _assert_checked(report)
    assert report["end_to_end"]["llvm"]["torch"] == {
        "skipped": "PyTorch is not installed (pip install torch kokoro)"}
    # The README's install line, as the Mac owner types it.
    assert '"$(echo wheels/kokoro_tvm-*.whl)[webgpu]"' in (bundle / "README.txt").read_text()


def test_check_speaks_beside_pytorch_where_it_is_installed(bundle, tmp_path):
    """PyTorch's KModel beside the llvm libraries (--targets: the webgpu ones ran in the test
    above)."""
    report = _check(Path(sys.executable), bundle, tmp_path / "mac_check.json", "llvm")
    _assert_checked(report, ("llvm",))
    torch = report["end_to_end"]["llvm"]["torch"]
    assert torch["mps"] == {"skipped": "no MPS device"}
    assert len(torch["cpu"]["sentences"]) == len(SENTENCES)
    assert all(s["real_time_factor"] > 0 for s in torch["cpu"]["sentences"])


def test_check_names_a_target_the_bundle_lacks(bundle, tmp_path):
    done = subprocess.run([sys.executable, str(bundle / CHECK_SCRIPT), "--targets", "metal"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert "--targets metal: the bundle carries only llvm, webgpu" in done.stderr
    assert not (tmp_path / "mac_check.json").exists()

