"""Params: a component's weights, once for all its buckets and LSTM methods."""
from __future__ import annotations

import numpy as np

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import kmodel


def write_params(checkpoint: PathLike, model_config: PathLike, component: str,
                 out: PathLike) -> None:
    """results/params/{component}.npz: the component's weights under their Relax input names."""
    from kokoro_tvm.model.components import component_params

    arrays = component_params(kmodel(checkpoint, model_config), component)
    with atomic_path(out) as tmp:
        np.savez(tmp, **arrays)
