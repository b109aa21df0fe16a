from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from kokoro_tvm import paths
from kokoro_tvm.atomic import atomic_folder, sha256_file, write_json
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.paths import PathLike
from kokoro_tvm.runtime.model_folder import FORMAT


def place(source: Path, folder: Path, relative: str, files: dict[str, str]) -> None:
    """``source`` at ``folder/relative`` (a hard link where the filesystem allows, since
    artifacts are replaced by rename, never rewritten in place), its sha256 in ``files``."""
    dest = folder / relative
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)
    files[relative] = sha256_file(dest)


def model_manifest(target: str, architecture: str, system: str, cpu: dict[str, Any],
                   libraries: list[dict[str, Any]], files: dict[str, str],
                   voices: list[str] = (), left_out: list[dict[str, Any]] = ()
                   ) -> dict[str, Any]:
    """A model folder's manifest.json, in the layout runtime/model_folder.py reads: the
    libraries (paths relative to the folder), every file's sha256, the CPU architecture and
    operating system the libraries run on and the CPU their host code is compiled for
    (compile/targets.cpu_of), the voices, and the libraries left out."""
    return {"format": FORMAT, "target": target, "architecture": architecture,
            "system": system, "cpu": cpu,
            "sample_rate": SAMPLE_RATE, "voices": sorted(voices), "libraries": libraries,
            "left_out": list(left_out), "files": files}


def write_dist(manifest: PathLike, model_config: PathLike, voices: list[PathLike],
               out: PathLike) -> dict[str, Any]:
    """The model folder a user ships, results/dist/{target}/, which the runtime alone reads
    wherever it is copied: the target's libraries, their params, the model config (with the
    phoneme vocabulary) and the voices, with a manifest of paths relative to the folder and
    each file's sha256 (the layout: kokoro_tvm/paths.py, MODEL_*). A library this machine could
    not run (another device, architecture or operating system: a Mac's, built on Linux) is in
    the folder with ``validated: false``, to be validated where it runs (the Mac check, the GPU
    check); any other library that did not pass is left out and listed with its status.
    Written beside ``out`` and renamed into place, so an interrupted run leaves the previous
    folder or none."""
    build = json.loads(Path(manifest).read_text())
    work = paths.work_folder(manifest)
    with atomic_folder(out) as tmp:
        files: dict[str, str] = {}
        libraries, left_out = [], []
        for entry in build["libraries"]:
            dims = {key: entry[key] for key in ("component", "lstm", "bucket")}
            if entry["passed"] is not True and entry["validation_status"] != "skipped":
                left_out.append({**dims, "validation_status": entry["validation_status"]})
                continue
            library = (paths.MODEL_PLAN if entry["device"] == "webgpu"
                       else paths.MODEL_LIBRARY).format(**dims)
            params = paths.MODEL_PARAMS.format(component=entry["component"])
            place(work / entry["library"], tmp, library, files)
            if params not in files:
                place(paths.artifact(paths.PARAMS, work, component=entry["component"]), tmp,
                       params, files)
            transforms = {name: function["transform"]
                          for name, function in entry["functions"].items()}
            libraries.append({**dims, "library": library, "params": params,
                              "device": entry["device"], "transforms": transforms,
                              "validated": entry["validated"]})
        place(Path(model_config), tmp, paths.MODEL_CONFIG, files)
        names = sorted(Path(voice).stem for voice in voices)
        for voice in voices:
            place(Path(voice), tmp, paths.MODEL_VOICE.format(voice=Path(voice).stem), files)
        # The CPU and system the libraries' host code runs on (one target, one machine).
        (architecture,) = {entry["host_architecture"] for entry in build["libraries"]}
        (system,) = {entry["system"] for entry in build["libraries"]}
        (cpu,) = {json.dumps(entry["cpu"], sort_keys=True) for entry in build["libraries"]}
        document = model_manifest(build["target"], architecture, system, json.loads(cpu),
                                  libraries, files, names, left_out)
        write_json(tmp / paths.MODEL_MANIFEST, document)
    return document

