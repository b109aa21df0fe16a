"""Static fidelity: a built library against the PyTorch wrapper it came from; and, for every
component (each has a length mask), length-exact fidelity: the library's valid outputs against
unpatched Kokoro run on the same utterance without padding.
What the bars are and why: docs/fidelity.md.

Both run on the same padded example inputs (the reference stage's, at one seed). Every
function output gets a tight check, max abs error relative to the output's scale, each function
fed the reference values of its inputs. Components with several functions (the decoder:
``source`` then ``body``) also run chained, library to library, and their ``spectral_outputs``
(the waveform) are judged by log-mel L1 and by an SNR bar relative to probes: PyTorch against
itself with one input changed by rounding-sized amounts (``Component.spectral_probe``). The
decoder's ``source`` output, ill-conditioned in float32, has no tight bar: it is judged against
its float64 truth, relative to PyTorch float32's own error (``float64_output``).

Everything PyTorch computes for these checks comes in as arrays (``reference_values``, saved by
the reference stage once per component and bucket): validation runs the library and numpy only.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Mapping

import numpy as np

from kokoro_tvm.abi import NOISE_FUNCTION, NOISE_INPUTS, NOISE_KEY, noise_key
from kokoro_tvm.components import COMPONENTS, Component, crop, valid_length
from kokoro_tvm.errors import UserError
from kokoro_tvm.measure.metrics import (
    INT8_SNR_DB_CAP,
    SPECTRAL_TOLERANCES,
    TIGHT_RELATIVE,
    metric,
    source_metrics,
    spectral_metrics,
    tight_metrics,
)
from kokoro_tvm.runtime.devices import device as tvm_device
from kokoro_tvm.runtime.devices import library_types


class ValidationFailed(UserError):
    """A library whose outputs differ from PyTorch's beyond tolerance; names the library."""


# --------------------------------------------------------------------------------------------
# Running a library.
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _library(so_path: str, mtime: float, params_npz: str, device: str = "cpu"):
    """A loaded library; cached per file version (mtime) since loading is not free."""
    library_type, weights_type = library_types(device)
    return library_type(so_path, weights_type(params_npz, tvm_device(device)))


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

def _quantized(fn, precision: str) -> bool:
    return precision == "int8" and fn.quantizable


def _snr_cap(component: Component, precision: str) -> float:
    if any(_quantized(fn, precision) for fn in component.functions):
        return INT8_SNR_DB_CAP
    return SPECTRAL_TOLERANCES["snr_db_cap"]


def _per_function(component: Component, so_path, params_npz, ref: dict[str, np.ndarray],
                  device: str = "cpu", precision: str = "float32"
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, np.ndarray]]:
    """Each function on the reference values of its inputs: the tight check's metrics, and
    every function's outputs."""
    metrics, outputs = {}, {}
    for fn in component.functions:
        outs = run_library(so_path, params_npz, fn.name, {i: ref[i] for i in fn.inputs}, device)
        outputs.update(zip(fn.outputs, outs))
        tight = fn.tight and not _quantized(fn, precision)
        tolerance = TIGHT_RELATIVE if tight else None  # else judged through the chain
        for out_name, out in zip(fn.outputs, outs):
            for key, entry in tight_metrics(out, ref[out_name], tolerance).items():
                metrics[f"{fn.name}.{out_name}.{key}"] = entry
    return metrics, outputs


def _run_chained(component: Component, so_path, params_npz, inputs: dict[str, np.ndarray],
                 separate: dict[str, np.ndarray], device: str = "cpu") -> dict[str, np.ndarray]:
    """The inputs and every function's outputs, the functions run library to library. A
    function fed by the component's inputs alone computes what it did in the per-function run
    (``separate``): its outputs are taken from there instead of run again."""
    env = dict(inputs)
    for fn in component.functions:
        if all(i in inputs for i in fn.inputs):
            env.update({o: separate[o] for o in fn.outputs})
        else:
            env.update(zip(fn.outputs, run_library(so_path, params_npz, fn.name,
                                                   {i: env[i] for i in fn.inputs}, device)))
    return env


def _chained(component: Component, env: dict[str, np.ndarray],
             reference: Mapping[str, np.ndarray], snr_cap: float) -> dict[str, dict[str, Any]]:
    """Spectral metrics on the valid part of the chained run's final waveform ``env``, against
    the padded PyTorch run's (the probes are taken at exact length: ``reference_values``)."""
    length = valid_length(component.name, env)
    metrics = {}
    for name in component.spectral_outputs:
        out = crop(component.name, {name: env[name]}, length)[name]
        ref = crop(component.name, {name: reference[f"output.{name}"]}, length)[name]
        found = spectral_metrics(out, ref, reference[f"probe.{name}"], snr_cap)
        metrics.update({f"chained.{name}.{key}": entry for key, entry in found.items()})
    return metrics


def _float64(component: Component, env: dict[str, np.ndarray],
             reference: Mapping[str, np.ndarray], bucket: int) -> dict[str, dict[str, Any]]:
    """The ``float64_output`` of the chained run against its float64 truth, beside
    PyTorch float32's (docs/fidelity.md)."""
    name = component.float64_output
    truth = reference[f"float64.{name}"]
    function = next(fn.name for fn in component.functions if name in fn.outputs)
    found = source_metrics(env[name], reference[f"output.{name}"], truth,
                           (truth.shape[-1] - 1) // bucket)
    return {f"{function}.{name}.{key}": entry for key, entry in found.items()}


def _length_exact(component: Component, env: dict[str, np.ndarray],
                  reference: Mapping[str, np.ndarray], snr_cap: float
                  ) -> dict[str, dict[str, Any]]:
    """The library's valid outputs on the padded inputs against unpatched Kokoro run on the
    utterance without padding (docs/fidelity.md); same bars: tight,
    or spectral for ``spectral_outputs`` (the decoder's waveform, its functions chained)."""
    length = valid_length(component.name, env)
    metrics = {"exact_length.length": metric(length)}
    for out_name in component.functions[-1].outputs:
        valid = crop(component.name, {out_name: env[out_name]}, length)[out_name]
        exact = reference[f"exact.{out_name}"]
        if out_name in component.spectral_outputs:
            found = spectral_metrics(valid, exact, reference[f"probe.{out_name}"], snr_cap)
        else:
            found = tight_metrics(valid, exact, TIGHT_RELATIVE)
        metrics.update({f"exact_length.{out_name}.{key}": entry for key, entry in found.items()})
    return metrics


# The seed a library's NOISE_FUNCTION (compile/noise.py) is checked at: one with high bits, so
# that both words of the key count.
NOISE_SEED = (1 << 32) + 12345


def _library_noise(so_path, params_npz, device: str) -> dict[str, dict[str, Any]]:
    """The library's own noise generator against its numpy implementation (measure/philox.py),
    with the tight bar: the same integers, then float32 transcendentals."""
    from kokoro_tvm.measure.philox import device_noise

    phases, noise = run_library(so_path, params_npz, NOISE_FUNCTION,
                                {NOISE_KEY: noise_key(NOISE_SEED)}, device)
    want_phases, want_noise = device_noise(NOISE_SEED, noise.shape[1])
    metrics = {}
    for name, out, ref in (("phases", phases, want_phases), ("samples", noise, want_noise)):
        for key, entry in tight_metrics(out, ref, TIGHT_RELATIVE).items():
            metrics[f"{NOISE_FUNCTION}.{name}.{key}"] = entry
    return metrics


def validate_component(name: str, bucket: int, so_path: str | os.PathLike,
                       params_npz: str | os.PathLike, reference: Mapping[str, np.ndarray],
                       device: str = "cpu", precision: str = "float32") -> dict[str, Any]:
    """Library vs PyTorch on the example inputs, the library run on ``device`` (``cpu`` or
    ``cuda``): metrics, tolerances, ``passed``. ``reference``: what PyTorch computed on them
    (``reference_values``, as the reference stage saves it). ``precision``: the target's; int8
    libraries are judged by the spectral bars where their functions are quantized."""
    component = COMPONENTS[name]
    inputs = {i: reference[f"input.{i}"] for i in component.inputs}
    ref = {**inputs, **{o: reference[f"output.{o}"] for o in component.outputs}}
    metrics, separate = _per_function(component, so_path, params_npz, ref, device, precision)
    env = _run_chained(component, so_path, params_npz, inputs, separate, device)
    snr_cap = _snr_cap(component, precision)
    if len(component.functions) > 1:
        metrics.update(_chained(component, env, reference, snr_cap))
    if component.float64_output is not None:
        metrics.update(_float64(component, env, reference, bucket))
    metrics.update(_length_exact(component, env, reference, snr_cap))
    if any(set(NOISE_INPUTS) <= set(fn.inputs) for fn in component.functions):
        metrics.update(_library_noise(so_path, params_npz, device))
    judged = [m["passed"] for m in metrics.values() if "passed" in m]
    return {"component": name, "bucket": bucket, "metrics": metrics,
            "passed": bool(judged) and all(judged)}


def load_reference(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The reference values the reference stage saved (``reference_values``)."""
    with np.load(path) as npz:
        return {key: npz[key] for key in npz.files}
