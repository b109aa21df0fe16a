from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kokoro_tvm.atomic import write_json
from kokoro_tvm.paths import PathLike


def manifest(metas: list[PathLike], validations: list[PathLike], target: str,
             out: PathLike) -> dict[str, Any]:
    """Every library of a target with its metadata and validation status
    (results/manifest/{target}.json); those whose validation was skipped (no device here) have
    ``validated: false``."""
    entries = []
    for meta_path, validation_path in zip(metas, validations, strict=True):  # same order
        meta = json.loads(Path(meta_path).read_text())
        validation = json.loads(Path(validation_path).read_text())
        entries.append({**meta, "meta": str(meta_path), "validation": str(validation_path),
                        "passed": validation["passed"],
                        "validation_status": validation.get("status", "passed"),
                        "validated": validation["passed"] is True})
    document = {"target": target, "libraries": entries}
    write_json(out, document)
    return document
