"""`kokoro-tvm` as a user runs it (the installed console script): every bad input gets one line
and exit status 2 before the model loads, and a failed run leaves an existing file as it was.

The tiny build's model folder is copied with its libraries corrupted: a check that ran only
after loading would report the corruption instead of the bad input.
"""
from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
from conftest import BIN, fill, model_folder

from kokoro_tvm import cli
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.audio_file import (
    FORMATS,
    OutputError,
    check_output,
    write_audio,
)
from kokoro_tvm.runtime.kokoro import SPEED_RANGE, Kokoro, RequestError, check_speed
from kokoro_tvm.runtime.model_folder import ModelFolderError
from kokoro_tvm.runtime.speech import SpeechError


def kokoro_tvm(*args: str, stdin: str | None = None, cwd: Path | None = None
               ) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "kokoro-tvm"), *args], input=stdin, capture_output=True,
                          text=True, cwd=cwd)


@pytest.fixture(scope="module")
def broken_model(built, tmp_path_factory) -> Path:
    """The tiny model folder with every library overwritten: any load fails its sha256."""
    folder = tmp_path_factory.mktemp("broken") / "model"
    shutil.copytree(model_folder(built), folder)
    for library in folder.glob("lib/**/*.so"):
        library.write_bytes(b"not a library")
    return folder


BAD_REQUESTS = [
    (["Hello", "--speed", "0"], "speed 0.0 is outside 0.5-2.0"),
    (["Hello", "--speed", "nan"], "speed nan is outside"),
    (["Hello", "--speed", "-1"], "speed -1.0 is outside"),
    (["Hello", "--speed", "100"], "speed 100.0 is outside"),
    (["Hello", "--voice", "zz_none"], "unknown voice 'zz_none'"),
    (["Hello", "--voice", "af_heart:x"], "is not a number"),
    (["Hello", "--voice", "zf_xiaobei"], "unknown voice 'zf_xiaobei'"),
    (["Hello", "--voice", "af_heart:nan"], "weight nan of af_heart must be a finite number"),
    (["Hello", "--voice", "af_heart:2,af_heart:-1"], "weight -1.0 of af_heart must be"),
    (["Hello", "--seed", "-1"], "seed -1 is not a whole number from 0 to 18446744073709551615"),
    (["Hello", "--seed", str(2**64)], "seed 18446744073709551616 is not a whole number from 0"),
    (["Hello", "--lstm", "tir_vecc"], "has no libraries with LSTM lowering 'tir_vecc'"),
    (["   "], "the text is empty"),
    (["-"], "the text is empty"),  # standard input, empty
    (["--file", "/nonexistent/text.txt"], "cannot read the text file"),
    (["Hello", "-o", "OUT.xyz"], "cannot write '.xyz' files"),
    (["Hello", "-o", "OUT"], "a file name without an extension"),
    (["Hello", "-o", "-"], "add --stream"),
    (["Hello", "--subtitles", "OUT.txt"], "cannot write subtitles as '.txt' files"),
    (["Hello", "--subtitles", "OUT"], "cannot write subtitles as a file name without an"),
    (["Hello", "--subtitles", "/proc/version/x.srt"], "/proc/version is not a writable folder"),
]


@pytest.mark.parametrize(("args", "message"), BAD_REQUESTS)
def test_bad_input_is_one_line_before_loading_and_writes_nothing(broken_model, tmp_path, args,
                                                                 message):
    out = tmp_path / "speech.wav"
    args = [a.replace("OUT", str(tmp_path / "speech")) for a in args]
    if "-o" not in args:
        args += ["-o", str(out)]
    done = kokoro_tvm("say", *args, "--model", str(broken_model), stdin="")
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_binary_text_file_is_refused(broken_model, tmp_path):
    binary = tmp_path / "text.bin"
    binary.write_bytes(bytes(range(256)))
    done = kokoro_tvm("say", "--file", str(binary), "-o", str(tmp_path / "x.wav"),
                      "--model", str(broken_model))
    assert done.returncode == 2 and "cannot read the text file" in done.stderr
    assert not (tmp_path / "x.wav").exists()


def test_failed_synthesis_leaves_the_existing_file(built, tmp_path):
    """The tiny model has no bucket for a sentence at speed 1: the run fails after loading,
    and the files from an earlier run are untouched."""
    out, subtitles = tmp_path / "speech.wav", tmp_path / "speech.srt"
    out.write_bytes(b"earlier audio")
    subtitles.write_text("earlier subtitles")
    done = kokoro_tvm("say", "Hello there, this sentence needs more frames.", "-o", str(out),
                      "--subtitles", str(subtitles), "--model", str(model_folder(built)))
    assert done.returncode == 2 and "needs a bucket of at least" in done.stderr, done.stderr
    assert out.read_bytes() == b"earlier audio"
    assert subtitles.read_text() == "earlier subtitles"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["speech.srt", "speech.wav"]


def test_a_full_disk_fails_in_one_line_and_leaves_the_existing_files(speaking_built,
                                                                       small_disk):
    """say to a file on a full filesystem: one line naming it, the output and subtitles from an
    earlier run as they were, and no temporary file."""
    out, subtitles = small_disk / "speech.wav", small_disk / "speech.srt"
    out.write_bytes(b"earlier audio")
    subtitles.write_text("earlier subtitles")
    filler = fill(small_disk)
    done = kokoro_tvm("say", "Good day.", "-o", str(out), "--subtitles", str(subtitles),
                      "--model", str(model_folder(speaking_built)))
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert line == (f"kokoro-tvm: error: cannot write {out}: the filesystem at {small_disk} is "
                    "full (0.0 MB free): free some space there or write elsewhere")
    assert "Traceback" not in done.stderr, done.stderr
    assert out.read_bytes() == b"earlier audio"
    assert subtitles.read_text() == "earlier subtitles"
    assert sorted(small_disk.iterdir()) == sorted([filler, out, subtitles])
    filler.unlink()  # with room again, the same command writes the audio
    assert kokoro_tvm("say", "Good day.", "-o", str(out),
                      "--model", str(model_folder(speaking_built))).returncode == 0
    assert soundfile.info(str(out)).frames > 0


def test_a_folder_for_a_cpu_this_one_falls_short_of_is_refused(built, tmp_path):
    """A folder whose manifest names an extension this CPU lacks (as one built with mcpu: host
    on a newer CPU does) is refused in one line naming it, before any library loads, where the
    libraries would have died of an illegal instruction; the output file stays as it was."""
    from kokoro_tvm.cpu import CPU_EXTENSIONS, host_cpu_extensions, host_machine

    lacking = sorted(set(CPU_EXTENSIONS[host_machine()]) - (host_cpu_extensions() or set()))
    if not lacking:
        pytest.skip("this CPU has every extension cpu.CPU_EXTENSIONS lists")
    folder = tmp_path / "model"
    shutil.copytree(model_folder(built), folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["cpu"] = {"mcpu": "newer", "extensions": [*manifest["cpu"]["extensions"], lacking[0]]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "speech.wav"
    out.write_bytes(b"earlier audio")
    done = kokoro_tvm("say", "Hello", "-o", str(out), "--model", str(folder))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"code for the CPU newer may use {lacking[0]}, which this machine's" in done.stderr
    assert "mcpu: host" in done.stderr
    assert out.read_bytes() == b"earlier audio"


def test_missing_model_folder_names_the_build_command(tmp_path):
    done = kokoro_tvm("say", "Hello", "-o", str(tmp_path / "x.wav"), "--model",
                      str(tmp_path / "results/dist/llvm"))
    assert done.returncode == 2
    assert "is not a model folder" in done.stderr
    assert "snakemake --cores 2 results/dist/llvm" in done.stderr


def test_a_wrong_model_path_names_the_model_folders_near_it(tmp_path):
    """Only folders with a manifest are offered (inside the path given, else beside it), and
    the command that builds the target a results/dist/TARGET path names."""
    dist = tmp_path / "results" / "dist"
    (dist / "llvm").mkdir(parents=True)
    (dist / "llvm" / "manifest.json").write_text("{}")
    (dist / "notes").mkdir()
    for wrong, target in ((dist, "llvm"), (dist / "llvm_int8", "llvm_int8")):
        done = kokoro_tvm("say", "Hello", "-o", str(tmp_path / "x.wav"), "--model", str(wrong))
        assert done.returncode == 2
        assert done.stderr.strip().endswith(
            f"model folders near it: {dist / 'llvm'}; build one with "
            f"`snakemake --cores 2 results/dist/{target}`"), done.stderr


def test_target_names_this_builds_model_folder(built):
    """--target T is --model results/dist/T, from the folder holding results/."""
    said = kokoro_tvm("voices", "--target", "llvm", cwd=built)
    assert said.returncode == 0, said.stderr
    assert said.stdout == kokoro_tvm("voices", "--model", str(model_folder(built))).stdout
    missing = kokoro_tvm("voices", "--target", "cuda", cwd=built)
    assert missing.returncode == 2
    assert "results/dist/cuda is not a model folder" in missing.stderr
    assert "`snakemake --cores 2 results/dist/cuda`" in missing.stderr
    both = kokoro_tvm("voices", "--target", "llvm", "--model", str(model_folder(built)))
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def with_voices(built: Path, folder: Path, *names: str) -> Path:
    """A copy of the tiny model folder in ``folder`` with more voices, each af_heart's table."""
    shutil.copytree(model_folder(built), folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    for name in names:
        shutil.copy(folder / "voices/af_heart.npy", folder / f"voices/{name}.npy")
        manifest["voices"].append(name)
        manifest["files"][f"voices/{name}.npy"] = manifest["files"]["voices/af_heart.npy"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_voices_lists_the_model_folders_voices_with_their_language(built):
    done = kokoro_tvm("voices", "--model", str(model_folder(built)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["af_heart\ten-us\tAmerican English\tfemale"]


def test_voices_say_why_a_voices_language_cannot_be_spoken(built, tmp_path, monkeypatch,
                                                            capsys):
    """A voice whose language's G2P is not installed is listed, with the extra to install."""
    folder = with_voices(built, tmp_path / "model", "xx_custom", "zm_yunxi")
    monkeypatch.setitem(sys.modules, "jieba", None)  # as if kokoro-tvm[zh] were not installed
    assert cli.main(["voices", "--model", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "af_heart\ten-us\tAmerican English\tfemale",
        "xx_custom\t-\t(its name names no language: give --lang)\t-",
        "zm_yunxi\tzh\tMandarin Chinese\tmale\tunavailable: Mandarin Chinese (zh) needs jieba, "
        "not installed here: pip install 'kokoro-tvm[zh]'"]


def test_speed_range_is_checked_as_a_number():
    low, high = SPEED_RANGE
    assert check_speed(low) == low and check_speed(high) == high and check_speed("1.5") == 1.5
    for bad in (low - 0.01, high + 0.01, float("inf"), float("nan"), "fast", None):
        with pytest.raises(RequestError):
            check_speed(bad)


@pytest.mark.parametrize("suffix", sorted(FORMATS))
def test_every_format_the_name_asks_for_is_written_and_reads_back(tmp_path, suffix):
    """.wav, .flac, .ogg (and .mp3 with this libsndfile): checked, written, read back at
    24 kHz with the tone still there."""
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(SAMPLE_RATE) / SAMPLE_RATE)).astype(
        np.float32)
    dest = tmp_path / f"tone{suffix}"
    assert check_output(dest) == FORMATS[suffix]
    write_audio(dest, tone)
    audio, rate = soundfile.read(dest, dtype="float32")
    assert rate == SAMPLE_RATE and abs(len(audio) - len(tone)) < 0.1 * SAMPLE_RATE
    spectrum = np.abs(np.fft.rfft(audio[:SAMPLE_RATE // 2]))
    assert abs(np.argmax(spectrum) * 2 - 440) <= 4  # the 440 Hz tone, in 2 Hz bins


def test_output_in_a_folder_that_cannot_be_written_is_refused(tmp_path):
    with pytest.raises(OutputError, match="is a folder"):
        check_output(tmp_path)
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    with pytest.raises(OutputError, match="not a writable folder"):
        check_output(tmp_path / "notes.txt" / "x.wav")


def test_language_defaults_to_the_voices(built, tmp_path):
    """A British voice speaks British English unless --lang says otherwise (Kokoro's rule:
    the first letter of the voice names its language)."""
    tts = Kokoro(with_voices(built, tmp_path / "model", "bf_emma"))
    assert tts.voices == ["af_heart", "bf_emma"]
    assert tts.check_request("Hello.", "bf_emma", 1.0, None) == (1.0, "en-gb")
    assert tts.check_request("Hello.", "af_heart", 1.0, None) == (1.0, "en-us")
    assert tts.check_request("Hello.", "bf_emma", 1.0, "en-us") == (1.0, "en-us")
    with pytest.raises(RequestError, match="unknown language 'fr'"):
        tts.check_request("Hello.", "bf_emma", 1.0, "fr")


def test_api_loads_the_g2p_of_given_languages_at_construction(built, monkeypatch):
    """A server's first request finds its G2P loaded; an unknown language fails at once."""
    loaded = []
    build = g2p.word_phonemizer.__wrapped__

    def counted(lang: str):
        loaded.append(lang)
        return build(lang)

    monkeypatch.setattr(g2p, "word_phonemizer", functools.cache(counted))
    with pytest.raises(RequestError, match="unknown language 'fr' in languages; choose from"):
        Kokoro(model_folder(built), engine=ToneEngine(), languages=("en-us", "fr"))
    assert loaded == []
    tts = Kokoro(model_folder(built), engine=ToneEngine(), languages=("en-us",))
    assert loaded == ["en-us"]
    assert len(list(tts.stream("Hello there. Goodbye.", voice="af_heart"))) == 2
    assert loaded == ["en-us"]  # the request used the G2P loaded at construction


class ToneEngine:
    """Speaks 600 samples per token of a constant that counts its calls: enough to follow the
    API's plumbing on the tiny folder's voices, whose own libraries fit no sentence at speed 1
    (the real libraries speak in tests/test_e2e.py)."""

    def __init__(self):
        self.calls = []

    def synthesize(self, ids, ref_s, speed, seed):
        self.calls.append((len(ids), speed, seed))
        return np.full(600 * len(ids), 0.1 * len(self.calls), dtype=np.float32)


def test_api_create_and_stream_in_kokoro_onnx_style(built):
    text = "The first sentence is here. A second one follows it. And a third."
    engine = ToneEngine()
    tts = Kokoro(model_folder(built), engine=engine)
    samples, rate = tts.create(text, voice="af_heart", speed=1.25, lang="en-us")
    assert rate == SAMPLE_RATE == tts.sample_rate and samples.dtype == np.float32
    assert len(engine.calls) == 1 and engine.calls[0][1] == 1.25  # sentences joined
    assert len(samples) == 600 * engine.calls[0][0]
    chunks = list(tts.stream(text, voice="af_heart", speed=1.25))
    assert [c.text for c in chunks] == ["The first sentence is here.", "A second one follows it.",
                                        "And a third."]
    assert [c.start_seconds for c in chunks] == [
        0, len(chunks[0].samples) / SAMPLE_RATE,
        (len(chunks[0].samples) + len(chunks[1].samples)) / SAMPLE_RATE]
    assert sum(len(c.samples) for c in chunks) == 600 * sum(n for n, _, _ in engine.calls[1:])
    with pytest.raises(RequestError, match="speed 3 is outside"):
        next(tts.stream(text, speed=3))  # checked before any synthesis
    assert len(engine.calls) == 4


def test_api_refuses_bad_arguments_and_an_unbuilt_lstm_before_any_work(broken_model):
    """The folder's libraries are corrupt: either check running after a load would fail on that
    instead."""
    engine = ToneEngine()
    tts = Kokoro(broken_model, engine=engine)
    with pytest.raises(RequestError, match="seed -1 is not a whole number"):
        next(tts.stream("Hello.", seed=-1))
    with pytest.raises(RequestError, match="seed 1.5 is not a whole number"):
        tts.create("Hello.", seed=1.5)
    with pytest.raises(SpeechError, match="the text is a bytes: give a str"):
        tts.create(b"Hello.")
    assert engine.calls == []
    with pytest.raises(ModelFolderError, match="no libraries with LSTM lowering 'tir_vecc'"):
        Kokoro(broken_model, lstm="tir_vecc")
