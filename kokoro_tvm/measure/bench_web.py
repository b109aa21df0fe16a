"""The project's browser module beside kokoro-js, in one headless Chromium on one text and voice.

Each engine (the module on the web folder's plans; kokoro-js on each of its devices) runs in a
fresh browser on a page served from loopback (``bench_web/index.html``), which times its load
and each pass of the text through the engine's stream: when each piece's audio is ready and how
long it is. Meanwhile the browser's processes' proportional set size is sampled: the page's
peak memory, its GPU process included. kokoro-js runs with Kokoro-82M's weights as the project
gets them, the int8 ONNX export (``results/assets``), laid out as kokoro-js loads a model
(:func:`kokoro_js_model`); its voices are its npm package's, answered locally where it asks
huggingface.co for them. No other request leaves the origin; one that tries is refused and
recorded.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Sequence

import onnx

from kokoro_tvm.atomic import atomic_path, write_json
from kokoro_tvm.cpu import host_cpu_name
from kokoro_tvm.errors import UserError
from kokoro_tvm.measure.metrics import worst_stall
from kokoro_tvm.paths import WEB_MODEL

# What is measured, at the versions measured (kokoro-js's package.json allows newer ones).
NPM_PACKAGES = ("kokoro-js@1.2.1", "@huggingface/transformers@3.8.1", "phonemizer@1.2.1")
# engine[:device]: the project's module, kokoro-js on onnxruntime-web's CPU (WASM) and WebGPU.
ENGINES = ("tvm", "kokoro-js:wasm", "kokoro-js:webgpu")
# kokoro-js's dtype for the int8 export (its model_quantized.onnx).
KOKORO_JS_DTYPE = "q8"
KOKORO_JS_MODEL = "kokoro-82m"
# Where kokoro-js 1.2.1 fetches a voice, hard-coded: answered from its npm package's voices.
KOKORO_JS_VOICE_URL = re.compile(
    r"^https://huggingface\.co/onnx-community/Kokoro-82M-v1\.0-ONNX/resolve/main/voices/"
    r"(?P<voice>[a-z]{2}_[a-z]+)\.bin$")
# Headless Chromium's WebGPU where there is no GPU: SwiftShader. On a machine with a GPU, pass
# only --enable-unsafe-webgpu (Linux) to use it.
SWIFTSHADER_ARGS = ("--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader")
PAGE = Path(__file__).with_name("bench_web") / "index.html"
SAMPLE_SECONDS = 0.2


class BenchWebError(UserError):
    """Something the benchmark needs is missing; the message says what to install or build."""


# --------------------------------------------------------------------------- kokoro-js's model

def kokoro_js_tokenizer(vocab: dict[str, int]) -> dict[str, Any]:
    """A tokenizer.json (Hugging Face tokenizers' format, which transformers.js reads) that gives
    Kokoro's token ids as the runtime makes them: each phoneme its id, phonemes outside the
    vocabulary dropped, a 0 (``$``) at both ends."""
    # Escaped only where a character class needs it: JavaScript's unicode regexes refuse the rest.
    symbols = "".join("\\" + s if s in "\\[]^-" else s for s in sorted(vocab))
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 0, "content": "$", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "Replace", "pattern": {"Regex": f"[^{symbols}]"},
                       "content": ""},
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated",
                          "invert": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "$", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "$", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"$": {"id": "$", "ids": [0], "tokens": ["$"]}},
        },
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"$": 0, **vocab}, "unk_token": "$"},
    }


# kokoro-js's names of the export's inputs and output (transformers.js checks them by name).
KOKORO_JS_NAMES = {"tokens": "input_ids", "style": "style", "speed": "speed", "audio": "waveform"}


def kokoro_js_onnx(source: Path, dest: Path) -> None:
    """The int8 export with its inputs and output named as kokoro-js feeds and reads them."""
    model = onnx.load(str(source))
    graph = model.graph
    names = {value.name for value in [*graph.input, *graph.output]}
    if set(KOKORO_JS_NAMES) != names:
        raise BenchWebError(f"{source}: inputs and outputs {sorted(names)}, not the int8 "
                            f"export's {sorted(KOKORO_JS_NAMES)}; rebuild results/assets")
    for value in [*graph.input, *graph.output]:
        value.name = KOKORO_JS_NAMES[value.name]
    for node in graph.node:
        node.input[:] = [KOKORO_JS_NAMES.get(name, name) for name in node.input]
        node.output[:] = [KOKORO_JS_NAMES.get(name, name) for name in node.output]
    with atomic_path(dest) as partial:
        onnx.save(model, str(partial))


def kokoro_js_model(onnx_file: Path, vocab: dict[str, int], dest: Path) -> None:
    """``dest`` as transformers.js loads a model: config.json, the tokenizer, and the export as
    ``onnx/model_quantized.onnx`` (kokoro-js's q8)."""
    write_json(dest / "config.json", {"model_type": "style_text_to_speech_2"})
    write_json(dest / "tokenizer.json", kokoro_js_tokenizer(vocab))
    write_json(dest / "tokenizer_config.json",
               {"model_max_length": 512, "pad_token": "$", "unk_token": "$",
                "tokenizer_class": "PreTrainedTokenizer"})
    kokoro_js_onnx(onnx_file, dest / "onnx" / "model_quantized.onnx")


# --------------------------------------------------------------------------- the site

def npm_install(dest: Path, packages: Sequence[str] = NPM_PACKAGES) -> Path:
    """``packages`` installed under ``dest`` (their install scripts skipped: onnxruntime-node's
    downloads a GPU build the browser does not use); returns its node_modules."""
    npm = shutil.which("npm")
    if npm is None:
        raise BenchWebError("no npm on PATH: install Node.js and npm (Debian: apt-get install npm)")
    modules = dest / "node_modules"

    def installed(spec: str) -> bool:
        name, version = spec.rsplit("@", 1)
        manifest = modules / name / "package.json"
        return manifest.exists() and json.loads(manifest.read_text())["version"] == version

    if all(installed(spec) for spec in packages):
        return modules
    dest.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([npm, "install", "--ignore-scripts", "--no-audit", "--no-fund",
                           "--no-save", "--prefix", str(dest), *packages],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchWebError(f"npm install {' '.join(packages)} failed:\n{done.stderr[-2000:]}")
    return modules


def bench_site(web: Path, modules: Path, onnx_file: Path, dest: Path) -> Path:
    """The benchmark's static site at ``dest``: the page, the web folder under ``tvm/``,
    kokoro-js, its dependencies, model and voices under ``kokoro-js/``."""
    manifest = web / WEB_MODEL / "manifest.json"
    if not manifest.exists():
        raise BenchWebError(f"{web} is not a web folder (no {WEB_MODEL}/manifest.json): run "
                            f"`snakemake --cores 2 web` first")
    config = json.loads((manifest.parent / json.loads(manifest.read_text())["config"]).read_text())
    if dest.exists():
        shutil.rmtree(dest)
    js = dest / "kokoro-js"
    js.mkdir(parents=True)
    shutil.copy(PAGE, dest / "index.html")
    (dest / "tvm").symlink_to(web.resolve())
    for name, dist in (("kokoro-js", "kokoro-js/dist"),
                       ("transformers", "@huggingface/transformers/dist"),
                       ("phonemizer", "phonemizer/dist"), ("voices", "kokoro-js/voices")):
        (js / name).symlink_to((modules / dist).resolve())
    # kokoro-js imports path and fs/promises, which its package.json maps to nothing in a browser.
    (js / "no-node-module.js").write_text("export default {};\n")
    kokoro_js_model(onnx_file, config["vocab"], js / "model" / KOKORO_JS_MODEL)
    return dest


class _IsolatedHandler(SimpleHTTPRequestHandler):
    """Static files with the headers that make the page cross-origin isolated, so that
    onnxruntime-web may use threads (SharedArrayBuffer), as a site serving kokoro-js would."""

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *args):
        pass


# --------------------------------------------------------------------------- memory

def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.extend(children.get(pid, []))
        todo.extend(children.get(pid, []))
    return found


def browser_pss_mib(root: int) -> float | None:
    """The proportional set size of the Chromium processes under ``root``, in MiB; None where
    there is no /proc to read it from (macOS)."""
    if not Path("/proc/self/smaps_rollup").exists():
        return None
    total = 0
    for pid in _descendants(root):
        try:
            if not Path(f"/proc/{pid}/comm").read_text().startswith("chrom"):
                continue
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += int(re.search(r"^Pss:\s+(\d+) kB", rollup, re.M).group(1))
    return total / 1024


class _PeakSampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self._done = None, threading.Event()

    def run(self):
        while not self._done.wait(SAMPLE_SECONDS):
            sampled = browser_pss_mib(os.getpid())
            if sampled is not None:
                self.peak = max(self.peak or 0.0, sampled)

    def stop(self) -> float | None:
        self._done.set()
        self.join()
        return self.peak


# --------------------------------------------------------------------------- running

def _page_url(origin: str, engine: str) -> str:
    name, _, device = engine.partition(":")
    if name == "tvm":
        return f"{origin}/index.html?engine=tvm"
    return f"{origin}/index.html?engine=kokoro-js&device={device}&dtype={KOKORO_JS_DTYPE}"


def _run_engine(playwright, chromium: str, args: Sequence[str], origin: str, site: Path,
                engine: str, text: str, voice: str, passes: int,
                timeout_s: float) -> dict[str, Any]:
    """One engine in a fresh browser: the page's figures, the peak memory, the requests it made
    outside the origin."""
    sampler = _PeakSampler()
    sampler.start()
    browser = playwright.chromium.launch(executable_path=chromium, args=list(args))
    foreign, answered = [], []
    try:
        page = browser.new_page()

        def route(request_route):
            url = request_route.request.url
            voice_file = KOKORO_JS_VOICE_URL.match(url)
            if url.startswith(origin + "/"):
                request_route.continue_()
            elif voice_file:
                answered.append(url)
                body = (site / "kokoro-js" / "voices" / f"{voice_file['voice']}.bin").read_bytes()
                request_route.fulfill(status=200, body=body,
                                      headers={"Access-Control-Allow-Origin": "*",
                                               "Cross-Origin-Resource-Policy": "cross-origin"})
            else:
                foreign.append(url)
                request_route.abort()

        page.route("**/*", route)
        page.set_default_timeout(timeout_s * 1000)
        page.goto(_page_url(origin, engine))
        page.wait_for_function("document.getElementById('state').textContent === 'ready'")
        started = time.perf_counter()
        figures = page.evaluate("([text, voice, passes]) => window.bench(text, voice, passes)",
                                [text, voice, passes])
        wall = time.perf_counter() - started
        version = browser.version
    finally:
        browser.close()
        peak = sampler.stop()
    result = {"engine": engine, "browser": f"Chromium {version}",
              "load_seconds": figures["load_seconds"], "adapter": figures["adapter"],
              "onnx_threads": figures["threads"],
              "cross_origin_isolated": figures["cross_origin_isolated"],
              "wall_seconds": wall, "peak_pss_mib": peak, "foreign_requests": foreign,
              "answered_locally": sorted(set(answered)), "passes": []}
    for ready, seconds in ((p["ready"], p["seconds"]) for p in figures["passes"]):
        audio = sum(seconds)
        result["passes"].append({
            "first_audio_seconds": ready[0], "total_seconds": ready[-1], "audio_seconds": audio,
            "seconds_per_audio_second": ready[-1] / audio, "pieces": len(ready),
            "worst_stall_seconds": worst_stall(ready, seconds)})
    return result


def benchmark(site: Path, chromium: str, engines: Sequence[str], text: str, voice: str,
              passes: int = 2, args: Sequence[str] = SWIFTSHADER_ARGS,
              timeout_s: float = 3600) -> dict[str, Any]:
    """Every engine's figures on ``text`` spoken by ``voice``, ``passes`` times each (the first
    compiles what the engine compiles at its first call)."""
    from playwright.sync_api import sync_playwright

    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(_IsolatedHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_playwright() as playwright:
            runs = [_run_engine(playwright, chromium, args, origin, site, engine, text, voice,
                                passes, timeout_s) for engine in engines]
    finally:
        server.shutdown()
    return {"text": text, "voice": voice, "passes": passes, "browser": runs[0]["browser"],
            "browser_args": list(args), "npm_packages": list(NPM_PACKAGES),
            "kokoro_js_dtype": KOKORO_JS_DTYPE, "cpu": host_cpu_name(), "cpu_count": os.cpu_count(),
            "engines": runs}


def summary(figures: dict[str, Any]) -> str:
    """One line per engine and pass."""
    lines = [f"{figures['browser']}, {figures['cpu']}, {figures['cpu_count']} cores: "
             f"{figures['text']!r} ({figures['voice']})"]
    for run in figures["engines"]:
        for i, p in enumerate(run["passes"], 1):
            lines.append(
                f"{run['engine']:18} pass {i}: first audio {p['first_audio_seconds']:.1f} s, "
                f"{p['seconds_per_audio_second']:.2f} s per audio second "
                f"({p['total_seconds']:.1f} s for {p['audio_seconds']:.2f} s)")
        peak = run["peak_pss_mib"]
        lines.append(f"{run['engine']:18} load {run['load_seconds']:.1f} s, peak "
                     f"{'not measured' if peak is None else f'{peak:.0f} MiB'}, adapter "
                     f"{run['adapter']}")
    return "\n".join(lines)


def run(web: Path, onnx_file: Path, chromium: str, engines: Sequence[str], text: str, voice: str,
        passes: int, out_json: Path, workdir: Path, args: Sequence[str] = SWIFTSHADER_ARGS
        ) -> dict[str, Any]:
    """The stage: kokoro-js installed and its site made under ``workdir``, every engine timed,
    the figures written to ``out_json``."""
    site = bench_site(Path(web), npm_install(Path(workdir) / "npm"), Path(onnx_file),
                      Path(workdir) / "site")
    figures = benchmark(site, chromium, engines, text, voice, passes, args)
    write_json(Path(out_json), figures)
    return figures
