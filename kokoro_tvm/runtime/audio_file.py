"""Audio files out: the format comes from the file name and is checked before any synthesis; the
file is written under a temporary name and renamed, so a failed run leaves an existing file as
it was (a full disk is one line naming it: atomic.DiskFull)."""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import SAMPLE_RATE

# File name suffix -> libsndfile format and the subtype written (16-bit PCM where lossless).
FORMATS = {".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16"), ".ogg": ("OGG", "VORBIS"),
           ".mp3": ("MP3", "MPEG_LAYER_III")}


def pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples as 16-bit PCM (rounded, clipped to full scale), as every 16-bit output
    carries them: files, raw PCM and the server's lossless formats."""
    return np.round(np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")


class OutputError(UserError):
    """An output file that cannot be written; the message names the fix."""


def _writable_folder(dest: Path) -> Path:
    """The nearest existing folder above ``dest`` (where the missing ones will be made)."""
    folder = dest.absolute().parent
    while not folder.exists():
        folder = folder.parent
    return folder


def check_folder(dest: str | os.PathLike, example: str = "speech.wav") -> None:
    """An OutputError if ``dest`` is a folder (the message suggests a file ``example`` in it)
    or could not be made in the folder it names."""
    dest = Path(dest)
    if dest.is_dir():
        raise OutputError(f"{dest} is a folder: give a file name such as {dest / example}")
    folder = _writable_folder(dest)
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise OutputError(f"cannot write {dest}: {folder} is not a writable folder")


def check_output(dest: str | os.PathLike) -> tuple[str, str]:
    """The (format, subtype) ``dest`` is written in; an OutputError if its suffix names no
    format this machine's libsndfile writes, or its folder is not writable."""
    import soundfile

    dest = Path(dest)
    check_folder(dest)
    writable = [suffix for suffix, (fmt, subtype) in FORMATS.items()
                if soundfile.check_format(fmt, subtype)]
    suffix = dest.suffix.lower()
    if suffix not in writable:
        what = f"'{suffix}' files" if suffix else "a file name without an extension"
        raise OutputError(f"cannot write {what} ({dest}); name the output {', '.join(writable)} "
                          "(or - with --stream for raw PCM)")
    return FORMATS[suffix]


def write_audio(dest: str | os.PathLike, audio: np.ndarray) -> None:
    """``audio`` (float32 at SAMPLE_RATE) written to ``dest`` in the format its name says."""
    import soundfile

    fmt, subtype = check_output(dest)
    # Encoded in memory, then written by Python: libsndfile reports a full disk as an
    # unspecified error for some formats and not at all for others (a short file).
    encoded = io.BytesIO()
    soundfile.write(encoded, audio, SAMPLE_RATE, format=fmt, subtype=subtype)
    with atomic_path(dest) as tmp:
        tmp.write_bytes(encoded.getvalue())
