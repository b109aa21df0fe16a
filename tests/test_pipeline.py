"""The whole pipeline on the tiny random-weight config: builds, validates, and stays tight.

A copy of the workflow (Snakefile, rules, scripts, package sources) lives in a scratch folder so
that tests can touch its code files without touching the repository; a completed tiny build
lives in another, and every staleness claim (docs/architecture.md, Staleness) is checked by a
dry run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import conftest
import numpy as np
import yaml
from conftest import REPO, TINY, edited, fill, run_snakemake, workflow_lock

from kokoro_tvm import paths
from kokoro_tvm.atomic import sha256_file
from kokoro_tvm.facts import COMPONENT_NAMES
from kokoro_tvm.measure import build_time

LSTM_COMPONENTS = {"duration", "text_encoder", "f0n"}


def dry_run(workdir: Path, workflow: Path, *targets: str, configfiles=(TINY,)) -> list[dict]:
    """The jobs a dry run of the ``workflow`` copy would execute (conftest's ``dry_run``)."""
    return conftest.dry_run(workdir, *targets, snakefile=workflow / "Snakefile",
                            configfiles=configfiles)


def rules_of(jobs) -> Counter:
    return Counter(j["rule"] for j in jobs if j["rule"] != "all")


def overrides(tmp_path: Path, **settings) -> list[Path]:
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump(settings))
    return [TINY, extra]


def test_every_library_validates_and_is_in_the_manifest(built):
    config = yaml.safe_load(TINY.read_text())
    for target in config["targets"]:
        manifest = json.loads((built / f"results/manifest/{target}.json").read_text())
        entries = {(e["component"], e["lstm"], e["bucket"]) for e in manifest["libraries"]}
        assert entries == {("bert", "none", 16), ("duration", "tir_vec", 16),
                           ("text_encoder", "tir_vec", 16), ("f0n", "tir_vec", 16),
                           ("decoder", "none", 16)}
        for entry in manifest["libraries"]:
            assert entry["passed"] and entry["target"] == target
            library = built / entry["library"]
            assert entry["library_sha256"] == sha256_file(library)
            report = json.loads((built / entry["validation"]).read_text())
            assert report["passed"] and report["metrics"]
            assert all(m["passed"] for m in report["metrics"].values() if "tolerance" in m
                       and m["tolerance"] is not None)
            # The decoder's own noise generator (compile/noise.py) is checked too.
            noise_checked = "noise.samples.relative_error" in report["metrics"]
            assert noise_checked == (entry["component"] == "decoder")


def test_build_time_sums_each_stage_and_component(built):
    """measure/build_time over the tiny build: per stage and component as many jobs as there
    are benchmark files, their seconds summed, and the build against itself at ratio 1.00."""
    figures = build_time.job_seconds(built)
    for stage in ("export", "reference", "relax", "lowered", "lib", "validate"):
        for component in COMPONENT_NAMES:
            folder = built / "benchmarks" / stage
            files = [*folder.rglob(f"{component}/**/*.tsv"), *folder.glob(f"{component}.tsv")]
            jobs, seconds = figures[(stage, component)]
            assert jobs == len(files) > 0 and seconds > 0
    decoder = (built / "benchmarks/reference/decoder/b16.tsv").read_text().split("\n")
    assert 0 < float(decoder[1].split("\t")[0]) <= figures[("reference", "decoder")][1]
    for per_component in ("params", "export"):  # named by the file, not a folder
        assert figures[(per_component, "decoder")][0] == 1
    rows = build_time.main([str(built), str(built)]).splitlines()[2:]
    assert len(rows) == len(figures) + 1 and rows[-1].startswith("| all |")
    assert all(row.split(" | ")[-1] in ("1.00 |", "- |") for row in rows)


def test_libraries_hold_code_not_weights(built):
    metas = sorted(built.glob(paths.LIBRARY_META.format(target="llvm", component="*", lstm="*",
                                                         bucket="*")))
    assert len(metas) == 5, metas  # one bucket of each component
    for meta_path in metas:
        meta = json.loads(meta_path.read_text())
        params = built / f"results/params/{meta['component']}.npz"
        library = meta_path.with_name(meta_path.name.replace(".meta.json", ".so"))
        assert library.stat().st_size < 4e6, f"{library} is {library.stat().st_size} bytes"
        assert meta["params_sha256"] == sha256_file(params)
        for key in ("ir_lines", "build_seconds", "import_seconds", "functions", "versions"):
            assert meta[key], (meta_path, key)
    decoder_params = (built / "results/params/decoder.npz").stat().st_size
    decoder = built / paths.LIBRARY.format(target="llvm", component="decoder", lstm="none",
                                           bucket=16)
    assert decoder_params > 20 * decoder.stat().st_size


def test_second_run_has_nothing_to_do(built, workflow):
    assert dry_run(built, workflow, "all") == []


def test_touching_every_file_of_the_checkout_rebuilds_nothing(built, workflow):
    """Staleness of code and config is by content: new timestamps on every file of the
    workflow's checkout alone schedule no job (Snakemake compares checksums of small inputs)."""
    stamp = time.time() + 5
    touched = [p for p in workflow.rglob("*") if p.is_file()]
    saved = {p: p.stat() for p in touched}
    with workflow_lock(workflow):
        try:
            for path in touched:
                os.utime(path, (stamp, stamp))
            assert dry_run(built, workflow, "all") == []
        finally:
            for path, stat in saved.items():
                os.utime(path, (stat.st_atime, stat.st_mtime))


def test_runtime_edit_rebuilds_nothing_in_all(built, workflow):
    """The runtime's engine is code no stage of `all` runs."""
    with edited(workflow, "kokoro_tvm/runtime/engine.py"):
        assert dry_run(built, workflow, "all") == []


def test_facts_edit_rebuilds_what_reads_them(built, workflow):
    """An edit of a shared module reaches every stage that imports it (no hand-kept lists):
    facts.py is read by the model side, so exports, references and everything after them
    rerun."""
    with edited(workflow, "kokoro_tvm/facts.py"):
        jobs = rules_of(dry_run(built, workflow, "all"))
    assert jobs["export"] == jobs["reference"] == 5, jobs
    assert jobs["validate"] == 10 and jobs["manifest"] == 2, jobs
    assert jobs["dist"] == 2, jobs


def test_adding_a_bucket_builds_only_that_bucket(built, workflow, tmp_path):
    """A new bucket reuses its component's export and import: its reference values, then its
    library per target."""
    jobs = dry_run(built, workflow, "all",
                   configfiles=overrides(tmp_path, buckets={"bert": [16, 24]}))
    assert rules_of(jobs) == {"reference": 1, "lower": 2, "build": 2, "validate": 2,
                              "manifest": 2, "validation_report": 2, "dist": 2}
    built_paths = [j["output"] for j in jobs
                   if j["rule"] not in ("manifest", "validation_report", "dist", "all")]
    assert all("bert" in p and "b24" in p for p in built_paths), built_paths


def test_lstm_lowering_change_rebuilds_only_lstm_artifacts(built, workflow):
    """An edit of the LSTM lowering reaches the LSTM components only."""
    with edited(workflow, "kokoro_tvm/compile/lstm.py"):
        jobs = dry_run(built, workflow, "all")
    assert rules_of(jobs) == {"relax": 3, "lower": 6, "build": 6, "validate": 6,
                              "manifest": 2, "validation_report": 2, "dist": 2}
    for job in jobs:
        if job["rule"] not in ("manifest", "validation_report", "dist", "all"):
            assert any(f"/{c}/" in job["output"] for c in LSTM_COMPONENTS), job


def test_gpu_lowering_change_rebuilds_nothing_for_cpu_targets(built, workflow):
    """An edit of a module that the lower stage runs for GPU targets only (the GPU LSTM kernel;
    stages/code_inputs.py, GPU_ONLY) leaves both CPU targets' libraries current, though the stage's
    code imports it."""
    assert "compile.gpu.lstm" in (workflow / "kokoro_tvm/compile/lower.py").read_text()
    with edited(workflow, "kokoro_tvm/compile/gpu/lstm.py"):
        jobs = dry_run(built, workflow, "all")
    assert not rules_of(jobs), jobs


def test_target_options_change_rebuilds_only_that_target(built, workflow, tmp_path):
    changed = {"target_options": {"llvm": {"kind": "llvm", "mcpu": "host", "num-cores": 1}}}
    jobs = dry_run(built, workflow, "all", configfiles=overrides(tmp_path, **changed))
    assert rules_of(jobs) == {"lower": 5, "build": 5, "validate": 5, "manifest": 1,
                              "validation_report": 1, "dist": 1}
    assert all("/llvm/" in j["output"]
               or j["output"].endswith(("llvm.json", "llvm.html", "dist/llvm"))
               for j in jobs if j["rule"] != "all"), jobs


def test_tuning_adds_a_database_per_library_when_enabled(built, workflow, tmp_path):
    tuning = {"enabled": True, "max_trials": 8, "trials_per_task": 8}
    jobs = dry_run(built, workflow, "all", configfiles=overrides(tmp_path, tuning=tuning))
    counts = rules_of(jobs)
    assert counts["tune"] == counts["lower"] == 10  # 5 components x 2 targets, each runnable
    assert all(j["output"].startswith("results/tune/") for j in jobs if j["rule"] == "tune")


def test_one_library_path_schedules_only_its_chain(workflow, tmp_path):
    jobs = dry_run(tmp_path, workflow, paths.LIBRARY.format(target="llvm", component="f0n",
                                                             lstm="tir_vec", bucket=16))
    assert rules_of(jobs) == {"weights": 1, "export": 1, "params": 1, "relax": 1,
                              "lower": 1, "build": 1}


def test_scripts_are_standalone_clis():
    for script in sorted((REPO / "workflow_scripts").glob("*.py")):
        done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                              text=True)
        assert done.returncode == 0 and "usage:" in done.stdout, script


def test_build_killed_while_writing_leaves_no_library_and_a_rerun_completes(built, tmp_path):
    """SIGKILL (no cleanup code runs) once the library is being written, i.e. its temporary
    file exists: the library path must not exist. A writer that wrote the final name directly
    never makes the temporary file, and fails here."""
    out, meta = tmp_path / "lib" / "b16.so", tmp_path / "lib" / "b16.meta.json"
    command = [sys.executable, str(REPO / "workflow_scripts/build.py"),
               "--lowered", str(built / paths.LOWERED.format(target="llvm", component="decoder",
                                                             lstm="none", bucket=16)),
               "--params", str(built / "results/params/decoder.npz"), "--target", "llvm",
               "--target-options", json.dumps({"kind": "llvm", "mcpu": "host"}),
               "--component", "decoder", "--lstm", "none", "--bucket", "16", "--out", str(out),
               "--out-meta", str(meta)]
    process = subprocess.Popen(command)
    deadline = time.monotonic() + 300
    while not list(out.parent.glob(".b16.*.tmp.so")):
        assert process.poll() is None, "the build ended without writing a temporary file"
        assert time.monotonic() < deadline, "no temporary file after 300 s"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not out.exists() and not meta.exists()
    subprocess.run(command, check=True, capture_output=True)
    assert out.stat().st_size > 0 and json.loads(meta.read_text())["bucket"] == 16


def test_a_full_disk_under_an_artifact_fails_in_one_line_and_keeps_the_old_one(built,
                                                                              small_disk):
    """The params stage writing the decoder's weights to a full filesystem: one line naming
    it, the artifact already there as it was, and no temporary file."""
    old = small_disk / "decoder.npz"
    old.write_bytes(b"an earlier build's params")
    filler = fill(small_disk)
    assets = built / "results/assets"
    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts/params.py"),
                           "--checkpoint", str(assets / "kokoro-82m.pth"),
                           "--model-config", str(assets / "config.json"),
                           "--component", "decoder", "--out", str(old)],
                          capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(
        f"error: cannot write {old}: the filesystem at {small_disk} is full (0.0 MB free): "
        "free some space there or write elsewhere"), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert old.read_bytes() == b"an earlier build's params"
    assert sorted(small_disk.iterdir()) == sorted([filler, old])


def test_failed_validation_names_the_library_and_writes_no_report(built, tmp_path):
    params = dict(np.load(built / "results/params/bert.npz"))
    key = next(k for k in params if k.endswith("bert_encoder.weight"))
    params[key] = params[key] * 1.01
    wrong = tmp_path / "bert.npz"
    np.savez(wrong, **params)
    library = built / paths.LIBRARY.format(target="llvm", component="bert", lstm="none", bucket=16)
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "workflow_scripts/validate.py"),
         "--component", "bert", "--lstm", "none", "--bucket", "16", "--library", str(library),
         "--params", str(wrong),
         "--reference", str(built / paths.REFERENCE.format(component="bert", bucket=16)),
         "--target-options", json.dumps({"kind": "llvm"}), "--out", str(report)],
        capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert str(library) in done.stderr and "failed validation" in done.stderr
    assert not report.exists()


def test_unsupported_op_fails_naming_the_artifact(tmp_path):
    import torch

    from kokoro_tvm.stages.common import save_programs

    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)  # TVM 0.27 has no converter for rand_like

    exported = tmp_path / "b8.pt2"
    save_programs({"main": torch.export.export(Noisy(), (torch.zeros(1, 8),))}, exported)
    out = tmp_path / "relax.json"
    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts/relax.py"),
                           "--exported", str(exported), "--lstm", "none", "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and str(exported) in done.stderr, done.stderr
    assert "rand" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_report_shows_the_validation_table(built, workflow):
    table = (built / "results/report/validation/llvm.html").read_text()
    assert "5 passed" in table and table.count("<tr class=\"passed\">") == 5
    report = built / "report.html"
    done = run_snakemake(built, "--report", str(report), snakefile=workflow / "Snakefile")
    assert report.is_file() and report.stat().st_size > 10_000, done.stderr


def test_cores_decide_the_threads_of_validation(built, workflow, tmp_path):
    """The shared build ran with `--cores 2`: the decoder's validation took half of them (one
    thread: a job asking for every core waits for all of them to be free at once), the others
    one (mostly process start; they run side by side). `--cores 4`: the decoder's validate job
    is given two, and the library runs with two. Run in a copy of the build whose artifacts are
    hard links (replaced by rename, never rewritten), so the shared build stays as it was."""
    report = "results/validate/llvm/decoder/none/b16.json"
    before = (built / report).read_text()
    assert json.loads(before)["threads"] == {"tvm": 1}
    bert = json.loads((built / "results/validate/llvm/bert/none/b16.json").read_text())
    assert bert["threads"] == {"tvm": 1}
    copy = tmp_path / "copy"
    shutil.copytree(built, copy, copy_function=os.link,
                    ignore=shutil.ignore_patterns(".snakemake", "logs", "benchmarks"))
    shutil.copytree(built / ".snakemake", copy / ".snakemake", symlinks=True)
    done = run_snakemake(copy, "--cores", "4", report, "--forcerun", report,
                         snakefile=workflow / "Snakefile")
    log = done.stdout + done.stderr
    assert re.findall(r"^(?:local)?rule (\w+):", log, re.M) == ["validate"], log
    assert json.loads((copy / report).read_text())["threads"] == {"tvm": 2}
    assert (copy / "benchmarks/validate/llvm/decoder/none/b16.tsv").is_file()
    assert (built / report).read_text() == before
