"""The browser's side (docs/browser.md): `snakemake web` on the tiny build's webgpu folder, the
ES module's unit tests under Node's test runner (tests/js/*.test.mjs), and the module in
Debian's headless Chromium on WebGPU (SwiftShader, a CPU implementation): each component's
plan played in the page on the validation's example inputs gives what the Python player gives
on lavapipe, a changed weight file is refused in one line, and the page asks nothing of any
other origin.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
import threading
import wave
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import (
    REPO,
    TINY_BUCKET,
    TINY_SPEED,
    install_lavapipe,
    launched_chromium,
    model_folder,
    once,
    only_origin,
    run_workflow,
)

from kokoro_tvm import facts, paths
from kokoro_tvm.abi import WEBGPU_PLAN_FORMAT, WEBGPU_PLAN_VERSION, WEBGPU_STORAGE
from kokoro_tvm.measure.bench_web import SWIFTSHADER_ARGS
from kokoro_tvm.measure.metrics import SPECTRAL_TOLERANCES, log_mel_l1, snr_db, worst_stall
from kokoro_tvm.runtime import speech
from kokoro_tvm.runtime.audio_file import pcm16
from kokoro_tvm.stages.web import (
    ESPEAK,
    WEB_FORMAT,
    WEB_VERSION,
    WebError,
    module_files,
    page_file,
    write_web,
)

JS_TESTS = REPO / "tests" / "js"
# Chromium's WebGPU on SwiftShader, its CPU Vulkan (no GPU, no display): WebGPU is behind a
# flag on Linux, and a page must be a secure context (served from localhost) to see it.
WEBGPU_ARGS = list(SWIFTSHADER_ARGS)
# The page's outputs against the Python player's (lavapipe): both are float32 WebGPU, the same
# kernels in another compiler. The decoder is played whole by the page's test (its audio against
# the Python runtime's), not alone here: its 150 pipelines compile for minutes in SwiftShader.
TOLERANCE = {"bert": 1e-5, "duration": 1e-5, "text_encoder": 1e-5, "f0n": 1e-5}


def node() -> str:
    found = shutil.which("node")
    assert found, "no node on PATH: install Node.js (Debian: apt-get install nodejs)"
    return found


def test_the_modules_node_tests_pass():
    done = subprocess.run([node(), "--test", str(JS_TESTS)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def run_node(script: str) -> str:
    done = subprocess.run([node(), "--input-type=module", "-e", script], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_modules_constants_are_the_pythons():
    """What the module states of the plan format and the folder's manifest is what the build
    writes (kokoro_tvm/abi.py, stages/web.py)."""
    stated = json.loads(run_node(
        "import * as plan from './kokoro_tvm/web/plan.js';"
        "import * as loader from './kokoro_tvm/web/loader.js';"
        "import * as kokoro from './kokoro_tvm/web/kokoro.js';"
        "import * as espeak from './kokoro_tvm/web/espeak.js';"
        "console.log(JSON.stringify({plan: [plan.PLAN_FORMAT, plan.PLAN_VERSION],"
        " storage: plan.STORAGE, suffix: plan.TRANSFORM_SUFFIX,"
        " web: [loader.WEB_FORMAT, loader.WEB_VERSION],"
        " speech: [kokoro.FADE_SECONDS, kokoro.WORD_LEAD_FRAMES], espeak: espeak.ESPEAK}))"))
    assert stated == {"plan": [WEBGPU_PLAN_FORMAT, WEBGPU_PLAN_VERSION],
                      "storage": WEBGPU_STORAGE, "suffix": "_transform_params",
                      "web": [WEB_FORMAT, WEB_VERSION],
                      "speech": [speech.FADE_SECONDS, speech.KPIPELINE_LEAD_FRAMES],
                      "espeak": ESPEAK}


def test_the_modules_word_times_and_fades_are_the_pythons():
    """kokoro.js's word timing (wordFrames) and edge fades (faded) give what the Python
    runtime's (speech.word_frames, speech._faded) give, on words with and without phonemes,
    spaces and marks, and random durations."""
    from kokoro_tvm.runtime.g2p import PhonemizedWord, token_ids

    vocab = {c: i for i, c in enumerate(" .,!?abcdefghijklmnopqrstuvwxyz")}
    rng = np.random.default_rng(0)
    cases = []
    for _ in range(40):
        words = [PhonemizedWord(f"w{i}", "".join(rng.choice(list("abc "), rng.integers(0, 5))),
                                str(rng.choice(["", " ", "  "])))
                 for i in range(rng.integers(1, 6))]
        tokens = 2 + sum(len(token_ids(w.phonemes + w.whitespace, vocab)) for w in words)
        durations = rng.integers(0, 9, tokens)
        cases.append((words, durations))
    samples = rng.uniform(-1, 1, 1000).astype(np.float32)
    source = [{"words": [{"text": w.text, "phonemes": w.phonemes, "whitespace": w.whitespace}
                         for w in words], "frames": durations.tolist()}
              for words, durations in cases]
    got = json.loads(run_node(
        "import { faded, wordFrames } from './kokoro_tvm/web/kokoro.js';"
        f"const vocab = {json.dumps(vocab)};"
        "const count = (s) => [...s].filter((c) => c in vocab).length;"
        f"const cases = {json.dumps(source)};"
        f"const samples = Float32Array.from({json.dumps(samples.tolist())});"
        "console.log(JSON.stringify({times: cases.map((c) => wordFrames(c.words, c.frames, count)),"
        f" faded: Array.from(faded(samples, {facts.SAMPLE_RATE}))}}));"))
    for (words, durations), times in zip(cases, got["times"], strict=True):
        expected = speech.word_frames(words, durations, vocab)
        assert [(t["start"], t["end"]) for t in times] == [(a, b) for _, a, b in expected]
    assert np.abs(np.array(got["faded"], np.float32) - speech._faded(samples)).max() <= 1e-7


def test_the_wav_helper_writes_the_runtimes_16_bit_pcm(tmp_path):
    rng = np.random.default_rng(0)
    samples = np.concatenate([rng.uniform(-1.2, 1.2, 2000), [0, 1, -1, 3, -3],
                              np.array([16382.5, -2.5, 6.5]) / 32767]).astype(np.float32)
    source, out = tmp_path / "samples.f32", tmp_path / "out.wav"
    samples.tofile(source)
    run_node("import { wavBytes } from './kokoro_tvm/web/wav.js';"
             "import fs from 'node:fs';"
             f"const bytes = new Uint8Array(fs.readFileSync('{source}'));"
             "const samples = new Float32Array(bytes.buffer, 0, bytes.length / 4);"
             f"fs.writeFileSync('{out}', new Uint8Array(wavBytes(samples, {facts.SAMPLE_RATE})));")
    with wave.open(str(out)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (
            1, 2, facts.SAMPLE_RATE)
        frames = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    assert np.array_equal(frames, pcm16(samples))


@pytest.fixture(scope="session")
def web_built(other_built, workflow, tmp_path_factory) -> Path:
    """`snakemake web` run on the tiny build's webgpu folder (``other_built``'s); results/web."""
    def make(_) -> str:
        run_workflow(other_built, workflow, "web")
        return str(paths.artifact(paths.WEB, other_built))

    return Path(once(tmp_path_factory, "web_built", make))


def test_the_web_folder_holds_the_webgpu_folders_plans_weights_and_voices(web_built,
                                                                          other_built):
    source = model_folder(other_built, "webgpu")
    dist = json.loads((source / paths.MODEL_MANIFEST).read_text())
    model = web_built / paths.WEB_MODEL
    manifest = json.loads((model / paths.MODEL_MANIFEST).read_text())
    assert (manifest["format"], manifest["version"]) == (WEB_FORMAT, WEB_VERSION)
    assert manifest["sample_rate"] == facts.SAMPLE_RATE
    assert [c["name"] for c in manifest["components"]] == list(facts.COMPONENT_NAMES)
    on_disk = {p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file()}
    assert on_disk == set(manifest["files"]) | {paths.MODEL_MANIFEST}
    for relative, entry in manifest["files"].items():
        data = (model / relative).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (entry["sha256"],
                                                                 entry["bytes"]), relative
    for library in manifest["libraries"]:
        assert (model / library["plan"]).read_bytes() == (source / library["plan"]).read_bytes()
        (original,) = [e for e in dist["libraries"] if e["library"] == library["plan"]]
        assert library["transforms"] == original["transforms"]
    for component, table in manifest["weights"].items():
        raw = (model / table["file"]).read_bytes()
        with np.load(source / paths.MODEL_PARAMS.format(component=component)) as params:
            assert [t["name"] for t in table["tensors"]] == params.files
            for tensor in table["tensors"]:
                stored = np.frombuffer(raw, "<" + np.dtype(tensor["storage"]).str[1:],
                                       tensor["bytes"] // 4, tensor["offset"])
                assert np.array_equal(stored.reshape(tensor["shape"]), params[tensor["name"]])
    for voice, entry in manifest["voices"].items():
        array = np.load(source / paths.MODEL_VOICE.format(voice=voice))
        raw = np.fromfile(model / entry["file"], "<f4").reshape(entry["shape"])
        assert np.array_equal(raw, array)
    assert manifest["g2p"] == {"en-us": paths.WEB_LEXICON.format(lang="en-us"),
                               "en-gb": paths.WEB_LEXICON.format(lang="en-gb"),
                               ESPEAK: paths.WEB_ESPEAK_DATA}
    assert {letter: (language["code"], language["g2p"])
            for letter, language in manifest["languages"].items()} == {
        "a": ("en-us", "en-us"), "b": ("en-gb", "en-gb"), "e": ("es", ESPEAK),
        "f": ("fr-fr", ESPEAK), "h": ("hi", ESPEAK), "i": ("it", ESPEAK), "j": ("ja", None),
        "p": ("pt-br", ESPEAK), "z": ("zh", None)}
    lexicons = json.loads((model / manifest["g2p"]["en-us"]).read_text(encoding="utf-8"))
    assert set(lexicons) == {"golds", "silvers", "british"} and not lexicons["british"]
    assert lexicons["golds"]["lighthouse"] == "lˈIthˌWs"
    assert (web_built / paths.WEB_PAGE).read_bytes() == page_file().read_bytes()
    assert sorted(p.name for p in (web_built / paths.WEB_MODULE).iterdir()) == sorted(
        [p.name for p in module_files()] + ["espeak-ng.COPYING", "espeak-ng.js"])


def test_the_web_stage_refuses_a_cpu_folder_and_keeps_the_previous_one(other_built, tmp_path):
    out = tmp_path / "web"
    out.mkdir()
    (out / "previous").write_text("kept")
    with pytest.raises(WebError, match=r"is not a webgpu model folder .*results/dist/webgpu$"):
        write_web(model_folder(other_built, "llvm"), out)
    assert (out / "previous").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["web"]


class _Site(SimpleHTTPRequestHandler):
    """results/web at /, and the browser test's page and script (tests/js) at /harness/."""

    def __init__(self, *args, web: Path, **kwargs):
        self.web = web
        super().__init__(*args, directory=str(web), **kwargs)

    def translate_path(self, path):
        if path.startswith("/harness/"):
            return str(JS_TESTS / path.removeprefix("/harness/").split("?")[0])
        return super().translate_path(path)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(web_built):
    """results/web served on loopback by Python's http.server, as a user would serve it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Site, web=web_built))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(chromium):
    with launched_chromium(chromium, WEBGPU_ARGS) as launched:
        yield launched


@pytest.fixture(scope="module")
def page(browser, site):
    """The test page, with WebGPU; every request to another origin is refused and recorded in
    ``page.foreign``, every request at all in ``page.requests``."""
    context = browser.new_context()
    page = context.new_page()
    page.foreign = only_origin(page, site)
    page.requests = []
    page.on("request", lambda request: page.requests.append(request.url))
    page.goto(f"{site}/harness/harness.html")
    page.adapter = page.evaluate("async () => (await import('/harness/harness.js')).adapter()")
    yield page
    context.close()


def tensor(array: np.ndarray) -> dict:
    """An array as the page's script takes it (tests/js/harness.js): bools as bytes, int64 as
    int32 (as the validation's inputs are stored on the device)."""
    array = np.ascontiguousarray(array)
    if array.dtype == np.int64:
        array = array.astype(np.int32)
    dtype = "bool" if array.dtype == np.bool_ else str(array.dtype)
    return {"b64": base64.b64encode(array.view(np.uint8) if dtype == "bool"
                                    else array.tobytes()).decode(),
            "dtype": dtype, "shape": list(array.shape)}


def from_page(encoded: dict) -> np.ndarray:
    dtype = {"bool": np.uint8}.get(encoded["dtype"], encoded["dtype"])
    return np.frombuffer(base64.b64decode(encoded["b64"]), dtype).reshape(encoded["shape"])


def frame_tokens(tokens: int, frames: int) -> np.ndarray:
    """A deterministic alignment: two frames a token, the rest of the bucket's frames -1."""
    out = np.full(frames, -1, np.int32)
    spoken = np.repeat(np.arange(tokens, dtype=np.int32), 2)[:frames]
    out[:len(spoken)] = spoken
    return out


def calls_of(component: str, built: Path) -> list[dict]:
    """The calls a component's test plays: its functions on the validation's example inputs
    (results/reference), f0n's aligned input from `align` (token features smaller than the
    planned 512 tokens, padded by the player) left on the device."""
    def reference(name):
        with np.load(paths.artifact(paths.REFERENCE, built, component=name,
                                    bucket=TINY_BUCKET)) as npz:
            return {key.split(".", 1)[1]: npz[key] for key in npz.files if "." in key
                    and key.split(".", 1)[0] in ("input", "output")}

    own = reference(component)
    if component in ("bert", "duration", "text_encoder"):
        return [{"fn": "main", "inputs": {k: v for k, v in own.items()
                                           if k in _input_names(component, built)}}]
    return [{"fn": "align", "onDevice": True,  # f0n
             "inputs": {"d": reference("duration")["d"],
                        "frame_token": frame_tokens(6, TINY_BUCKET)}},
            {"fn": "main", "inputs": {"en": {"output": [0, 0]}, "s": own["s"],
                                      "frame_mask": own["frame_mask"]}}]


@functools.cache
def _input_names(component: str, built: Path) -> tuple[str, ...]:
    plan = json.loads(_plan_path(component, built).read_text())
    return tuple(s["name"] for s in plan["functions"]["main"]["slots"] if s["kind"] == "input")


def _plan_path(component: str, built: Path) -> Path:
    manifest = json.loads((model_folder(built, "webgpu") / paths.MODEL_MANIFEST).read_text())
    (entry,) = [e for e in manifest["libraries"] if e["component"] == component]
    return model_folder(built, "webgpu") / entry["library"]


def python_player(component: str, built: Path, calls: list[dict]) -> list[list[np.ndarray]]:
    """The calls on the Python player (runtime/webgpu.py) on this machine's adapter."""
    from kokoro_tvm.runtime.webgpu import GpuTensor, PlanLibrary, PlanWeights, webgpu_device

    folder = model_folder(built, "webgpu")
    manifest = json.loads((folder / paths.MODEL_MANIFEST).read_text())
    (entry,) = [e for e in manifest["libraries"] if e["component"] == component]
    library = PlanLibrary(folder / entry["library"],
                          PlanWeights(folder / entry["params"], webgpu_device()),
                          entry["transforms"])
    outputs = []
    for call in calls:
        inputs = {name: outputs[value["output"][0]][value["output"][1]]
                  if isinstance(value, dict) else value for name, value in call["inputs"].items()}
        outputs.append(library.on_device(call["fn"], inputs) if call.get("onDevice")
                       else library(call["fn"], inputs))
    return [[t.numpy() if isinstance(t, GpuTensor) else t for t in out] for out in outputs]


def in_the_page(page, site: str, component: str, calls: list[dict]) -> dict:
    sent = [{**call, "inputs": {name: value if isinstance(value, dict) else tensor(value)
                                for name, value in call["inputs"].items()}} for call in calls]
    return page.evaluate(
        "async ([url, component, bucket, calls]) =>"
        " (await import('/harness/harness.js')).play(url, component, bucket, calls)",
        [f"{site}/{paths.WEB_MODEL}/", component, TINY_BUCKET, sent])


@pytest.fixture(scope="module")
def lavapipe(tmp_path_factory):
    install_lavapipe(tmp_path_factory)


def check_component(component, page, site, other_built, record_property):
    calls = calls_of(component, other_built)
    played = in_the_page(page, site, component, calls)
    expected = python_player(component, other_built, calls)
    record_property("seconds", played["seconds"])
    assert page.adapter.startswith("WebGPU on ")
    for call, got, want in zip(calls, played["outputs"], expected, strict=True):
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            g = from_page(g)
            assert g.shape == w.shape, (call["fn"], index)
            scale = max(1.0, float(np.abs(w).max()))
            error = float(np.abs(g.astype(np.float64) - w).max()) / scale
            record_property(f"{call['fn']}[{index}] error", error)
            assert error <= TOLERANCE[component], (component, call["fn"], index, error)
    assert page.foreign == []
    assert all(url.startswith(site + "/") for url in page.requests)


@pytest.mark.parametrize("component", ["bert", "duration"])
def test_a_component_plays_in_the_browser_as_in_python(component, page, site, other_built,
                                                       lavapipe, record_property):
    check_component(component, page, site, other_built, record_property)


@pytest.mark.slow
@pytest.mark.parametrize("component", ["text_encoder", "f0n"])
def test_the_other_components_play_in_the_browser_as_in_python(component, page, site,
                                                                other_built, lavapipe,
                                                                record_property):
    check_component(component, page, site, other_built, record_property)


# The browser's English G2P against the Python runtime's (misaki with spaCy's tagger), on the
# end-to-end benchmark's 17 sentences and tests/data/g2p_sentences.txt's 10 (numbers, times,
# contractions, abbreviations, currency): measured 22 of 27 the same, 1.2% of phonemes edited
# (docs/browser.md, G2P). It has no tagger: a word read by its part of speech ("that" as a
# determiner, "read" in the past) takes its default reading.
G2P_EXACT_SHARE, G2P_EDITED_SHARE = 0.75, 0.02


def edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


@pytest.mark.parametrize("lang", ["en-us", "en-gb"])
def test_the_browsers_g2p_reads_english_as_the_python_runtime(lang, tmp_path):
    """g2p.js on the lexicons `snakemake web` writes, under Node, against the Python runtime's
    phonemes of the same sentences, American and British: most the same, few phonemes edited;
    the same words (the text's, punctuation attached: what the word timestamps name)."""
    from kokoro_tvm.measure.bench_e2e import STREAMED
    from kokoro_tvm.runtime.g2p import phonemes_of, sentences, word_phonemizer
    from kokoro_tvm.stages.web import _lexicons

    texts = [s for text in STREAMED.values() for s in sentences(text)]
    texts = list(dict.fromkeys(texts + (REPO / "tests/data/g2p_sentences.txt")
                               .read_text(encoding="utf-8").splitlines()))
    lexicons, given = tmp_path / f"{lang}.json", tmp_path / "texts.json"
    lexicons.write_text(json.dumps(_lexicons(lang == "en-gb"), ensure_ascii=False),
                        encoding="utf-8")
    given.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    browser_words = json.loads(run_node(
        "import fs from 'node:fs';"
        "import { Lexicon, readWords } from './kokoro_tvm/web/g2p.js';"
        f"const lexicon = new Lexicon(JSON.parse(fs.readFileSync('{lexicons}', 'utf8')));"
        f"const texts = JSON.parse(fs.readFileSync('{given}', 'utf8'));"
        "console.log(JSON.stringify(texts.map((t) => readWords(lexicon, t))));"))
    read = word_phonemizer(lang)
    python_words = [read(text) for text in texts]
    for words, expected in zip(browser_words, python_words, strict=True):
        assert [w["text"] for w in words] == [w.text for w in expected]
    browser = ["".join(w["phonemes"] + w["whitespace"] for w in words) for words in browser_words]
    python = [phonemes_of(words) for words in python_words]
    exact = sum(b == p for b, p in zip(browser, python, strict=True)) / len(texts)
    edited = (sum(edit_distance(b, p) for b, p in zip(browser, python))
              / sum(len(p) for p in python))
    print(f"{lang}: {exact:.2f} the same, {edited:.4f} of the phonemes edited")
    assert exact >= G2P_EXACT_SHARE and edited <= G2P_EDITED_SHARE, (exact, edited)


def test_the_browsers_espeak_g2p_reads_the_other_languages_as_the_python_runtime(web_built,
                                                                                tmp_path):
    """espeak.js on the eSpeak NG module and data `snakemake web` wrote, under Node, against the
    Python runtime's G2P (misaki's EspeakG2P on espeak-ng) on held-out sentences of each language
    it reads so (tests/data/espeak_sentences.txt: numbers, times, quotes, parentheses): the same
    phonemes, the same words."""
    from kokoro_tvm.runtime.g2p import phonemes_of, word_phonemizer

    lines = (REPO / "tests/data/espeak_sentences.txt").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith("#")]
    given = tmp_path / "rows.json"
    given.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    js, data = web_built / paths.WEB_MODULE, web_built / paths.WEB_MODEL / paths.WEB_ESPEAK_DATA
    browser_words = json.loads(run_node(
        "import fs from 'node:fs';"
        f"import createModule from '{js / 'espeak-ng.js'}';"
        "import { Espeak } from './kokoro_tvm/web/espeak.js';"
        "import { wordsOf } from './kokoro_tvm/web/g2p.js';"
        f"const data = fs.readFileSync('{data}');"
        "const espeak = await Espeak.load(createModule, data.buffer.slice(data.byteOffset,"
        "  data.byteOffset + data.byteLength));"
        f"const rows = JSON.parse(fs.readFileSync('{given}', 'utf8'));"
        "console.log(JSON.stringify(rows.map(([lang, text]) =>"
        "  wordsOf(text, espeak.phonemize(text, lang)))));"))
    assert {lang for lang, _ in rows} == {"es", "fr-fr", "hi", "it", "pt-br"}
    for (lang, text), words in zip(rows, browser_words, strict=True):
        expected = word_phonemizer(lang)(text)
        assert [(w["text"], w["phonemes"]) for w in words] == [
            (w.text, w.phonemes) for w in expected], (lang, text)
        assert "".join(w["phonemes"] + w["whitespace"] for w in words) == phonemes_of(expected)


# The page's gaps are read on the audio clock, the stall metric's from the chunks' ready times:
# the two clocks' start and the page's scheduling may part by this much.
GAP_CLOCK_SLACK = 0.25


@pytest.mark.slow
def test_the_page_speaks_as_the_python_runtime_streamed_and_offers_the_wav(
        browser, site, other_built, lavapipe, record_property):
    """The web folder's page, as a user opens it from a static server: it names its adapter,
    speaks the text it is given a sentence at a time (kokoro.js: G2P, pieces, then engine.js:
    bucket choice, padding and masks, durations to frames, align, the library's noise from the
    seed, source and body; each chunk scheduled on Web Audio, its words highlighted as they
    play), offers the WAV, and asks nothing of another origin. Each chunk is the Python
    runtime's for its sentence on lavapipe with the libraries' noise (same voice, speed and
    seed: the sentence's place in the text): its phonemes, its words and their times, and its
    audio within the decoder validation's bars at their strictest (the SNR cap, the log-mel L1
    bar). Where the audio ran out before a chunk was ready (SwiftShader decodes far slower than
    real time), the page says it is behind and by how much: the stream's worst stall
    (metrics.worst_stall, bench_e2e's)."""
    from kokoro_tvm.runtime.engine import LIBRARY_NOISE, TvmEngine
    from kokoro_tvm.runtime.model_folder import ModelFolder
    from kokoro_tvm.runtime.speech import speak_chunks

    context = browser.new_context()
    page = context.new_page()
    foreign = only_origin(page, site)
    page.goto(f"{site}/{paths.WEB_PAGE}")
    page.wait_for_function("document.querySelector('#speak').disabled === false", timeout=120_000)
    assert page.text_content("#status").startswith("WebGPU on ")
    assert page.input_value("#voice") == facts.DEFAULT_VOICE
    page.fill("#text", "Hi there. Bye.")
    page.fill("#speed", str(TINY_SPEED))  # the tiny model's frames within its one bucket
    page.click("#speak")
    page.wait_for_selector("#download:not([hidden])", timeout=600_000)
    spoken = page.evaluate(
        "window.kokoro.spoken.map((s) => ({ ...s, samples: Array.from(s.samples) }))")
    status = page.text_content("#status")
    words = [w["text"] for chunk in spoken for w in chunk["words"]]
    page.wait_for_function(f"window.kokoro.highlighted.length === {len(words)}", timeout=30_000)
    highlighted = page.evaluate("window.kokoro.highlighted")
    assert foreign == []
    context.close()

    assert [s["text"] for s in spoken] == ["Hi there.", "Bye."]
    assert highlighted == words == ["Hi", "there.", "Bye."]
    folder = ModelFolder(model_folder(other_built, "webgpu"))
    engine = TvmEngine(folder, noise=LIBRARY_NOISE)
    bars = SPECTRAL_TOLERANCES
    start = 0.0
    for seed, chunk in enumerate(spoken):
        (expected,) = speak_chunks(engine, chunk["text"], facts.DEFAULT_VOICE, speaker=folder,
                                   speed=TINY_SPEED, seed=seed)
        assert chunk["phonemes"] == expected.phonemes
        assert [(w["text"], w["start"] - start, w["end"] - start) for w in chunk["words"]] == [
            (w.text, pytest.approx(w.start, abs=1e-9), pytest.approx(w.end, abs=1e-9))
            for w in expected.words]
        samples = np.array(chunk["samples"], np.float32)
        assert samples.shape == expected.samples.shape and chunk["seconds"] > 0
        snr, mel = snr_db(samples, expected.samples), log_mel_l1(samples, expected.samples)
        record_property(f"{chunk['text']} snr_db, log_mel_l1", (snr, mel))
        assert snr >= bars["snr_db_cap"] and mel <= bars["log_mel_l1"], (snr, mel)
        start += chunk["seconds"]

    stall = worst_stall([c["ready"] for c in spoken], [c["seconds"] for c in spoken])
    behind = max(c["gap"] for c in spoken)
    record_property("worst stall, the page's largest gap", (stall, behind))
    assert behind == pytest.approx(stall, abs=GAP_CLOCK_SLACK)
    assert "done in" in status, status
    if behind > 0:
        assert f"behind: silent up to {behind:.1f} s" in status, status
    else:
        assert "behind" not in status, status


def test_the_page_says_in_one_line_that_there_is_no_webgpu(chromium, site):
    """Without WebGPU (Chromium on Linux without its flag), the page says so in one line: the
    page's DOM once its script has run, as headless Chromium prints it."""
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-background-networking", "--virtual-time-budget=20000",
                           "--dump-dom", f"{site}/{paths.WEB_PAGE}"],
                          capture_output=True, text=True, timeout=120)
    status = re.search(r'<p id="status">([^<]*)</p>', done.stdout)
    assert status, done.stdout[-2000:] + done.stderr[-2000:]
    line = html.unescape(status.group(1))
    assert line.startswith("this browser") and "WebGPU" in line and "\n" not in line, line


def test_the_server_serves_the_page_and_its_model_at_web(browser, web_built, real_built,
                                                          lavapipe, tmp_path):
    """`kokoro-tvm serve --web results/web`: the page at /web/ loads its model from the server
    and names its adapter, beside the speech API (the real model's server: a tiny folder
    cannot say its warm-up sentence)."""
    from kokoro_tvm.measure.bench_serve import Server

    with Server(model_folder(real_built), tmp_path / "server.log", "--web",
                str(web_built)) as server:
        manifest = httpx.get(f"{server.url}/web/{paths.WEB_MODEL}/{paths.MODEL_MANIFEST}").json()
        assert manifest["format"] == WEB_FORMAT
        context = browser.new_context()
        page = context.new_page()
        foreign = only_origin(page, server.url)
        page.goto(f"{server.url}/web/")
        page.wait_for_function("document.querySelector('#speak').disabled === false",
                               timeout=120_000)
        assert page.text_content("#status").startswith("WebGPU on ")
        assert foreign == []
        context.close()
        assert httpx.get(f"{server.url}/health").status_code == 200


def test_the_server_refuses_a_folder_that_is_not_a_web_folder(other_built, tmp_path):
    done = subprocess.run([sys.executable, "-m", "kokoro_tvm.cli", "serve",
                           "--model", str(model_folder(other_built)),
                           "--web", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert (f"--web {tmp_path} is not a web folder (it has no index.html or "
            "model/manifest.json): build one with `snakemake --cores 2 web`") in done.stderr


def test_a_changed_weight_file_is_refused_in_one_line(page, site):
    """The weights served with one byte changed (as a cache or a proxy might) are refused
    before any is uploaded, in one line naming the file."""
    weights = f"{site}/{paths.WEB_MODEL}/{paths.WEB_WEIGHTS.format(component='duration')}"

    def tampered(route):
        body = bytearray(route.fetch().body())
        body[1000] ^= 0x40
        route.fulfill(body=bytes(body), content_type="application/octet-stream")

    page.route(weights, tampered)
    try:
        said = page.evaluate(
            "async ([url, path]) => (await import('/harness/harness.js')).load(url, path)",
            [f"{site}/{paths.WEB_MODEL}/", paths.WEB_WEIGHTS.format(component="duration")])
    finally:
        page.unroute(weights, tampered)
    assert said.startswith(f"{weights} does not match the manifest's sha256 ("), said
    assert "\n" not in said and "refused" in said
    assert page.foreign == []
