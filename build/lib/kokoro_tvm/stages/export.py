"""Export: one component traced by torch.export at one static bucket."""
from __future__ import annotations

from kokoro_tvm.stages.common import PathLike, kmodel, save_programs


def export(checkpoint: PathLike, model_config: PathLike, component: str, bucket: int,
           out: PathLike, seed: int = 0) -> None:
    """results/export/{component}/b{bucket}.pt2: the component traced at one static bucket."""
    from kokoro_tvm.model.components import export_component

    save_programs(export_component(kmodel(checkpoint, model_config), component, bucket, seed), out)
