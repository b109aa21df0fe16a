from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_tvm import facts, paths
from kokoro_tvm.abi import WEBGPU_PLAN_FORMAT, WEBGPU_PLAN_VERSION, WEBGPU_STORAGE
from kokoro_tvm.atomic import atomic_folder, sha256_file, write_json
from kokoro_tvm.errors import UserError
from kokoro_tvm.npm import npm_pack
from kokoro_tvm.paths import PathLike
from kokoro_tvm.runtime.g2p import LANGUAGE_TABLE
from kokoro_tvm.runtime.model_folder import ModelFolder
from kokoro_tvm.runtime.webgpu import stored
from kokoro_tvm.stages.dist import place

# The layout of results/web/model/manifest.json that kokoro_tvm/web/loader.js reads (its
# WEB_FORMAT and WEB_VERSION): raised when it changes incompatibly.
WEB_FORMAT = "kokoro-tvm-web"
WEB_VERSION = 1


class WebError(UserError):
    """A model folder that cannot be made into the browser's copy."""


def module_files() -> list[Path]:
    """The ES module's files (kokoro_tvm/web/*.js, package data), in name order."""
    folder = Path(str(resources.files("kokoro_tvm") / "web"))
    return sorted(folder.glob("*.js"))


def page_file() -> Path:
    """The page that speaks with the module (kokoro_tvm/web/page/index.html, package data)."""
    return Path(str(resources.files("kokoro_tvm") / "web" / "page" / "index.html"))


def _preferred_lstm(folder: ModelFolder, component: str) -> str:
    """The LSTM lowering the browser plays ``component`` with: the fastest the folder has
    (facts.LSTM_METHOD_NAMES' order, as the runtime chooses), or paths.WITHOUT_LSTM."""
    built = {entry["lstm"] for entry in folder.libraries if entry["component"] == component}
    for lstm in (*facts.LSTM_METHOD_NAMES, paths.WITHOUT_LSTM):
        if lstm in built:
            return lstm
    raise WebError(f"{folder.path} has no library of {component}: build the webgpu folder "
                   "with every component (snakemake results/dist/webgpu)")


def _write_raw(arrays: list[tuple[str, np.ndarray]], dest: Path) -> list[dict[str, Any]]:
    """``arrays`` one after another in ``dest``, each in the 32-bit type a plan stores it in
    (abi.WEBGPU_STORAGE), little-endian; their names, dtypes, shapes and byte ranges."""
    tensors, offset = [], 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        for name, array in arrays:
            storage = WEBGPU_STORAGE.get(str(array.dtype))
            if storage is None:
                raise WebError(f"{name} is {array.dtype}, which WebGPU cannot store")
            data = stored(array, storage)
            data = data.astype(data.dtype.newbyteorder("<"), copy=False)
            out.write(data.tobytes())
            tensors.append({"name": name, "dtype": str(array.dtype), "storage": storage,
                            "shape": list(array.shape), "offset": offset,
                            "bytes": data.nbytes})
            offset += data.nbytes
    return tensors


# The languages whose G2P the module runs: misaki's English lexicons (kokoro_tvm/web/g2p.js),
# and eSpeak NG for those the Python runtime reads with it (kokoro_tvm/web/espeak.js).
BROWSER_LEXICONS = {"en-us": False, "en-gb": True}  # language -> misaki's british flag
ESPEAK = "espeak"  # the manifest's g2p key of eSpeak NG's data
# eSpeak NG compiled to WebAssembly with every language's data (GPL-3.0, as eSpeak NG is).
ESPEAK_NPM = "@echogarden/espeak-ng-emscripten@0.3.5"
ESPEAK_NPM_SHA256 = "6b0bac048e123de9a690e3fe79346ed377c18797e9b09c3e0d8761a3ac00abe6"
# Its package's files -> where they go in the web folder.
ESPEAK_FILES = {"espeak-ng.js": f"{paths.WEB_MODULE}/espeak-ng.js",
                "COPYING": f"{paths.WEB_MODULE}/espeak-ng.COPYING",
                "espeak-ng.data": f"{paths.WEB_MODEL}/{paths.WEB_ESPEAK_DATA}"}


def _espeak(site: Path) -> None:
    """eSpeak NG's module, its licence and its data from npm (ESPEAK_NPM), under ``site``."""
    with tempfile.TemporaryDirectory() as tmp:
        tarball = npm_pack(ESPEAK_NPM, ESPEAK_NPM_SHA256, Path(tmp), error=WebError,
                           pinned_at="kokoro_tvm/stages/web.py's ESPEAK_NPM_SHA256")
        with tarfile.open(tarball) as tar:
            for name, path in ESPEAK_FILES.items():
                dest = site / path
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(tar.extractfile(f"package/{name}").read())


def _languages() -> dict[str, dict[str, str | None]]:
    """Per first letter of a voice's name, its language (the Python runtime's code) and the G2P
    the module reads it with: a lexicon's language, ESPEAK, or None (no browser G2P)."""
    espeak = {code for code, language in LANGUAGE_TABLE.items() if language.extra == "espeak"}
    return {language.letter: {"code": code, "name": language.name,
                              "g2p": code if code in BROWSER_LEXICONS
                              else ESPEAK if code in espeak else None}
            for code, language in LANGUAGE_TABLE.items()}


def _lexicons(british: bool) -> dict[str, dict]:
    """misaki's gold and silver lexicons as its English G2P reads them (with the capitalized
    and lower-case forms it adds)."""
    from misaki import en

    lexicon = en.Lexicon(british)
    return {"golds": lexicon.golds, "silvers": lexicon.silvers, "british": british}


def write_web(folder: PathLike, out: PathLike) -> dict[str, Any]:
    """The browser's side, results/web/: a browser-shaped copy of a webgpu model folder
    (``folder``, results/dist/webgpu) in model/, and the ES module that plays it (kokoro_tvm/
    web/*.js) in js/. model/ holds each component's launch plans as they are (the fastest LSTM
    lowering the folder has), its weights in one raw little-endian file, weights/{component}.bin,
    every tensor in the 32-bit type the plans store it in, one after another (their names,
    dtypes, shapes and byte ranges in the manifest), the voices as raw float32, voices/{voice}.bin,
    the model config, and manifest.json: every file's sha256 and size, and what the loader
    needs (components with their LSTM lowering and buckets, libraries, the plan format, the
    sample rate and the model's facts). The folder's files are checked against its own
    manifest first. Written beside ``out`` and renamed into place, so an interrupted run leaves
    the previous folder or none. Returns the model's manifest."""
    source = ModelFolder(folder)
    if not source.libraries or any(e["device"] != "webgpu" for e in source.libraries):
        raise WebError(f"{source.path} is not a webgpu model folder (its libraries are for "
                       f"{source.target}): give results/dist/webgpu")
    with atomic_folder(out) as tmp:
        model = tmp / paths.WEB_MODEL
        hashes: dict[str, str] = {}
        components, libraries, weights = [], [], {}
        for component in facts.COMPONENT_NAMES:
            lstm = _preferred_lstm(source, component)
            entries = sorted((e for e in source.libraries
                              if e["component"] == component and e["lstm"] == lstm),
                             key=lambda e: e["bucket"])
            for entry in entries:
                place(source.file(entry["library"]), model, entry["library"], hashes)
                libraries.append({key: entry[key] for key in
                                  ("component", "lstm", "bucket", "transforms", "validated")}
                                 | {"plan": entry["library"]})
            (params,) = {entry["params"] for entry in entries}
            with np.load(source.file(params)) as npz:
                arrays = [(name, npz[name]) for name in npz.files]
            file = paths.WEB_WEIGHTS.format(component=component)
            weights[component] = {"file": file, "tensors": _write_raw(arrays, model / file)}
            components.append({"name": component, "lstm": lstm,
                               "buckets": [entry["bucket"] for entry in entries]})
        voices = {}
        for voice in source.voices:
            array = np.load(source.voice_file(voice))
            file = paths.WEB_VOICE.format(voice=voice)
            (tensor,) = _write_raw([(voice, array.astype(np.float32))], model / file)
            voices[voice] = {"file": file, "dtype": "float32", "shape": tensor["shape"]}
        place(source.file(paths.MODEL_CONFIG), model, paths.MODEL_CONFIG, hashes)
        g2p = {}
        for lang, british in BROWSER_LEXICONS.items():
            file = paths.WEB_LEXICON.format(lang=lang)
            (model / file).parent.mkdir(parents=True, exist_ok=True)
            # Compact: the lexicons are about 13 MB of JSON so, half again indented.
            (model / file).write_text(json.dumps(_lexicons(british), ensure_ascii=False,
                                                 separators=(",", ":")), encoding="utf-8")
            g2p[lang] = file
        _espeak(tmp)
        g2p[ESPEAK] = paths.WEB_ESPEAK_DATA
        files = {}
        for path in sorted(p for p in model.rglob("*") if p.is_file()):
            relative = path.relative_to(model).as_posix()
            files[relative] = {"sha256": hashes.get(relative) or sha256_file(path),
                               "bytes": path.stat().st_size}
        document = {
            "format": WEB_FORMAT, "version": WEB_VERSION,
            "plan": {"format": WEBGPU_PLAN_FORMAT, "version": WEBGPU_PLAN_VERSION},
            "sample_rate": facts.SAMPLE_RATE, "samples_per_frame": facts.SAMPLES_PER_FRAME,
            "style_dim": facts.STYLE_DIM, "max_tokens": facts.MAX_TOKENS,
            "default_voice": facts.DEFAULT_VOICE, "config": paths.MODEL_CONFIG,
            "components": components, "libraries": libraries, "weights": weights,
            "voices": voices, "g2p": g2p, "languages": _languages(), "files": files}
        write_json(model / paths.MODEL_MANIFEST, document)
        (tmp / paths.WEB_MODULE).mkdir(exist_ok=True)
        for file in module_files():
            shutil.copyfile(file, tmp / paths.WEB_MODULE / file.name)
        shutil.copyfile(page_file(), tmp / paths.WEB_PAGE)
    return document
