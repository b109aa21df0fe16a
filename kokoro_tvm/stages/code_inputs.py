"""The package modules a stage's workflow script runs, which its rule lists as inputs: Snakemake
does not see imported code change (docs/architecture.md, Staleness). Read from the sources'
import statements, without importing them: the workflow asks for every job when it parses."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

# Modules whose code matters only to components with LSTMs: a component without LSTMs does not
# depend on them even where its stage's code imports them.
LSTM_ONLY = ("kokoro_tvm.compile.lstm", "kokoro_tvm.compile.gpu.lstm",
             "kokoro_tvm.model.packed_lstm")
# Modules the lower and build stages run for GPU targets only, the GPU lowering: every module
# of compile/gpu/ but the package's own, and WebGPU's lowering and plans (compile/webgpu/; its
# limits, which make_target reads, excepted). A CPU target's libraries do not depend on them.
GPU_ONLY = tuple(sorted(f"kokoro_tvm.compile.{package}.{module.stem}"
                        for package in ("gpu", "webgpu")
                        for module in (Path(__file__).parents[1] / "compile" / package).glob("*.py")
                        if module.name not in ("__init__.py", "limits.py")))


def module_file(root: Path, name: str) -> Path | None:
    """kokoro_tvm.a.b -> its file under ``root`` (a module or a package's __init__.py), or
    None."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache  # per parse: every closure walks the same modules
def imported_files(root: Path, path: Path) -> frozenset[Path]:
    """Files of the package modules ``path`` imports anywhere in it (function-level imports
    too), with the packages on the way, which run too."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    found = set()
    for name in names:
        parts = name.split(".")
        if parts[0] == "kokoro_tvm":
            found.update(file for i in range(1, len(parts) + 1)
                         if (file := module_file(root, ".".join(parts[:i]))) is not None)
    return frozenset(found)


@functools.cache  # per parse: rules ask once per job
def code_files(root: Path, script: Path, lstm: bool = True, gpu: bool = True) -> tuple[str, ...]:
    """Every package module under ``root`` that ``script`` imports, directly or not, sorted.
    Without ``lstm`` the LSTM_ONLY modules, and without ``gpu`` the GPU_ONLY ones, are left out
    with what only they import."""
    skipped = {module_file(root, name)
               for name in (() if lstm else LSTM_ONLY) + (() if gpu else GPU_ONLY)}
    seen, todo = set(), [script]
    while todo:
        path = todo.pop()
        for found_file in imported_files(root, path) - seen - skipped:
            seen.add(found_file)
            todo.append(found_file)
    return tuple(sorted(str(found_file) for found_file in seen))
