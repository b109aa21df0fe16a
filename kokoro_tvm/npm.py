"""Packages from the npm registry, checked against a pinned sha256 of their tarball: the voice
source kokoro-js (assets/voices.py) and eSpeak NG in WebAssembly for the browser's G2P
(stages/web.py)."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from kokoro_tvm.errors import UserError


def npm_pack(package: str, sha256: str, workdir: Path, *, error: type[UserError] = UserError,
             pinned_at: str = "its pinned sha256") -> Path:
    """``npm pack package`` in ``workdir``: its tarball, whose sha256 must be ``sha256`` (else
    ``error``, naming ``pinned_at``, the setting or constant to update)."""
    npm = shutil.which("npm")
    if npm is None:
        raise error(f"{package} comes from npm, but the npm command is not installed: install "
                    "Node.js (Debian: apt-get install npm)")
    done = subprocess.run([npm, "pack", package, "--silent"], cwd=workdir, text=True,
                          capture_output=True)
    if done.returncode != 0:
        raise error(f"npm pack {package} failed: {done.stderr.strip()}")
    tarball = workdir / done.stdout.strip().splitlines()[-1]
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != sha256:
        raise error(f"{package}: tarball sha256 {digest} differs from {pinned_at} {sha256}; if "
                    "you changed the version on purpose, update the checksum")
    return tarball
