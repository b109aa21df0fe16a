"""The five compiled components in PyTorch (what each is: ``kokoro_tvm/components.py``), and
their export.

Each component adds, to its torch-free description, which KModel modules it runs (a wrapper
nn.Module whose method ``forward`` is the function ``main`` and whose other methods are named
after their functions), which patches of Kokoro it needs to export and import, how to make
realistic inputs at a bucket, and Kokoro's own code for it. One mechanism
(``export_component``) exports all of them, once each with the length symbolic; the reference
stage runs the same wrappers per bucket as the PyTorch reference that validation reads
(``reference_values``).
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from kokoro_tvm import components
from kokoro_tvm.components import Function, crop, probe_inputs, valid_length
from kokoro_tvm.model.inputs import (
    bert_inputs,
    decoder_inputs,
    duration_inputs,
    f0n_inputs,
    text_encoder_inputs,
)
from kokoro_tvm.model.kmodel import model_device, on_device
from kokoro_tvm.model.patches import patched
from kokoro_tvm.model.unpadded import (
    kokoro_bert,
    kokoro_decoder,
    kokoro_duration,
    kokoro_f0n,
    kokoro_text_encoder,
)
from kokoro_tvm.model.wrappers import (
    BertWrapper,
    DecoderWrapper,
    DurationWrapper,
    F0NWrapper,
    TextEncoderWrapper,
    source_float64,
)
from kokoro_tvm.schema import bucket_range


@dataclass(frozen=True, kw_only=True)
class TorchComponent(components.Component):
    """A component's description with how it runs in PyTorch."""

    wrapper: Callable[[Any], nn.Module]
    example_inputs: Callable[[Any, int, int], dict[str, torch.Tensor]]  # (kmodel, bucket, seed)
    # Kokoro's own code for the component, unpatched, run on unpadded inputs (the reference):
    # takes the component's ``inputs`` by name, returns the last function's outputs.
    kokoro: Callable[..., tuple[torch.Tensor, ...]]
    patches: tuple[str, ...] = ()
    # What computes ``float64_output`` in float64 from its function's inputs.
    float64: Callable[..., torch.Tensor] | None = None

    @classmethod
    def of(cls, name: str, **torch_side) -> "TorchComponent":
        """The torch-free description of ``name`` with ``torch_side`` added."""
        described = components.COMPONENTS[name]
        return cls(**{f.name: getattr(described, f.name)
                      for f in dataclasses.fields(described)}, **torch_side)

    def unpadded_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """``mask`` as it reads when every position is valid."""
        return torch.ones_like(mask) if self.mask_marks_valid else torch.zeros_like(mask)


def method(fn: Function) -> str:
    """The wrapper method that computes ``fn``."""
    return "forward" if fn.name == "main" else fn.name


TORCH_COMPONENTS: dict[str, TorchComponent] = {c.name: c for c in (
    TorchComponent.of("bert", wrapper=BertWrapper, example_inputs=bert_inputs,
                      kokoro=kokoro_bert),
    TorchComponent.of("duration", wrapper=DurationWrapper, example_inputs=duration_inputs,
                      kokoro=kokoro_duration, patches=("packed_lstm",)),
    TorchComponent.of("text_encoder", wrapper=TextEncoderWrapper,
                      example_inputs=text_encoder_inputs, kokoro=kokoro_text_encoder,
                      patches=("packed_lstm",)),
    TorchComponent.of("f0n", wrapper=F0NWrapper, example_inputs=f0n_inputs, kokoro=kokoro_f0n,
                      patches=("nearest_upsample",)),
    TorchComponent.of("decoder", wrapper=DecoderWrapper, example_inputs=decoder_inputs,
                      kokoro=kokoro_decoder,
                      patches=("nearest_upsample", "sinegen_noise_inputs", "stft_phase_where"),
                      float64=source_float64),
)}
assert tuple(TORCH_COMPONENTS) == tuple(components.COMPONENTS)


# --------------------------------------------------------------------------------------------
# Running and exporting.
# --------------------------------------------------------------------------------------------


class _Bound(nn.Module):
    """A wrapper's method as a module's forward, which is what torch.export exports."""

    def __init__(self, wrapper: nn.Module, method_name: str):
        super().__init__()
        for child_name, child in wrapper.named_children():  # parameter names stay KModel's
            self.add_module(child_name, child)
        # The wrapper's bound method, so torch.export names the inputs after its arguments.
        self.forward = getattr(wrapper, method_name)


def _as_tuple(out) -> tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def run_reference(kmodel, name: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """All functions of a component in PyTorch, chained, on the model's device: example inputs
    plus every output."""
    env = on_device(inputs, model_device(kmodel))
    for fn in TORCH_COMPONENTS[name].functions:
        env.update(run_function(kmodel, name, fn, env))
    return env


def run_function(kmodel, name: str, fn: Function, values: dict[str, torch.Tensor]
                 ) -> dict[str, torch.Tensor]:
    """One function of a component in PyTorch, on the model's device, on ``values`` (its inputs
    among others): its outputs by name."""
    component = TORCH_COMPONENTS[name]
    wrapper = component.wrapper(kmodel).eval()
    args = on_device({i: values[i] for i in fn.inputs}, model_device(kmodel))
    with patched(component.patches), torch.no_grad():
        return dict(zip(fn.outputs, _as_tuple(getattr(wrapper, method(fn))(
            *(args[i] for i in fn.inputs)))))


def run_exact_length(kmodel, name: str, inputs: dict[str, torch.Tensor]
                     ) -> dict[str, torch.Tensor]:
    """Unpatched Kokoro on the utterance without its padding: the outputs at exactly its length,
    which the valid part of a bucketed run must equal."""
    component = TORCH_COMPONENTS[name]
    cropped = crop(name, inputs, valid_length(name, inputs))
    cropped[component.mask_input] = component.unpadded_mask(cropped[component.mask_input])
    cropped = on_device(cropped, model_device(kmodel))
    with torch.no_grad():
        outs = component.kokoro(kmodel, **{i: cropped[i] for i in component.inputs})
    return dict(zip(component.functions[-1].outputs, _as_tuple(outs)))


def run_float64(kmodel, name: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The component's ``float64_output`` computed in float64 (empty without one)."""
    component = TORCH_COMPONENTS[name]
    if component.float64_output is None:
        return {}
    output = component.float64_output
    function = next(fn for fn in component.functions if output in fn.outputs)
    env = on_device(inputs, model_device(kmodel))
    with patched(component.patches), torch.no_grad():
        return {output: component.float64(kmodel, *(env[i] for i in function.inputs))}


def reference_values(kmodel, name: str, env: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Everything validation compares a library with, from ``env`` (``run_reference`` on the
    example inputs): computed once per (component, bucket), by the reference stage, for every
    target and LSTM method (docs/fidelity.md). Keys, by prefix:

    - ``input.``/``output.``: the example inputs and every function's PyTorch output;
    - ``float64.``: the ``float64_output``'s float64 truth;
    - ``exact.``: unpatched Kokoro on the utterance without its padding;
    - ``probe.``: the same with the probe input nudged by each of the component's changes,
      stacked on a leading axis (spectral outputs only): PyTorch's own reaction to
      rounding-sized changes, taken at exact length alone since the padded wrapper's valid
      samples equal Kokoro's there (a full decoder pass saved per probe)."""
    component = TORCH_COMPONENTS[name]
    inputs = {i: env[i] for i in component.inputs}
    values = {**{f"input.{i}": env[i] for i in component.inputs},
              **{f"output.{o}": env[o] for o in component.outputs},
              **{f"float64.{o}": v for o, v in run_float64(kmodel, name, inputs).items()}}
    values.update({f"exact.{o}": v for o, v in run_exact_length(kmodel, name, inputs).items()})
    if component.spectral_outputs:
        probes = [run_exact_length(kmodel, name, nudged)
                  for nudged in probe_inputs(name, inputs)]
        values.update({f"probe.{o}": torch.stack([probe[o] for probe in probes])
                       for o in component.spectral_outputs})
    return {key: value.detach().cpu().numpy() for key, value in values.items()}


# The bucket each axis is traced at: any the schema allows would do, the program being the same.
TRACE_BUCKET = {"tokens": 64, "frames": 96}


def _length_dims(name: str, fn: Function, values: dict[str, torch.Tensor], bucket: int,
                 length: torch.export.Dim) -> tuple[dict[int, Any] | None, ...]:
    """torch.export's ``dynamic_shapes`` for ``fn``'s inputs: each length axis as a multiple of
    ``length`` (plus its extra positions), read against the traced shapes at ``bucket``."""
    component = TORCH_COMPONENTS[name]
    dims = []
    for arg in fn.inputs:
        if arg in component.length_axes:
            axis, per_valid = component.length_axes[arg]
            extra = 0
        elif arg in component.offset_axes:
            axis, extra = component.offset_axes[arg]
            per_valid, rest = divmod(values[arg].shape[axis] - extra, bucket)
            if rest:
                raise ValueError(f"{name}: {arg} has {values[arg].shape[axis]} positions at "
                                 f"{bucket}, not a multiple plus {extra}")
        else:
            dims.append(None)
            continue
        dims.append({axis: (length if per_valid == 1 else per_valid * length) + extra})
    return tuple(dims)


def export_component(kmodel, name: str) -> dict[str, torch.export.ExportedProgram]:
    """Function name -> ExportedProgram with the length symbolic (one ``Dim`` over every bucket
    the schema allows), which the lower stage binds to each bucket; decomposed into the ATen
    ops TVM's importer converts (our custom ops stay whole). Decomposed here, in the process
    that traced it: torch retracing a loaded symbolic program fails on its derived lengths.

    Traced at ``TRACE_BUCKET`` on example inputs; later functions on the outputs of earlier
    ones (the decoder body on the harmonic source), so every function sees realistic values.
    """
    component = TORCH_COMPONENTS[name]
    wrapper = component.wrapper(kmodel).eval()
    bucket = TRACE_BUCKET[component.axis]
    env = run_reference(kmodel, name, component.example_inputs(kmodel, bucket, 0))
    smallest, largest = bucket_range(component.axis)
    if component.axis == "tokens":  # BERT's position table bounds every token-side library
        largest = min(largest, kmodel.bert.config.max_position_embeddings)
    length = torch.export.Dim("length", min=smallest, max=largest)
    programs = {}
    with patched(component.patches), torch.no_grad(), warnings.catch_warnings():
        # weight_norm's pre-hook and LSTM.flatten_parameters assign tensor attributes while
        # tracing; the traced values derive from the registered parameters, so this is benign.
        warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned")
        for fn in component.functions:
            args = tuple(env[i] for i in fn.inputs)
            programs[fn.name] = torch.export.export(
                _Bound(wrapper, method(fn)), args, strict=False,
                dynamic_shapes=_length_dims(name, fn, env, bucket, length)).run_decompositions()
    return programs


def component_params(kmodel, name: str) -> dict[str, Any]:
    """The component's weights under KModel's state-dict keys: the names its libraries' weight
    inputs carry (the importer names them so), the same for every bucket and LSTM method."""
    wrapper = TORCH_COMPONENTS[name].wrapper(kmodel)
    return {key: value.detach().cpu().numpy() for key, value in wrapper.named_parameters()}
