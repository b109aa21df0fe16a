from __future__ import annotations

import numpy as np

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import kmodel, save_programs


def export(checkpoint: PathLike, model_config: PathLike, component: str, bucket: int,
           out: PathLike, out_reference: PathLike, seed: int = 0) -> None:
    """One component traced by torch.export at one static bucket
    (results/export/{component}/b{bucket}.pt2, one program per function), and what PyTorch
    computes on the bucket's example inputs (.reference.npz), which every target's and LSTM
    method's validation reads."""
    from kokoro_tvm.model.components import (
        TORCH_COMPONENTS,
        export_component,
        reference_values,
        run_reference,
    )

    model = kmodel(checkpoint, model_config)
    inputs = TORCH_COMPONENTS[component].example_inputs(model, bucket, seed)
    env = run_reference(model, component, inputs)
    values = reference_values(model, component, env)
    with atomic_path(out_reference) as tmp, open(tmp, "wb") as f:
        np.savez(f, **values)
    save_programs(export_component(model, component, bucket, seed, env=env), out)
