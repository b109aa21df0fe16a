"""A model folder (results/dist/{target}, copied anywhere): its manifest, checked files, voices
and phoneme vocabulary. Every path the runtime opens comes from here, relative to the folder."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from kokoro_tvm import paths
from kokoro_tvm.atomic import sha256_file
from kokoro_tvm.cpu import cannot_run_reason, host_machine, host_system
from kokoro_tvm.errors import UserError

# The manifest layout this runtime reads and kokoro_tvm/stages/dist.py writes; raised when it
# changes incompatibly.
FORMAT = 1
DEFAULT_TARGET = "llvm"
DEFAULT_MODEL = paths.DIST.format(target=DEFAULT_TARGET)
# An mcpu whose code runs on most CPUs of an architecture, for folders that must run on several.
PORTABLE_CPUS = {"x86_64": "x86-64-v3 runs on every x86-64 CPU with AVX2 and FMA",
                 "aarch64": "generic runs on every 64-bit Arm CPU"}


class ModelFolderError(UserError):
    """A model folder that is missing, incomplete, changed since it was built, or for another
    machine."""


def build_command(target: str) -> str:
    """The command that builds (or rebuilds) ``target``'s model folder."""
    return f"snakemake --cores 2 {paths.DIST.format(target=target)}"


def _rebuild_hint(folder: Path) -> str:
    return (f"rebuild it with `{build_command(DEFAULT_TARGET)}` (or results/dist/TARGET) "
            f"and copy that folder to {folder}")


def _missing_folder_hint(path: Path) -> str:
    """The model folders inside ``path`` or else beside it (``--model results/dist`` meant for
    ``results/dist/llvm``, or a target not built), and how to build one: the target the path
    names where it is a build's results/dist/TARGET, else the default."""
    hint = ""
    for place in (path, path.parent):
        found = sorted(str(p.parent) for p in place.glob(f"*/{paths.MODEL_MANIFEST}"))
        if found:
            more = f" and {len(found) - 3} more" if len(found) > 3 else ""
            hint = f"; model folders near it: {', '.join(found[:3])}{more}"
            break
    dist = Path(paths.DIST.format(target="")).parts
    target = path.name if path.parent.parts[-len(dist):] == dist else DEFAULT_TARGET
    return f"{hint}; build one with `{build_command(target)}`"


class ModelFolder:
    """The model folder at ``path``; its manifest is read and checked when opened, each file's
    sha256 when it is first used."""

    def __init__(self, path: str | Path = DEFAULT_MODEL):
        self.path = Path(path).expanduser()
        manifest = self.path / paths.MODEL_MANIFEST
        if not manifest.is_file():
            raise ModelFolderError(f"{self.path} is not a model folder: it has no "
                                   f"{paths.MODEL_MANIFEST}{_missing_folder_hint(self.path)}")
        try:
            self.manifest: dict[str, Any] = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ModelFolderError(f"{manifest} cannot be read ({err}); "
                                   f"{_rebuild_hint(self.path)}") from err
        if self.manifest.get("format") != FORMAT:
            raise ModelFolderError(f"{self.path} has model folder format "
                                   f"{self.manifest.get('format')}; this kokoro-tvm reads format "
                                   f"{FORMAT}: {_rebuild_hint(self.path)}")
        self._check_architecture()
        self._checked: set[str] = set()

    def _check_architecture(self) -> None:
        # Folders written before the manifest named their CPU are checked for the architecture.
        built_for = self.manifest.get("cpu") or {"mcpu": None, "extensions": []}
        system = self.manifest.get("system", "linux")  # folders before macOS targets: Linux
        reason = cannot_run_reason(self.manifest["architecture"], built_for, system)
        if reason is None:
            return
        here = host_machine()
        if (self.manifest["architecture"], system) != (here, host_system()):
            fix = ("use it on such a machine, or build a folder for this one: "
                   f"{build_command(DEFAULT_TARGET)}")
        else:  # the libraries would stop this process with an illegal instruction
            fix = ("build the folder on this machine (mcpu: host), or for every machine it must "
                   "run on by naming a CPU they all match in config.yaml's target_options "
                   f"(mcpu: {PORTABLE_CPUS[here]})")
        raise ModelFolderError(f"{self.path} holds libraries this machine cannot run: {reason}; "
                               f"{fix}")

    @property
    def target(self) -> str:
        return self.manifest["target"]

    @property
    def libraries(self) -> list[dict[str, Any]]:
        return self.manifest["libraries"]

    @property
    def voices(self) -> list[str]:
        return list(self.manifest["voices"])

    @property
    def lstm_methods(self) -> list[str]:
        """The LSTM lowerings this folder's LSTM components were built with."""
        return sorted({entry["lstm"] for entry in self.libraries} - {paths.WITHOUT_LSTM})

    def check_lstm(self, lstm: str | None) -> None:
        """Refuses an LSTM lowering that none of this folder's libraries was built with
        (None: let the runtime choose)."""
        built = self.lstm_methods
        if lstm is not None and lstm not in built:
            raise ModelFolderError(
                f"{self.path} has no libraries with LSTM lowering '{lstm}'; it has "
                f"{', '.join(built) or 'none'}: give one of those, or leave the lowering out "
                "to use the fastest")

    def file(self, relative: str) -> Path:
        """The path of one file the manifest lists, after checking its sha256 (once)."""
        path = self.path / relative
        expected = self.manifest["files"].get(relative)
        if expected is None:
            raise ModelFolderError(f"{relative} is not in {self.path}'s manifest; "
                                   f"{_rebuild_hint(self.path)}")
        if relative not in self._checked:
            if not path.is_file():
                raise ModelFolderError(f"{path} is listed in the model folder's manifest but "
                                       f"missing: {_rebuild_hint(self.path)}")
            if sha256_file(path) != expected:
                raise ModelFolderError(f"{path} does not match the model folder's sha256: it "
                                       f"changed after the build; {_rebuild_hint(self.path)}")
            self._checked.add(relative)
        return path

    @functools.cached_property
    def vocab(self) -> dict[str, int]:
        """Phoneme -> token id, from the model config."""
        return load_vocab(self.file(paths.MODEL_CONFIG))

    def voice_file(self, name: str) -> Path:
        return self.file(paths.MODEL_VOICE.format(voice=name))


def load_vocab(model_config: str | Path) -> dict[str, int]:
    """The phoneme vocabulary of a model config.json (a model folder's or results/assets')."""
    return json.loads(Path(model_config).read_text(encoding="utf-8"))["vocab"]


class AssetFolder:
    """results/assets read like a model folder: its voices and vocabulary (same names), for the
    PyTorch reference and measurements that run beside the build."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def voices(self) -> list[str]:
        return sorted(p.stem for p in (self.path / paths.MODEL_VOICE_DIR).glob("*.npy"))

    def voice_file(self, name: str) -> Path:
        return self.path / paths.MODEL_VOICE.format(voice=name)

    @functools.cached_property
    def vocab(self) -> dict[str, int]:
        return load_vocab(self.path / paths.MODEL_CONFIG)

    @classmethod
    def of_build(cls, root: str | Path) -> AssetFolder:
        """The assets of the build whose results/ is in ``root``."""
        return cls(paths.artifact(paths.ASSETS, root))
