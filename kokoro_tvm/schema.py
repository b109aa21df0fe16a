"""config.yaml's JSON schema (kokoro_tvm/schemas/config.schema.yaml), read without the rest of
the configuration's checks (config.py), so that the model side can ask it what a bucket may be
without depending on the build's assets and compiler."""
from __future__ import annotations

import importlib.resources
from typing import Any

import yaml


def schema() -> dict[str, Any]:
    text = (importlib.resources.files("kokoro_tvm") / "schemas" / "config.schema.yaml").read_text()
    return yaml.safe_load(text)


def bucket_range(axis: str) -> tuple[int, int | None]:
    """The smallest and largest bucket the schema allows for ``axis`` (tokens or frames; None:
    no largest)."""
    items = schema()["$defs"][f"{axis[:-1]}_buckets"]["items"]
    return items["minimum"], items.get("maximum")
