"""This package's own wheel, built from a source tree: what the server's image and the Mac
check's bundle install (stages/image.py, stages/mac_check.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from kokoro_tvm.errors import UserError

# The package's sources a wheel is built from (pyproject.toml names README.md as its readme).
SOURCES = ("pyproject.toml", "README.md", "kokoro_tvm")


def own_wheel(source: Path, dest: Path, work: Path) -> Path:
    """kokoro-tvm's wheel built from ``source`` into ``dest``; ``work`` (empty) holds a copy of
    the sources, since a build in the checkout would write into it."""
    tree = work / "source"
    tree.mkdir()
    for name in SOURCES:
        if (source / name).is_dir():
            shutil.copytree(source / name, tree / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source / name, tree / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dest),
               str(tree)]
    print("+", " ".join(command), flush=True)
    if subprocess.run(command).returncode != 0:
        raise UserError("building kokoro-tvm's wheel failed (the log above has pip's output)")
    (wheel,) = dest.glob("kokoro_tvm-*.whl")
    return wheel
