from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_tvm import paths
from kokoro_tvm.paths import PathLike

# The bundle's layout, relative to its folder (measure/mac_check.py reads it).
CASES = "cases.json"
CHECK_SCRIPT = "check.py"
WHEELS = "wheels"
REFERENCE = "references/{component}_b{bucket}.npz"
LIBRARY = "libs/{target}/" + paths.MODEL_LIBRARY.removeprefix("lib/")
PLAN = "libs/{target}/" + paths.MODEL_PLAN.removeprefix("lib/")
# Spoken end to end on the Mac, each at the speed that makes it fill E2E_SHARE of the bundle's
# frame bucket (the weights are synthetic: their durations say nothing of the text).
SENTENCES = ("Hello there, how are you today?",
             "The quick brown fox jumps over the lazy dog.",
             "Compiling a speech model ahead of time lets it run where a framework is too heavy.")
E2E_SHARE = 0.8
MAX_BYTES = 64 * 2**20
_CHECK_PY = '''#!/usr/bin/env python3
"""The Mac check: see README.txt beside this file."""
from kokoro_tvm.measure.mac_check import main

main()
'''


def _readme(targets: list[str]) -> str:
    return f"""kokoro-tvm's Mac check: the {', '.join(targets)} libraries against PyTorch's outputs.

On a Mac with Apple silicon (macOS 11 or later), with Python 3.10 to 3.12, in this folder:

    python3 -m venv venv && . venv/bin/activate
    pip install "$(echo wheels/kokoro_tvm-*.whl)[webgpu]"  # the runtime: TVM, wgpu, no PyTorch
    pip install torch kokoro                     # optional: PyTorch MPS and CPU beside TVM
    python check.py --out mac_check.json

It validates every library with the project's metrics and tolerances, times its first call
(the Metal shaders are compiled then) and its median call, speaks three sentences end to end,
and writes mac_check.json, the report to send back.
"""


def mac_check_bundle(libraries: list[PathLike], metas: list[PathLike], params: list[PathLike],
                     model_config: PathLike, voice: PathLike, source: PathLike, out: PathLike,
                     seed: int = 0) -> int:
    """The Mac check's bundle (results/mac_check): the given libraries (each with its build
    metadata), each component's weight spec (the Mac makes the same synthetic weights with
    numpy: measure/synthetic.py), every library's example inputs and what PyTorch computes on
    them with those weights (the reference stage's values), the token ids of SENTENCES, the
    model config and a voice, this package's wheel (built from ``source``) and check.py
    (measure/mac_check.py). Written beside ``out`` and renamed into place; refused over 64 MiB.
    Returns its size in bytes."""
    import torch

    from kokoro_tvm.measure import synthetic
    from kokoro_tvm.model.components import TORCH_COMPONENTS, reference_values, run_reference
    from kokoro_tvm.runtime import g2p
    from kokoro_tvm.stages.wheel import own_wheel

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp."))
    try:
        config = json.loads(Path(model_config).read_text())
        specs = {Path(p).stem: synthetic.weight_spec(p) for p in params}
        kmodel, _ = synthetic.synthetic_kmodel(config, specs, seed)
        cases: list[dict[str, Any]] = []
        references = {}
        for library, meta_path in zip(libraries, metas, strict=True):
            meta = json.loads(Path(meta_path).read_text())
            dims = {key: meta[key] for key in ("target", "component", "lstm", "bucket")}
            placed = (PLAN if meta["device"] == "webgpu" else LIBRARY).format(**dims)
            (staging / placed).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(library, staging / placed)
            reference = REFERENCE.format(**dims)
            if reference not in references:
                inputs = TORCH_COMPONENTS[dims["component"]].example_inputs(
                    kmodel, dims["bucket"], seed)
                with torch.no_grad():
                    references[reference] = reference_values(
                        kmodel, dims["component"],
                        run_reference(kmodel, dims["component"], inputs))
                (staging / reference).parent.mkdir(exist_ok=True)
                np.savez_compressed(staging / reference, **references[reference])
            cases.append({**dims, "library": placed, "reference": reference,
                          "device": meta["device"], "host_architecture": meta["host_architecture"],
                          "system": meta["system"], "cpu": meta["cpu"],
                          "transforms": {name: function["transform"]
                                         for name, function in meta["functions"].items()}})
        phonemize = g2p.phonemizer("en-us")
        sentences = [{"text": text, "ids": g2p.token_ids(phonemize(text), config["vocab"])}
                     for text in SENTENCES]
        document = {"seed": seed, "cases": cases, "weights": specs, "sentences": sentences,
                    "e2e_share": E2E_SHARE, "voice": Path(voice).stem,
                    "versions": _versions()}
        (staging / CASES).write_text(json.dumps(document, indent=1))
        shutil.copyfile(model_config, staging / paths.MODEL_CONFIG)
        (staging / paths.MODEL_VOICE_DIR).mkdir()
        shutil.copyfile(voice, staging / paths.MODEL_VOICE.format(voice=Path(voice).stem))
        (staging / CHECK_SCRIPT).write_text(_CHECK_PY)
        targets = sorted({case["target"] for case in cases})
        (staging / "README.txt").write_text(_readme(targets))
        with tempfile.TemporaryDirectory() as work:
            own_wheel(Path(source), staging / WHEELS, Path(work))
        size = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
        if size > MAX_BYTES:
            raise ValueError(f"the Mac check's bundle is {size / 2**20:.1f} MiB, over 64 MiB: "
                             "bundle smaller buckets (config.yaml, mac_check.buckets)")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return size


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("apache-tvm", "apache-tvm-ffi", "torch", "kokoro")}
