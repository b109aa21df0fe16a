"""The source files a GPU check bundle was prepared from, by sha256.

prepare.py records them in cases.json; check.py compares them with the tree it runs in before
any GPU work, so that a bundle whose libraries, kernels and probes another version of the code
built is not checked, and its figures taken for this code's.
"""
from __future__ import annotations

from pathlib import Path

from kokoro_tvm.atomic import sha256_file

# What a bundle's contents depend on besides the installed TVM (recorded apart, "versions"):
# the package that builds and runs the libraries, and the check's own modules and build config.
PATTERNS = ("kokoro_tvm/**/*.py", "tools/gpu_check/*.py", "tools/gpu_check/*.yaml")


def digests(repo: Path) -> dict[str, str]:
    """Path relative to ``repo`` -> sha256, for every file PATTERNS match."""
    return {path.relative_to(repo).as_posix(): sha256_file(path)
            for pattern in PATTERNS for path in sorted(repo.glob(pattern))}


def changed(recorded: dict[str, str], repo: Path) -> list[str]:
    """The files added, removed or edited in ``repo`` since ``recorded`` was taken."""
    now = digests(repo)
    return sorted(name for name in recorded.keys() | now.keys()
                  if recorded.get(name) != now.get(name))
