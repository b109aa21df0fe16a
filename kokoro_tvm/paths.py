"""The artifact layout (docs/architecture.md, Artifacts): every path the pipeline, runtime and
tests use.

Each pattern is a ``str.format`` template whose fields are the artifact's dimensions; Snakemake
rules use the same strings as wildcard patterns. No other module of the package composes an
artifact path (tools/gpu_check keeps its bundle in results/gpu_check, outside the pipeline).
"""
from __future__ import annotations

from pathlib import Path

# A path as the stage functions and scripts take it.
PathLike = str | Path

RESULTS = "results"

# A model folder (results/dist/{target}, copied anywhere): what the runtime reads, relative to
# the folder. results/assets keeps the model config and voices under the same names, so the
# voice and vocabulary loaders read either folder.
MODEL_MANIFEST = "manifest.json"
MODEL_CONFIG = "config.json"
MODEL_VOICE_DIR = "voices"
VOICE_FILE = "{voice}.npy"
MODEL_VOICE = f"{MODEL_VOICE_DIR}/{VOICE_FILE}"
MODEL_PARAMS = "params/{component}.npz"
MODEL_LIBRARY = "lib/{component}/{lstm}/b{bucket}.so"
# A webgpu library: WGSL and launch plans in one JSON document (compile/webgpu/plan.py).
MODEL_PLAN = "lib/{component}/{lstm}/b{bucket}.plan.json"
# The {lstm} of a component without an LSTM (bert, decoder).
WITHOUT_LSTM = "none"

ASSETS = f"{RESULTS}/assets"
ASSET_WEIGHTS = f"{ASSETS}/kokoro-82m.pth"
ASSET_CONFIG = f"{ASSETS}/{MODEL_CONFIG}"
ASSET_PROVENANCE = f"{ASSETS}/provenance.json"
ONNX_FILE = "kokoro-v1.0.int8.onnx"
ASSET_ONNX = f"{ASSETS}/{ONNX_FILE}"
ASSET_VOICE_DIR = f"{ASSETS}/{MODEL_VOICE_DIR}"
ASSET_VOICE = f"{ASSETS}/{MODEL_VOICE}"
ASSET_VOICES_PROVENANCE = f"{ASSET_VOICE_DIR}/provenance.json"

# One program per component, its length symbolic; one import per (component, lstm).
EXPORT = f"{RESULTS}/export/{{component}}.pt2"
# What PyTorch computes on a bucket's example inputs (validation reads it).
REFERENCE = f"{RESULTS}/reference/{{component}}/b{{bucket}}.npz"
RELAX = f"{RESULTS}/relax/{{component}}/{{lstm}}.json"
PARAMS = f"{RESULTS}/params/{{component}}.npz"
TUNE = f"{RESULTS}/tune/{{target}}/{{component}}/{{lstm}}/b{{bucket}}"
LOWERED = f"{RESULTS}/lowered/{{target}}/{{component}}/{{lstm}}/b{{bucket}}.json"
LIBRARY = f"{RESULTS}/lib/{{target}}/{{component}}/{{lstm}}/b{{bucket}}.so"
LIBRARY_META = f"{RESULTS}/lib/{{target}}/{{component}}/{{lstm}}/b{{bucket}}.meta.json"
PLAN = f"{RESULTS}/lib/{{target}}/{{component}}/{{lstm}}/b{{bucket}}.plan.json"
VALIDATION = f"{RESULTS}/validate/{{target}}/{{component}}/{{lstm}}/b{{bucket}}.json"
MANIFEST = f"{RESULTS}/manifest/{{target}}.json"
DIST = f"{RESULTS}/dist/{{target}}"
# The server's container image with that folder, as `docker load` / `podman load` read it.
IMAGE = f"{RESULTS}/image/{{target}}.tar"
# The image's base, checked before any library is built: its name, engine and Python.
IMAGE_BASE = f"{RESULTS}/image/base.json"
# The browser's side (stages/web.py): the ES module that plays webgpu plans (kokoro_tvm/web/,
# copied to WEB_MODULE) beside a browser-shaped copy of the webgpu model folder (WEB_MODEL):
# the plans as they are, the weights and voices as raw little-endian binaries, and a manifest
# with each file's sha256 and size. Paths inside WEB_MODEL are relative to it.
WEB = f"{RESULTS}/web"
WEB_MODEL = "model"
WEB_MODULE = "js"
WEB_PAGE = "index.html"  # the page, beside WEB_MODEL and WEB_MODULE
WEB_WEIGHTS = "weights/{component}.bin"
WEB_VOICE = f"{MODEL_VOICE_DIR}/{{voice}}.bin"
WEB_LEXICON = "g2p/{lang}.json"  # a language's lexicons for the browser's G2P
WEB_ESPEAK_DATA = "g2p/espeak-ng.data"  # eSpeak NG's data, for the browser's other languages
# The bundle a Mac owner checks the Mac targets' libraries with (stages/mac_check.py).
MAC_CHECK = f"{RESULTS}/mac_check"
BENCH_LSTM = f"{RESULTS}/bench/lstm/{{target}}.json"
BENCH_LSTM_PLOT = f"{RESULTS}/bench/lstm/{{target}}.png"
BENCH_COMPONENTS = f"{RESULTS}/bench/components/{{target}}.json"
BENCH_COMPONENTS_PLOT = f"{RESULTS}/bench/components/{{target}}.png"
BENCH_E2E = f"{RESULTS}/bench/e2e/{{target}}.json"
BENCH_E2E_PLOT = f"{RESULTS}/bench/e2e/{{target}}.png"
BENCH_SERVE = f"{RESULTS}/bench/serve/{{target}}.json"
BENCH_SLOW_READERS = f"{RESULTS}/bench/slow_readers/{{target}}.json"
BENCH_WEB = f"{RESULTS}/bench/web.json"
BENCH_WEB_WORK = f"{RESULTS}/bench/web"  # kokoro-js's npm install and the benchmark's site
REPORT_VALIDATION = f"{RESULTS}/report/validation/{{target}}.html"
REPORT_SPECTROGRAM = f"{RESULTS}/report/spectrogram/{{target}}.png"


def work_folder(manifest: str | Path) -> Path:
    """The folder whose results/ holds ``manifest``: the paths a manifest lists are relative
    to it."""
    return Path(manifest).resolve().parents[MANIFEST.count("/")]


def artifact(pattern: str, root: str | Path = ".", **dims) -> Path:
    """The path of one artifact: ``pattern`` filled with its dimensions, under ``root``."""
    return Path(root) / pattern.format(**dims)
