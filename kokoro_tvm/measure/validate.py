"""Static fidelity: a built library against the PyTorch wrapper it came from; and, for every
component (each has a length mask), length-exact fidelity: the library's valid outputs against
unpatched Kokoro run on the same utterance without padding.
What the bars are and why: docs/decisions.md, Fidelity.

Both run on the same padded example inputs (``Component.example_inputs`` at one seed). Every
function output gets a tight check, max abs error relative to the output's scale, each function
fed the reference values of its inputs. Components with several functions (the decoder:
``source`` then ``body``) also run chained, library to library, and their ``spectral_outputs``
(the waveform) are judged by log-mel L1 and by an SNR bar relative to a probe: PyTorch against
itself with one input changed by a rounding-sized amount (``Component.spectral_probe``). The
decoder's ``source`` output, ill-conditioned in float32, has no tight bar: it is judged against
its float64 truth, relative to PyTorch float32's own error (``float64_reference``).
"""
from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import torch

from kokoro_tvm.errors import UserError
from kokoro_tvm.measure.metrics import (
    TIGHT_RELATIVE,
    metric,
    source_metrics,
    spectral_metrics,
    tight_metrics,
)
from kokoro_tvm.model.components import (
    COMPONENTS,
    Component,
    crop,
    run_exact_length,
    run_float64,
    run_reference,
    valid_length,
)
from kokoro_tvm.runtime.cuda import device as tvm_device
from kokoro_tvm.runtime.library import Library, Weights


class ValidationFailed(UserError):
    """A library whose outputs differ from PyTorch's beyond tolerance; names the library."""


# --------------------------------------------------------------------------------------------
# Running a library.
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _library(so_path: str, mtime: float, params_npz: str, device: str = "cpu") -> Library:
    """A loaded library; cached per file version (mtime) since loading is not free."""
    return Library(so_path, Weights(params_npz, tvm_device(device)))


def run_library(so_path: str | os.PathLike, params_npz: str | os.PathLike, function: str,
                inputs: dict[str, np.ndarray], device: str = "cpu") -> list[np.ndarray]:
    """Calls ``function`` of the library with ``inputs`` and the weights it names, by name,
    on ``device`` (``cpu`` or ``cuda``)."""
    so_path = os.fspath(so_path)
    return _library(so_path, os.path.getmtime(so_path), os.fspath(params_npz),
                    device)(function, inputs)


# --------------------------------------------------------------------------------------------
# Validation.
# --------------------------------------------------------------------------------------------

def _numpy(values: dict[str, torch.Tensor], names) -> dict[str, np.ndarray]:
    return {n: values[n].detach().cpu().numpy() for n in names}


def _per_function(component: Component, so_path, params_npz, ref: dict[str, torch.Tensor],
                  device: str = "cpu") -> dict[str, dict[str, Any]]:
    """Each function on the reference values of its inputs: the tight check."""
    metrics = {}
    for fn in component.functions:
        outs = run_library(so_path, params_npz, fn.name, _numpy(ref, fn.inputs), device)
        tolerance = TIGHT_RELATIVE if fn.tight else None  # else judged through the chain
        for out_name, out in zip(fn.outputs, outs):
            ref_out = ref[out_name].detach().cpu().numpy()
            for key, entry in tight_metrics(out, ref_out, tolerance).items():
                metrics[f"{fn.name}.{out_name}.{key}"] = entry
    return metrics


def probe_inputs(component: Component, inputs: dict[str, torch.Tensor]
                 ) -> dict[str, torch.Tensor]:
    """``inputs`` with the component's probe input scaled by 1 + its relative change."""
    name, change = component.spectral_probe
    return dict(inputs, **{name: inputs[name] * (1 + change)})


def _run_chained(component: Component, so_path, params_npz, inputs: dict[str, torch.Tensor],
                 device: str = "cpu") -> dict[str, np.ndarray]:
    """The inputs and every function's outputs, the functions run library to library."""
    env = _numpy(inputs, inputs)
    for fn in component.functions:
        env.update(zip(fn.outputs, run_library(so_path, params_npz, fn.name,
                                               {i: env[i] for i in fn.inputs}, device)))
    return env


def _chained(kmodel, component: Component, env: dict[str, np.ndarray],
             inputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]
             ) -> dict[str, dict[str, Any]]:
    """Spectral metrics on the final waveform of the chained run ``env``."""
    probe = run_reference(kmodel, component.name, probe_inputs(component, inputs))
    metrics = {}
    for name in component.spectral_outputs:
        found = spectral_metrics(env[name], ref[name].cpu().numpy(), probe[name].cpu().numpy())
        metrics.update({f"chained.{name}.{key}": entry for key, entry in found.items()})
    return metrics


def _float64(kmodel, component: Component, env: dict[str, np.ndarray],
             inputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], bucket: int
             ) -> dict[str, dict[str, Any]]:
    """The ``float64_reference`` output of the chained run against its float64 truth, beside
    PyTorch float32's (docs/decisions.md, Fidelity)."""
    metrics = {}
    for name, truth in run_float64(kmodel, component.name, inputs).items():
        truth = truth.cpu().numpy()
        function = next(fn.name for fn in component.functions if name in fn.outputs)
        found = source_metrics(env[name], ref[name].cpu().numpy(), truth,
                               (truth.shape[-1] - 1) // bucket)
        metrics.update({f"{function}.{name}.{key}": entry for key, entry in found.items()})
    return metrics


def _length_exact(kmodel, component: Component, env: dict[str, np.ndarray],
                  inputs: dict[str, torch.Tensor]) -> dict[str, dict[str, Any]]:
    """The library's valid outputs on the padded inputs against unpatched Kokoro run on the
    utterance without padding (docs/decisions.md, Fidelity); same bars: tight,
    or spectral for ``spectral_outputs`` (the decoder's waveform, its functions chained)."""
    length = valid_length(component.name, inputs)
    exact = run_exact_length(kmodel, component.name, inputs)
    valid = crop(component.name, {name: env[name] for name in exact}, length)
    metrics = {"exact_length.length": metric(length)}
    probe = (run_exact_length(kmodel, component.name, probe_inputs(component, inputs))
             if component.spectral_outputs else {})
    for out_name, ref_out in exact.items():
        if out_name in component.spectral_outputs:
            found = spectral_metrics(valid[out_name], ref_out.cpu().numpy(),
                                     probe[out_name].cpu().numpy())
        else:
            found = tight_metrics(valid[out_name], ref_out.cpu().numpy(), TIGHT_RELATIVE)
        metrics.update({f"exact_length.{out_name}.{key}": entry for key, entry in found.items()})
    return metrics


def validate_component(kmodel, name: str, bucket: int, so_path: str | os.PathLike,
                       params_npz: str | os.PathLike, seed: int = 0, device: str = "cpu"
                       ) -> dict[str, Any]:
    """Library vs PyTorch on the example inputs at ``seed``, the library run on ``device``
    (``cpu`` or ``cuda``): metrics, tolerances, ``passed``."""
    component = COMPONENTS[name]
    inputs = component.example_inputs(kmodel, bucket, seed)
    ref = run_reference(kmodel, name, inputs)
    metrics = _per_function(component, so_path, params_npz, ref, device)
    chained = len(component.functions) > 1
    if chained or component.kokoro is not None:  # one chained run serves both checks
        env = _run_chained(component, so_path, params_npz, inputs, device)
    if chained:
        metrics.update(_chained(kmodel, component, env, inputs, ref))
    if component.float64_reference is not None:
        metrics.update(_float64(kmodel, component, env, inputs, ref, bucket))
    if component.kokoro is not None:
        metrics.update(_length_exact(kmodel, component, env, inputs))
    judged = [m["passed"] for m in metrics.values() if "passed" in m]
    return {"component": name, "bucket": bucket, "seed": seed, "metrics": metrics,
            "passed": bool(judged) and all(judged)}
