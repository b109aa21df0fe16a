"""A bad config fails before any job runs, with a message that names the key."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, TINY, run_snakemake

from kokoro_tvm.assets.model_config import KOKORO_82M, merge
from kokoro_tvm.assets.sources import SOURCE_OPTIONS, SOURCES
from kokoro_tvm.assets.voices import KNOWN_NPM_VOICES, VOICE_SOURCES
from kokoro_tvm.config import ConfigError, validate_config


def load_config(*paths: str | Path) -> dict[str, Any]:
    """config.yaml and any override files merged in order (as Snakemake's --configfile does)."""
    config: dict[str, Any] = {}
    for path in paths:
        config = merge(config, yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {})
    return validate_config(config)


BAD_CONFIGS = {
    "unknown weight source": ({"weights": {"source": "s3"}}, "weights.source"),
    "unknown voice": ({"voices": {"names": ["af_heart", "af_hart"]}}, "voices.names[1]"),
    "missing checkpoint": ({"weights": {"source": "path", "checkpoint": "nowhere.pth",
                                        "model_config": "nowhere.json"}}, "weights.checkpoint"),
    "wrong type": ({"weights": {"seed": "zero"}}, "weights.seed"),
    "unknown key": ({"weights": {"sorce": "hf"}}, "weights"),
    "voice folder missing": ({"voices": {"source": "path", "folder": "no-such-dir"}},
                             "voices.folder"),
    "report voice not built": ({"voices": {"names": ["af_heart"]}, "report": {"voice": "am_puck"}},
                               "report.voice"),
    "int8 on a CPU without VNNI": ({"targets": ["old"], "target_options": {"old": {
        "kind": "llvm", "mcpu": "skylake-avx512", "precision": "int8"}}},
                                   "target_options.old.precision"),
    "benchmark length of zero": ({"report": {"bench_components_lengths": {
        "tokens": [0, 64], "frames": [240]}}}, "report.bench_components_lengths.tokens[0]"),
    "int8 on a GPU": ({"targets": ["cuda"], "target_options": {"cuda": {
        "kind": "cuda", "arch": "sm_90", "precision": "int8"}}}, "target_options.cuda.precision"),
    "misspelt target option": ({"target_options": {"llvm": {
        "kind": "llvm", "mcpu": "host", "precison": "int8"}}}, "target_options.llvm"),
    "image of a GPU folder": ({"image": {"targets": ["cuda"]}}, "image.targets[0]"),
    "image of an unknown target": ({"image": {"targets": ["x86_64_v9"]}}, "image.targets[0]"),
    "unknown image builder": ({"image": {"builder": "kaniko"}}, "image.builder"),
    "token bucket past Kokoro's context": ({"buckets": {"bert": [64, 513]}}, "buckets.bert[1]"),
    "metal target naming a CPU": ({"target_options": {"metal": {"kind": "metal",
                                                                "mcpu": "apple-m2"}}},
                                  "target_options.metal"),
    "image of a Mac folder": ({"image": {"targets": ["macos_arm64"]}}, "image.targets[0]"),
    "frames of another size": ({"weights": {"source": "random", "random_model": {
        "istftnet": {"upsample_rates": [8, 6]}}}, "voices": {"source": "random"}},
                               "weights.random_model"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_fails_before_any_job(case, tmp_path):
    overrides, key = BAD_CONFIGS[case]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(overrides))
    done = run_snakemake(tmp_path, "-n", configfiles=[bad], check=False)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "ConfigError" in output and f"'{key}'" in output, output[-2000:]
    assert "Building DAG" not in output, "validation must come before the DAG is built"
    assert not (tmp_path / "results").exists()


def test_int8_target_asked_by_path_is_checked_before_any_job(tmp_path):
    """A target outside ``targets`` is not checked at parse time (the default config must load
    on a CPU without VNNI); asked for by path, its int8 lower jobs refuse it while the DAG is
    built, naming the key, and nothing is written."""
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump({"target_options": {"old": {
        "kind": "llvm", "mcpu": "skylake-avx512", "precision": "int8"}}}))
    done = run_snakemake(tmp_path, "-n", "results/dist/old", configfiles=[TINY, old], check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "ConfigError" in output and "'target_options.old.precision'" in output, output[-2000:]
    assert "avx512vnni" in output
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("mac_check, key", [
    ({"targets": ["macos_m9"]}, "mac_check.targets[0]"),
    ({"buckets": {"decoder": 100}}, "mac_check.buckets.decoder")])
def test_mac_check_outside_the_build_is_refused_before_any_job(mac_check, key, tmp_path):
    """The Mac check's section is checked when its bundle is planned (a build whose buckets
    leave its buckets out needs no such section), before any job runs."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"mac_check": mac_check}))
    done = run_snakemake(tmp_path, "-n", "mac_check", configfiles=[bad], check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "ConfigError" in output and f"'{key}'" in output, output[-2000:]
    assert not (tmp_path / "results").exists()


def test_default_config_is_valid():
    config = load_config(REPO / "config.yaml")
    assert config["weights"]["source"] == "int8-onnx"
    assert config["voices"]["source"] == "npm"
    # names: all, every voice of kokoro-js@1.2.1, in each of Kokoro's languages
    assert config["voices"]["names"] == list(KNOWN_NPM_VOICES["kokoro-js@1.2.1"])
    assert len(config["voices"]["names"]) == 54
    assert {name[0] for name in config["voices"]["names"]} == set("abefhijpz")


def test_all_voices_are_the_sources(tmp_path):
    """names: all is a path folder's voice files, and is refused where the source's voices are
    not known without fetching them."""
    (tmp_path / "voices").mkdir()
    (tmp_path / "voices" / "notes.txt").write_bytes(b"")
    config = load_config(REPO / "config.yaml")
    config["voices"].update(source="path", folder="voices", names="all")
    with pytest.raises(ConfigError, match="'voices.names': all, but 'voices' holds no voice"):
        validate_config(config, base=tmp_path)
    for file in ("af_heart.bin", "af_heart.npy", "zm_yunxi.pt", "Not_A_Voice.npy"):
        (tmp_path / "voices" / file).write_bytes(b"")
    assert validate_config(config, base=tmp_path)["voices"]["names"] == ["af_heart", "zm_yunxi"]
    config["voices"].update(source="hf", names="all")
    with pytest.raises(ConfigError, match="'voices.names': all needs .* not for source 'hf': "
                                          "list the names"):
        validate_config(config, base=tmp_path)
    config["voices"].update(source="npm", npm_package="kokoro-js@9.9.9", names="all")
    with pytest.raises(ConfigError, match="not for npm package kokoro-js@9.9.9: list the names"):
        validate_config(config, base=tmp_path)
    config["voices"].update(npm_package="kokoro-js@1.2.1", names="some")
    with pytest.raises(ConfigError, match="'voices.names': 'some' does not match"):
        validate_config(config, base=tmp_path)


def test_random_voices_need_random_weights():
    config = load_config(REPO / "config.yaml")
    config["voices"]["source"] = "random"
    with pytest.raises(ConfigError, match="voices.source"):
        validate_config(config)


def test_path_source_accepts_existing_files(tmp_path):
    """A checkpoint and a Kokoro config.json whose frames are Kokoro's size; any other
    model_config is refused, naming the key."""
    (tmp_path / "w.pth").write_bytes(b"")
    (tmp_path / "c.json").write_text("{}")
    config = load_config(REPO / "config.yaml")
    config["weights"].update(source="path", checkpoint="w.pth", model_config="c.json")
    with pytest.raises(ConfigError, match="'weights.model_config': not a Kokoro config.json"):
        validate_config(config, base=tmp_path)
    (tmp_path / "c.json").write_text(json.dumps(merge(KOKORO_82M, {
        "istftnet": {"gen_istft_hop_size": 4}})))
    with pytest.raises(ConfigError, match="'weights.model_config': .* 480 samples per frame"):
        validate_config(config, base=tmp_path)
    (tmp_path / "c.json").write_text(json.dumps(KOKORO_82M))
    assert validate_config(config, base=tmp_path) is config


def test_voice_folder_must_hold_every_voice(tmp_path):
    """`voices.source: path`: each name needs a .npy, .bin or .pt file in the folder (the
    voices stage reads the same files)."""
    (tmp_path / "voices").mkdir()
    (tmp_path / "voices" / "af_heart.bin").write_bytes(b"")
    config = load_config(REPO / "config.yaml")
    config["voices"].update(source="path", folder="voices", names=["af_heart", "am_adam"])
    with pytest.raises(ConfigError, match=r"'voices.names\[1\]': no am_adam\.npy, \.bin, \.pt"):
        validate_config(config, base=tmp_path)
    (tmp_path / "voices" / "am_adam.pt").write_bytes(b"")
    assert validate_config(config, base=tmp_path) is config


def test_command_line_values_are_typed(tmp_path):
    """docs/benchmarks.md's `--config tuning='{enabled: true, ...}'` (or `buckets='{...}'`):
    Snakemake passes nested values as strings; they reach the rules as a boolean and integers,
    and a bad one is still refused."""
    done = run_snakemake(tmp_path, "-n", "all", "--config",
                         "tuning={enabled: true, max_trials: 16, trials_per_task: 4}")
    assert "rule tune:" in done.stdout or "\ntune " in done.stdout, done.stdout[-2000:]
    bad = run_snakemake(tmp_path, "-n", "--config", "tuning={enabled: maybe, max_trials: 16, "
                        "trials_per_task: 4}", check=False)
    assert bad.returncode != 0 and "'tuning.enabled'" in bad.stdout + bad.stderr
    config = load_config(REPO / "config.yaml")
    config["tuning"].update(enabled="false", max_trials="1000")
    config["report"].update(bench_components_lengths="null")
    config["buckets"].update(decoder=["128", "256"])  # through the schema's $defs
    validate_config(config)
    assert config["tuning"]["enabled"] is False and config["tuning"]["max_trials"] == 1000
    assert config["report"]["bench_components_lengths"] is None
    assert config["buckets"]["decoder"] == [128, 256]


def test_the_schemas_sources_are_the_ones_the_scripts_read():
    """A source the schema admits has a reader and the options it needs, and no reader is
    unreachable from config.yaml."""
    schema = yaml.safe_load((REPO / "kokoro_tvm/schemas/config.schema.yaml").read_text())
    enum = {section: set(schema["properties"][section]["properties"]["source"]["enum"])
            for section in ("weights", "voices")}
    assert enum["weights"] == set(SOURCES) == set(SOURCE_OPTIONS)
    assert enum["voices"] == set(VOICE_SOURCES)


def test_the_schema_states_the_facts_the_code_uses():
    """config.yaml's schema cannot import Python: its component names, LSTM methods,
    precisions and token limit are checked against the one place each is stated."""
    from kokoro_tvm.compile.devices import PRECISIONS
    from kokoro_tvm.compile.lstm import LSTM_METHODS
    from kokoro_tvm.facts import COMPONENT_NAMES, LSTM_METHOD_NAMES, MAX_TOKENS

    schema = yaml.safe_load((REPO / "kokoro_tvm/schemas/config.schema.yaml").read_text())
    properties = schema["properties"]
    assert set(properties["lstm_methods"]["items"]["enum"]) == set(LSTM_METHOD_NAMES)
    assert set(LSTM_METHODS) == set(LSTM_METHOD_NAMES)
    buckets = properties["buckets"]
    assert list(buckets["properties"]) == list(COMPONENT_NAMES) == buckets["required"]
    assert schema["$defs"]["token_buckets"]["items"]["maximum"] == MAX_TOKENS + 2  # the pads
    options = properties["target_options"]["additionalProperties"]["properties"]
    assert tuple(options["precision"]["enum"]) == PRECISIONS


@pytest.mark.parametrize("script, arguments, message", [
    ("relax.py", ["--exported", "missing.pt2", "--lstm", "tirvec", "--out", "x.json"],
     "--lstm: invalid choice: 'tirvec' (choose from 'none', 'tir_vec', 'tir', 'unroll')"),
    ("lower.py", ["--relax", "missing.json", "--bucket", "16", "--target-options", "{kind: llvm}",
                  "--out", "x"],
     "--target-options: not JSON"),
    ("validate.py", ["--component", "bert", "--lstm", "none", "--bucket", "16", "--library",
                     "x.so", "--params", "x.npz", "--reference", "x.npz", "--out", "x.json"],
     "the following arguments are required: --target-options"),
])
def test_workflow_scripts_refuse_bad_arguments_before_any_work(tmp_path, script, arguments,
                                                                message):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts" / script), *arguments],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())
