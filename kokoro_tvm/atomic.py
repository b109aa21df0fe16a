"""Artifact files: atomic writes (a killed job never leaves a file that looks finished), checksums.

Every artifact is written to a temporary name in the destination folder and renamed into place
only once complete (rename is atomic within one filesystem). A write that fails leaves the
destination as it was and no temporary file; one that fails for a full disk says so in one
line (DiskFull).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from kokoro_tvm.errors import UserError

# What a write fails with when its filesystem has no room left: no space, or the user's quota.
_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(UserError):
    """A write that found its filesystem full; the message names the filesystem."""


def _mount_point(path: Path) -> Path:
    """The mount point of the filesystem ``path`` (an existing folder) is on."""
    path = path.resolve()
    while not os.path.ismount(path):
        path = path.parent
    return path


def disk_full(dest: Path, err: OSError) -> DiskFull:
    """The one-line error for ``dest``'s write that failed with ``err`` (ENOSPC or EDQUOT)."""
    folder = dest.parent
    free = shutil.disk_usage(folder).free
    what = "is over its quota" if err.errno == errno.EDQUOT else "is full"
    return DiskFull(f"cannot write {dest}: the filesystem at {_mount_point(folder)} {what} "
                    f"({free / 1e6:.1f} MB free): free some space there or write elsewhere")


def umask() -> int:
    """The process's umask (read without changing it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary path beside ``dest``; renames it to ``dest`` if the block succeeds.

    The temporary name keeps ``dest``'s suffix, since some writers (numpy's savez, TVM's
    export_library) choose the format from it.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.stem}.",
                                    suffix=f".tmp{dest.suffix}")
        os.close(fd)
        tmp = Path(name)
        yield tmp
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes 0600; give artifacts the usual mode
        os.replace(tmp, dest)
    except OSError as err:
        if err.errno in _FULL:
            raise disk_full(dest, err) from err
        raise
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_folder(dest: str | os.PathLike) -> Iterator[Path]:
    """Yields a new empty folder beside ``dest``; if the block succeeds, the folder takes
    ``dest``'s place (an existing ``dest`` is moved aside first and removed after), else it is
    removed: an interrupted write leaves the previous folder or none."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp."))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes 0700; give the folder the usual mode
        old = None
        if dest.exists():
            old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old."))
            os.replace(dest, old / dest.name)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old)
    except OSError as err:
        if err.errno in _FULL:
            raise disk_full(dest, err) from err
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def write_text(dest: str | os.PathLike, text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(dest: str | os.PathLike, obj: Any) -> None:
    write_text(dest, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
