"""What several stages share: the model, the .pt2 archive format, import figures."""
from __future__ import annotations

import sys
from pathlib import Path

from kokoro_tvm.atomic import atomic_path

PathLike = str | Path
# Figures the import stage keeps as module attributes ("kokoro_tvm.<name>") for the build
# stage's metadata; the build strips them so that libraries stay bit-identical across rebuilds.
IMPORT_FIGURES = ("ir_lines", "import_seconds")


def kmodel(checkpoint: PathLike, model_config: PathLike):
    """KModel with CustomSTFT (TorchSTFT's complex ops have no TVM converters)."""
    from kokoro_tvm.model.kmodel import load_kmodel

    return load_kmodel(model_config, checkpoint, disable_complex=True)


def save_programs(programs: dict, dest: PathLike) -> None:
    """All functions of a component in one .pt2 archive (one ExportedProgram per function)."""
    from torch.export.pt2_archive._package import package_pt2

    with atomic_path(dest) as tmp:
        package_pt2(str(tmp), exported_programs=programs)


def load_programs(path: PathLike) -> dict:
    from torch.export.pt2_archive._package import load_pt2

    return dict(load_pt2(str(path)).exported_programs)


def without_torch() -> None:
    """Keeps PyTorch out of this process (``import torch`` fails): tvm_ffi imports it whenever
    it is installed, about 3 s of each job's start, and the stages after import need none of it.
    For a stage's own process only (its workflow script): nothing in it may import torch later."""
    sys.modules.setdefault("torch", None)
