"""The README's main command as a newcomer runs it, read from the README itself so that the test
fails when the two drift apart: on the default config.yaml it plans every default artifact (the
job count the README states), and run for real (conftest.real_built: the real recovered weights,
every default voice, target option and LSTM method, one default bucket per component) it ends in
a model folder whose every library validated and which speaks through the runtime.
"""
from __future__ import annotations

import json
import re
import subprocess
from collections import Counter

import numpy as np
import pytest
import soundfile
import yaml
from conftest import BIN, README, REAL_BUCKETS, REPO, dry_run, model_folder, readme_build_command

from kokoro_tvm.assets.voices import KNOWN_NPM_VOICES
from kokoro_tvm.components import COMPONENTS
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime.kokoro import Kokoro

DEFAULT_CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
SENTENCE = "The main command built this voice."


def libraries_of(config: dict, buckets: dict[str, list[int]]) -> set[tuple[str, str, str, int]]:
    """(target, component, LSTM method, bucket) of every library ``config`` asks for: each LSTM
    component in each configured method, the others in "none"."""
    return {(target, name, method, bucket)
            for target in config["targets"]
            for name, component in COMPONENTS.items()
            for method in (config["lstm_methods"] if component.has_lstm else ["none"])
            for bucket in buckets[name]}


def readme_job_count() -> int:
    """The job count the README gives for its main command ("... 397 jobs ...")."""
    counts = re.findall(r"([\d,]+)\s+jobs", README.read_text())
    assert counts, "README.md no longer says how many jobs its main command runs"
    return int(counts[0].replace(",", ""))


def test_the_readme_command_is_a_snakemake_run_of_all():
    words = readme_build_command()
    assert words[0] == "snakemake" and words[-1] == "all" and "--cores" in words


def test_the_readme_command_plans_every_default_artifact(tmp_path):
    """`-n` added to the README's command on the default config.yaml, in an empty folder: the
    count of jobs is the README's, every default library is lowered, built and validated, each
    once, and every component is exported once and imported once per LSTM method."""
    jobs = dry_run(tmp_path, configfiles=(), command=readme_build_command())
    assert len(jobs) == readme_job_count()
    expected = libraries_of(DEFAULT_CONFIG, DEFAULT_CONFIG["buckets"])
    validated = Counter((w["target"], w["component"], w["lstm"], int(w["bucket"]))
                        for job in jobs if job["rule"] == "validate"
                        for w in [job["wildcards"]])
    assert set(validated) == expected and set(validated.values()) == {1}
    per_rule = Counter(job["rule"] for job in jobs)
    for rule in ("lower", "build"):
        assert per_rule[rule] == len(expected), rule
    # A component's export serves every bucket; its import every bucket and target.
    assert per_rule["export"] == len(COMPONENTS)
    assert per_rule["relax"] == len({(name, method) for _, name, method, _ in expected})
    # A bucket's reference values serve every LSTM method and target.
    assert per_rule["reference"] == sum(len(b) for b in DEFAULT_CONFIG["buckets"].values())
    assert per_rule["dist"] == 1 and per_rule["manifest"] == len(DEFAULT_CONFIG["targets"])


@pytest.mark.slow
def test_the_readme_command_builds_a_model_folder_that_speaks(real_built, tmp_path):
    """The real build ran the README's command: every library of the default targets and LSTM
    methods at REAL_BUCKETS validated against PyTorch, every voice of the source is in the
    model folder, and `kokoro-tvm say` speaks a sentence with it: the samples the `Kokoro` API
    gives, audible and of a sentence's length."""
    manifest_path = real_built / "results" / "manifest" / "llvm.json"
    entries = json.loads(manifest_path.read_text())["libraries"]
    built = {("llvm", e["component"], e["lstm"], e["bucket"]) for e in entries}
    assert built == libraries_of(DEFAULT_CONFIG, REAL_BUCKETS)
    assert all(e["validated"] for e in entries), [e for e in entries if not e["validated"]]

    folder = model_folder(real_built)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["voices"] == sorted(KNOWN_NPM_VOICES[DEFAULT_CONFIG["voices"]["npm_package"]])

    out = tmp_path / "spoken.wav"
    done = subprocess.run([str(BIN / "kokoro-tvm"), "say", SENTENCE, "--voice", "af_heart",
                           "--model", str(folder), "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    said, rate = soundfile.read(out, dtype="float32")
    assert rate == SAMPLE_RATE and 1.0 < len(said) / rate < 4.0
    assert np.sqrt(np.mean(said ** 2)) > 0.01  # speech, not silence
    expected, _ = Kokoro(folder).create(SENTENCE, voice="af_heart")
    np.testing.assert_allclose(said, expected, atol=1 / 32768)  # the file is 16-bit
