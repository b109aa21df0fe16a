"""Building KModel from our asset files, without any hub access."""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from kokoro_tvm.facts import SUBMODULES

# KModel insists on a repo id even when config and weights are local; it is only a label here.
REPO_ID = "hexgrad/Kokoro-82M"


def build_kmodel(config: dict[str, Any], checkpoint: str | os.PathLike | None = None, *,
                 disable_complex: bool = False):
    """KModel from a config dict and a checkpoint path; no checkpoint keeps PyTorch's default init.

    KModel downloads from the hub whenever it is given no checkpoint path, so the no-checkpoint
    case loads an empty checkpoint instead.
    """
    from kokoro import KModel

    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        # Kokoro's own construction warns about weight_norm's deprecation and single-layer LSTM
        # dropout; neither concerns users of this package.
        warnings.simplefilter("ignore", (FutureWarning, UserWarning))
        if checkpoint is None:
            checkpoint = Path(tmp) / "empty.pth"
            torch.save({}, checkpoint)
        return KModel(repo_id=REPO_ID, config=config, model=str(checkpoint),
                      disable_complex=disable_complex).eval()


def checkpoint_of(kmodel) -> dict[str, dict[str, torch.Tensor]]:
    """KModel's checkpoint layout: one state dict per submodule."""
    return {name: getattr(kmodel, name).state_dict() for name in SUBMODULES}


def load_kmodel(config_json: str | os.PathLike, checkpoint: str | os.PathLike, *,
                disable_complex: bool = False):
    """KModel from the asset files ``results/assets/config.json`` and ``kokoro-82m.pth``."""
    config = json.loads(Path(config_json).read_text(encoding="utf-8"))
    return build_kmodel(config, checkpoint, disable_complex=disable_complex)


def kmodel_from_params(config_json: str | os.PathLike, params: list[str | os.PathLike], *,
                       disable_complex: bool = False):
    """KModel from a model config and the components' params files (results/params/*.npz, or
    a model folder's params/), whose keys together are KModel's whole state dict."""
    import numpy as np

    config = json.loads(Path(config_json).read_text(encoding="utf-8"))
    kmodel = build_kmodel(config, disable_complex=disable_complex)
    states: dict[str, dict[str, torch.Tensor]] = {}
    for path in params:
        with np.load(path) as arrays:
            for key in arrays.files:
                submodule, _, name = key.partition(".")
                states.setdefault(submodule, {})[name] = torch.from_numpy(arrays[key])
    if set(states) != set(SUBMODULES):
        raise ValueError(f"the params files {list(map(str, params))} hold {sorted(states)}, "
                         f"not KModel's {list(SUBMODULES)}")
    for submodule, state in states.items():
        getattr(kmodel, submodule).load_state_dict(state, strict=True)
    return kmodel


def model_device(kmodel) -> torch.device:
    """Where a KModel's weights are (the reference runs there: the CPU, or a GPU)."""
    return next(kmodel.parameters()).device


def on_device(values: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {name: value.to(device) for name, value in values.items()}
