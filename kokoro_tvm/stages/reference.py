from __future__ import annotations

import numpy as np

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import kmodel


def reference(checkpoint: PathLike, model_config: PathLike, component: str, bucket: int,
              out: PathLike, seed: int = 0) -> None:
    """What PyTorch computes on one bucket's example inputs
    (results/reference/{component}/b{bucket}.npz): the padded wrapper, unpatched Kokoro at the
    utterance's exact length, the probes and the float64 truth (docs/fidelity.md), which every
    target's and LSTM method's validation of that bucket reads."""
    from kokoro_tvm.model.components import TORCH_COMPONENTS, reference_values, run_reference

    model = kmodel(checkpoint, model_config)
    inputs = TORCH_COMPONENTS[component].example_inputs(model, bucket, seed)
    values = reference_values(model, component, run_reference(model, component, inputs))
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        np.savez(f, **values)
