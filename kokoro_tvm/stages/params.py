from __future__ import annotations

import numpy as np

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.common import kmodel


def write_params(checkpoint: PathLike, model_config: PathLike, component: str,
                 out: PathLike) -> None:
    """A component's weights under their Relax input names (results/params/{component}.npz),
    once for all its buckets and LSTM methods."""
    from kokoro_tvm.model.components import component_params

    arrays = component_params(kmodel(checkpoint, model_config), component)
    with atomic_path(out) as tmp:
        np.savez(tmp, **arrays)
