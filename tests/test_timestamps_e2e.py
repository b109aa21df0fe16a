"""Word timestamps from the real weights: the TVM runtime's and the PyTorch reference's words
against kokoro's KPipeline on the same text and voice, a paced stream's words, and subtitles
from `kokoro-tvm say`.

The engines and KPipeline run only their text side where words are compared (the duration
model decides every time; a decoder, whose audio is as long as the durations say, decides
none), so those checks cost seconds; the paced stream and `say` decode."""
from __future__ import annotations

import functools
import subprocess

import numpy as np
import pytest
import soundfile
import srt
import torch
import webvtt
from conftest import BIN, model_folder
from test_timestamps import kpipeline_words

from kokoro_tvm.facts import SAMPLE_RATE, SAMPLES_PER_FRAME
from kokoro_tvm.model.reference import TorchEngine
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.engine import TvmEngine
from kokoro_tvm.runtime.kokoro import Kokoro
from kokoro_tvm.runtime.model_folder import ModelFolder
from kokoro_tvm.runtime.speech import FRAME_SECONDS, KPIPELINE_LEAD_FRAMES
from kokoro_tvm.runtime.voices import load_voice

pytestmark = pytest.mark.slow

VOICE = "af_heart"
# (text, speed): punctuation, numbers, a slow and a fast speed, and a sentence over the test
# build's 64-token bucket, which the speaker halves (KPipeline is given each half it speaks).
CASES = [
    ("Hello world, this is a test.", 1.0),
    ("The quick brown fox jumps over the lazy dog!", 1.0),
    ("It costs $5.50, Dr. Smith said.", 1.0),
    ("I have 1,234 cats; 2nd place went to them in 2024.", 1.0),
    ("“Hi,” she said — don't go (please).", 1.0),
    ("Wait... what?", 1.0),
    ("Please call me back when you get home tonight.", 0.7),
    ("Is it 45 or 415 now?", 0.7),
    ("We will meet at the station at seven in the morning.", 1.5),
    ("Prices rose 12% in the third quarter; analysts were surprised.", 1.5),
    ("When the long meeting finally ended, everyone walked out into the cold evening air, "
     "talking quietly about the plans for next year and the many changes still to come.", 1.0),
    ("Good morning. How are you today?", 1.0),
]


class TextSide:
    """A TimedEngine (runtime/speech.py) that runs an engine's text side alone: its durations
    (kept, in order), and silence of the length they give (the decoder's audio has exactly
    that length)."""

    def __init__(self, engine):
        self.engine, self.durations = engine, []

    def synthesize(self, ids, ref_s, speed, seed):
        return self.synthesize_with_durations(ids, ref_s, speed, seed)[0]

    def synthesize_with_durations(self, ids, ref_s, speed, seed):
        durations = self.engine.prosody(ids, ref_s, speed, seed).durations
        self.durations.append(durations)
        return np.zeros(SAMPLES_PER_FRAME * int(durations.sum()), np.float32), durations


@pytest.fixture(scope="module")
def folder(real_built) -> ModelFolder:
    return ModelFolder(model_folder(real_built))


@pytest.fixture(scope="module")
def engines(real_built, folder) -> dict:
    """The TVM runtime's and the reference's text sides."""
    return {"tvm": TextSide(TvmEngine(folder)), "torch": TextSide(TorchEngine(real_built))}


class NoDecoder(torch.nn.Module):
    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return inputs[0].new_zeros(0)


@pytest.fixture(scope="module")
def voice_pack(folder) -> torch.Tensor:
    return torch.from_numpy(load_voice(VOICE, folder))


@pytest.fixture(scope="module")
def kpipeline(engines):
    """KPipeline for American English on the reference's KModel, its decoder left out."""
    pipeline = pytest.importorskip("kokoro.pipeline")
    kmodel = engines["torch"].engine.kmodel
    kmodel.decoder = NoDecoder()
    with g2p._spacy_model_alias():
        return pipeline.KPipeline(lang_code="a", repo_id="hexgrad/Kokoro-82M", model=kmodel)


@functools.cache
def _kpipeline_piece(kpipeline, voice_pack, text: str, speed: float
                     ) -> tuple[str, list[tuple[str, float, float]], float]:
    """KPipeline's phonemes of ``text``, its words and its audio's seconds (the engines speak
    most cases in the same pieces: computed once)."""
    [result] = list(kpipeline(text, voice=voice_pack, speed=speed))
    return (result.phonemes, kpipeline_words(result.tokens),
            int(result.pred_dur.sum()) * FRAME_SECONDS)


def _kpipeline_words(kpipeline, pieces, voice_pack, speed) -> list[tuple[str, float, float]]:
    """KPipeline's words for each of ``pieces`` (text, phonemes) spoken after the other."""
    words, offset = [], 0.0
    for text, phonemes in pieces:
        spoken, timed, seconds = _kpipeline_piece(kpipeline, voice_pack, text, speed)
        assert spoken == phonemes  # the same G2P reading
        words += [(word, start + offset, end + offset) for word, start, end in timed]
        offset += seconds
    return words


@pytest.mark.parametrize("engine_name", ["tvm", "torch"])
def test_word_times_are_kpipelines_on_the_same_text_and_voice(engines, kpipeline, voice_pack,
                                                              folder, engine_name):
    """Every word's start and end within a frame (25 ms) of KPipeline's on PyTorch, for each
    case, on either engine: the durations the engine computes, our timing of them and the
    pieces' places in the whole audio. The TVM runtime halves the long sentence."""
    tts = Kokoro(folder, engine=engines[engine_name])
    worst, split = 0.0, False
    for text, speed in CASES:
        chunks = list(tts.stream(text, VOICE, speed, per_sentence=False))
        split |= len(chunks) > 1
        found = [(w.text, w.start, w.end) for chunk in chunks for w in chunk.words]
        expected = _kpipeline_words(kpipeline, [(c.text, c.phonemes) for c in chunks],
                                    voice_pack, speed)
        assert [text for text, _, _ in found] == [text for text, _, _ in expected]
        differences = np.abs(np.array([f[1:] for f in found]) - [e[1:] for e in expected])
        worst = max(worst, differences.max())
    assert worst <= FRAME_SECONDS + 1e-9, worst
    assert split == (engine_name == "tvm")  # the reference takes any piece whole


def test_create_returns_the_streams_words_with_the_samples(engines, folder):
    tts = Kokoro(folder, engine=engines["torch"])
    text, speed = CASES[0]
    samples, rate, words = tts.create(text, VOICE, speed, timestamps=True)
    chunks = list(tts.stream(text, VOICE, speed, per_sentence=False))
    assert rate == SAMPLE_RATE and len(samples) == sum(len(c.samples) for c in chunks)
    assert words == [w for c in chunks for w in c.words]


def test_a_paced_streams_words_are_its_pieces_and_end_with_the_audio(engines, folder):
    """The TVM runtime streaming (a lead, then paced windows where its decodes would fall
    behind): its words are those of the same pieces spoken whole, in order without overlap,
    the last ending the end pad and KPipeline's lead before the audio does."""
    text = f"{CASES[0][0]} {CASES[-1][0]}"
    tvm = engines["tvm"].engine
    chunks = list(Kokoro(folder, engine=tvm).stream(text, VOICE))
    assert len(chunks) > 3  # the first sentence's lead and rest, then the others
    whole = TextSide(tvm)
    pieces = list(Kokoro(folder, engine=whole).stream(text, VOICE))
    words = [w for c in chunks for w in c.words]
    assert [w.text for w in words] == [w.text for c in pieces for w in c.words]
    np.testing.assert_allclose([(w.start, w.end) for w in words],
                               [(w.start, w.end) for c in pieces for w in c.words])
    assert all(a.end <= b.start + 1e-9 for a, b in zip(words, words[1:]))
    seconds = sum(len(c.samples) for c in chunks) / SAMPLE_RATE
    end_pad = int(whole.durations[-1][-1]) + KPIPELINE_LEAD_FRAMES
    assert words[-1].end == pytest.approx(seconds - end_pad * FRAME_SECONDS)


def test_say_writes_subtitles_that_cover_the_audio(real_built, tmp_path):
    """`kokoro-tvm say --subtitles`: SubRip whole, WebVTT as it streams; both parse, hold
    every word, start at 0 and end with the audio."""
    text = "Hello there. Goodbye for now, then."
    for suffix, stream in ((".srt", []), (".vtt", ["--stream"])):
        audio, subtitles = tmp_path / f"speech{suffix}.wav", tmp_path / f"speech{suffix}"
        done = subprocess.run([str(BIN / "kokoro-tvm"), "say", text, "-o", str(audio),
                               "--subtitles", str(subtitles), "--model",
                               str(model_folder(real_built)), *stream],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        content = subtitles.read_text(encoding="utf-8")
        if suffix == ".srt":
            cues = [(s.start.total_seconds(), s.end.total_seconds(), s.content)
                    for s in srt.parse(content)]
        else:
            cues = [(c.start_time.in_milliseconds() / 1000,
                     c.end_time.in_milliseconds() / 1000, c.text)
                    for c in webvtt.from_string(content)]
        assert " ".join(cue for _, _, cue in cues).split() == text.split()
        seconds = soundfile.info(str(audio)).frames / SAMPLE_RATE
        assert cues[0][0] == 0 and abs(cues[-1][1] - seconds) <= 0.002
        assert all(a[1] == b[0] for a, b in zip(cues, cues[1:]))
