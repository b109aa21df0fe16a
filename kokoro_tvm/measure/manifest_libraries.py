"""The libraries a benchmark times: entries of a target's build manifest, with their files."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

from kokoro_tvm import paths
from kokoro_tvm.paths import PathLike


def with_files(manifest: PathLike, entries: Iterable[dict[str, Any]], params: list[PathLike]
               ) -> Iterator[tuple[dict[str, Any], Path, Path]]:
    """(entry, library file, params file) for ``entries`` of ``manifest``, sorted by component,
    method and bucket; ``params`` are the components' params files (results/params/*.npz)."""
    params_of = {Path(p).stem: Path(p) for p in params}
    root = paths.work_folder(manifest)
    for entry in sorted(entries, key=lambda e: (e["component"], e["lstm"], e["bucket"])):
        if entry["component"] not in params_of:
            raise ValueError(f"no params file given for {entry['component']}")
        library = root / entry["library"]  # an absolute path stays as it is
        yield entry, library, params_of[entry["component"]]
