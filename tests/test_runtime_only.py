"""The runtime as a user deploys it: `pip install kokoro-tvm` alone in a fresh virtual
environment (no PyTorch, Snakemake or ONNX), speaking from a model folder copied elsewhere and
used from another working directory."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile
from conftest import REPO, model_folder
from conftest import TINY_IDS as IDS
from conftest import TINY_SPEED as SPEED
from transcribe import transcribe, word_error_rate

from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.measure.bench_e2e import SENTENCES
from kokoro_tvm.runtime.engine import TvmEngine

# Peak resident memory of `kokoro-tvm say` on the end-to-end benchmark's sentences.
MAX_PEAK_RSS_MB = 800
# Modules of the build stack that a runtime process must never load.
BUILD_STACK = ("torch", "snakemake", "onnx", "onnxruntime", "kokoro", "kokoro_tvm.compile",
               "kokoro_tvm.model", "kokoro_tvm.stages", "kokoro_tvm.measure")


@pytest.fixture(scope="session")
def runtime_venv(tmp_path_factory) -> Path:
    """A fresh virtual environment with `pip install <checkout>` (the runtime only)."""
    scratch = tmp_path_factory.mktemp("runtime_venv")
    source, venv = scratch / "source", scratch / "venv"
    # A copy of the package's sources: pip's build writes build/ beside them.
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(venv / "bin/pip"), "install", "-q", str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return venv


def _python(venv: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin/python"), "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, cwd=cwd)


def test_runtime_install_has_no_build_stack(runtime_venv, tmp_path):
    done = _python(runtime_venv, "import torch", tmp_path)
    assert done.returncode != 0 and "No module named 'torch'" in done.stderr
    done = _python(runtime_venv, f"""
        import sys
        from kokoro_tvm import Kokoro
        from kokoro_tvm.runtime import engine, g2p
        g2p.phonemizer("en-us")("Hello world.")
        print([m for m in {BUILD_STACK!r} if m in sys.modules])
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    # As `kokoro-tvm say` starts: TVM's runtime library alone, without its compiler.
    done = _python(runtime_venv, """
        import sys
        from kokoro_tvm.runtime.process import speak_only
        speak_only()
        from kokoro_tvm.runtime import engine
        import tvm
        print("tvm.relax" in sys.modules, sorted(tvm.base._LOADED_LIBS))
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False ['tvm_runtime']"


def test_copied_model_folder_gives_the_same_samples(runtime_venv, built, tmp_path):
    """The tiny build's folder, copied and used from another directory by the runtime-only
    install, gives bit for bit the samples of the full environment reading it in place."""
    copy = tmp_path / "elsewhere" / "model"
    shutil.copytree(model_folder(built), copy)
    voice = np.load(copy / "voices/af_heart.npy")[len(IDS) - 1]
    np.save(tmp_path / "voice.npy", voice)
    done = _python(runtime_venv, f"""
        import numpy as np
        from kokoro_tvm.runtime.engine import TvmEngine
        audio = TvmEngine("{copy}").synthesize({IDS}, np.load("{tmp_path}/voice.npy"), {SPEED}, 5)
        np.save("{tmp_path}/runtime_only.npy", audio)
        """, cwd=Path("/"))
    assert done.returncode == 0, done.stderr
    here = TvmEngine(model_folder(built)).synthesize(IDS, voice, SPEED, 5)
    assert len(here) == 600 * 16
    np.testing.assert_array_equal(np.load(tmp_path / "runtime_only.npy"), here)


def test_model_folder_lists_every_file_relative_with_its_sha256(built):
    from kokoro_tvm.atomic import sha256_file

    folder = model_folder(built)
    manifest = json.loads((folder / "manifest.json").read_text())
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
               and p.name not in ("manifest.json", ".snakemake_timestamp")}  # Snakemake's mark
    assert set(manifest["files"]) == on_disk
    assert all(sha256_file(folder / f) == digest for f, digest in manifest["files"].items())
    assert {e["component"] for e in manifest["libraries"]} == {
        "bert", "duration", "text_encoder", "f0n", "decoder"}
    assert manifest["left_out"] == [] and manifest["voices"] == ["af_heart"]
    assert all(not Path(e["library"]).is_absolute() for e in manifest["libraries"])


@pytest.mark.slow
def test_readme_deployment_speaks_within_the_memory_bar(runtime_venv, real_built, tmp_path):
    """The README's deployment: the folder copied to another place, `kokoro-tvm say` run from
    / in the runtime-only install on the benchmark's sentences; recognisable speech, and peak
    memory at most MAX_PEAK_RSS_MB."""
    model = tmp_path / "kokoro-model"
    shutil.copytree(model_folder(real_built), model)
    out = tmp_path / "speech.wav"
    text = " ".join(SENTENCES)
    measure = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024); "
               "sys.exit(done.returncode)")
    done = subprocess.run([str(runtime_venv / "bin/python"), "-c", measure,
                           str(runtime_venv / "bin/kokoro-tvm"), "say", "-", "--model", str(model),
                           "-o", str(out)], input=text, capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    peak_mb = float(done.stdout.split()[-1])
    audio, rate = soundfile.read(out, dtype="float32")
    heard = transcribe(audio)
    print(f"peak RSS {peak_mb:.0f} MB, {len(audio) / rate:.1f} s of audio, heard {heard!r}")
    assert rate == SAMPLE_RATE and word_error_rate(text, heard) <= 0.3, heard
    assert peak_mb <= MAX_PEAK_RSS_MB


@pytest.mark.slow
def test_bench_e2e_measures_the_tvm_engine_in_the_runtime_only_install(runtime_venv, real_built,
                                                                       tmp_path):
    """bench_e2e's --runtime-python: the TVM engine's child runs there, without PyTorch, and
    its peak memory is reported (one round, TVM alone, one short sentence of --text, which
    is also the one text streamed: the figures' plumbing, not speed)."""
    out, text = tmp_path / "e2e.json", tmp_path / "text.txt"
    text.write_text("Hello there.\n\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts/bench_e2e.py"),
                           "--root", str(real_built), "--engines", "tvm", "--rounds", "1",
                           "--text", str(text),
                           "--runtime-python", str(runtime_venv / "bin/python"),
                           "--out-json", str(out), "--out-plot", str(tmp_path / "e2e.png")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    (tvm,) = figures["engines"]
    assert figures["sentences"] == ["Hello there."]
    assert figures["streamed"] == {"text": "Hello there."}
    assert tvm["python"] == str(runtime_venv / "bin/python") and tvm["torch_loaded"] is False
    assert 0 < tvm["peak_rss_mb"] <= MAX_PEAK_RSS_MB and tvm["rtf"] > 0
    # Two words: the first chunk is the whole sentence, no lead.
    assert tvm["first_audio_lead"] is False and tvm["first_audio_seconds"] > 0
    assert set(tvm["worst_stall_seconds"]) == {"text"}


@pytest.mark.parametrize("content, engines, message", [
    (None, "tvm", "--text {text}: No such file or directory"),
    ("\n  \n", "tvm", "--text {text}: no sentence in the file"),
    (b"\xff\xfe\x00", "tvm", "--text {text}: not UTF-8 text"),
    ("Hello.", "tvm,pytorch", "--engines: unknown engine 'pytorch'; choose from tvm, torch"),
])
def test_bench_e2e_refuses_bad_arguments_before_loading(tmp_path, content, engines, message):
    text = tmp_path / "text.txt"
    if isinstance(content, bytes):
        text.write_bytes(content)
    elif content is not None:
        text.write_text(content, encoding="utf-8")
    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts/bench_e2e.py"),
                           "--root", str(tmp_path), "--text", str(text), "--engines", engines,
                           "--out-json", str(tmp_path / "e2e.json"),
                           "--out-plot", str(tmp_path / "e2e.png")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and message.format(text=text) in done.stderr, done.stderr
    assert not (tmp_path / "e2e.json").exists()
