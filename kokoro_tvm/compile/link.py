"""Linking a library's objects for another machine (compile/devices.cross_linker's command).

For macOS, zig links an arm64 Mach-O dylib on Linux: symbols of the TVM runtime stay undefined
until the library is loaded into a process that has them (as TVM's own macOS builds do), its
install name and its signature's identifier are the library's file name (no path or temporary
name of the building machine, so that builds are reproducible), and it is signed ad hoc,
without which macOS kills a process that loads it.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Sequence

MACOS_FLAGS = ("-undefined", "dynamic_lookup")


def linker(command: Sequence[str], macos_name: str | None = None) -> Callable[..., None]:
    """An ``export_library`` fcompile that links with ``command`` (a compiler driver); for
    macOS (``macos_name``: the library's file name), a dylib with that install name."""
    flags = ["-shared", "-fPIC"]
    if macos_name is not None:
        flags += [*MACOS_FLAGS, f"-Wl,-install_name,@rpath/{macos_name}"]

    def link(output: str, objects: list[str], options: list[str] | None = None) -> None:
        with tempfile.TemporaryDirectory() as work:
            # Linked under its own name: a Mach-O signature's identifier is the file's name,
            # which must not be the temporary one the build writes to.
            linked = Path(work) / (macos_name or Path(output).name)
            done = subprocess.run([*command, *flags, "-o", str(linked), *objects,
                                   *(options or [])], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"linking {output} with {' '.join(command)} failed:\n"
                                   f"{done.stderr[-4000:]}")
            shutil.move(linked, output)

    link.output_format = "so"
    return link
