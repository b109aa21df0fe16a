from __future__ import annotations

from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import kmodel, save_programs


def export(checkpoint: PathLike, model_config: PathLike, component: str, out: PathLike) -> None:
    """One component traced by torch.export with its length symbolic
    (results/export/{component}.pt2, one program per function), for every bucket: the lower
    stage binds the length to each."""
    from kokoro_tvm.model.components import export_component

    save_programs(export_component(kmodel(checkpoint, model_config), component), out)
