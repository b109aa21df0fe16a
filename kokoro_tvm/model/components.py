"""Kokoro split into the five compiled components (docs/architecture.md, Components), and
their export.

Each component is data: which KModel modules it runs (a wrapper nn.Module), which patches of
Kokoro it needs to export and import, how to make realistic inputs at a bucket, and the names of
its outputs. One mechanism (``export_component``) exports all of them; the export stage also runs
the same wrappers as the PyTorch reference that validation reads (``reference_values``).

A component has one or more functions, run in order: each function's inputs come from the
component's example inputs or from outputs of earlier functions. All components have one
function ``main`` except the decoder, whose ill-conditioned harmonic source (``source``) is
split from the rest (``body``) so that each can be validated on its own terms.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from kokoro_tvm.facts import COMPONENT_NAMES, SAMPLES_PER_FRAME
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


@dataclass(frozen=True)
class Function:
    """One exported function: a wrapper method, its argument names and its output names.

    Names are lower case because torch.export lower-cases placeholder names, and the library's
    parameters keep them: the runtime passes inputs by these names.
    """

    name: str
    method: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # False where the outputs are ill-conditioned in float32 (the decoder's harmonic source):
    # validation reports their error and judges them through the chained component instead.
    tight: bool = True


@dataclass(frozen=True)
class Component:
    """A compiled unit of Kokoro: what to export, how to patch it, how to feed it."""

    name: str
    axis: str  # "tokens" or "frames": what the bucket counts
    has_lstm: bool
    patches: tuple[str, ...]
    wrapper: Callable[[Any], nn.Module]
    example_inputs: Callable[[Any, int, int], dict[str, torch.Tensor]]  # (kmodel, bucket, seed)
    functions: tuple[Function, ...]
    # Outputs of the chained functions judged by spectral metrics (ill-conditioned end to end),
    # and the input and relative change whose effect on PyTorch shows rounding's share.
    spectral_outputs: tuple[str, ...] = ()
    spectral_probe: tuple[str, float] = ("", 0.0)
    # Length-exact fidelity (docs/decisions.md, Fidelity), for components whose inputs carry a mask
    # (True on padding): input or output name -> (its length axis, positions per valid one).
    length_axes: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Whether the mask is 1 on the valid positions instead (BERT's attention_mask).
    mask_marks_valid: bool = False
    # An output judged against its float64 truth (the decoder's ill-conditioned harmonic
    # source): its name, and what computes it in float64 from its function's inputs.
    float64_reference: tuple[str, Callable[..., torch.Tensor]] | None = None
    # Kokoro's own code for the component, unpatched, run on unpadded inputs (the reference):
    # takes the component's ``inputs`` by name, returns the last function's outputs.
    kokoro: Callable[..., tuple[torch.Tensor, ...]] | None = None

    @property
    def mask_input(self) -> str:
        """The input that marks the padding (text_mask, frame_mask: True there) or the valid
        positions (attention_mask: 1 there, ``mask_marks_valid``)."""
        return next(name for name in self.length_axes if name.endswith("_mask"))

    def unpadded_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """``mask`` as it reads when every position is valid."""
        return torch.ones_like(mask) if self.mask_marks_valid else torch.zeros_like(mask)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(o for f in self.functions for o in f.outputs)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The inputs of all functions that no earlier function produces, in order."""
        names: list[str] = []
        for fn in self.functions:
            names += [i for i in fn.inputs if i not in names and i not in self.outputs]
        return tuple(names)


COMPONENTS: dict[str, Component] = {c.name: c for c in (
    Component("bert", "tokens", False, (), BertWrapper, bert_inputs,
              (Function("main", "forward", ("input_ids", "attention_mask"), ("d_en",)),),
              length_axes={"input_ids": (1, 1), "attention_mask": (1, 1), "d_en": (2, 1)},
              mask_marks_valid=True, kokoro=kokoro_bert),
    Component("duration", "tokens", True, ("packed_lstm",), DurationWrapper, duration_inputs,
              (Function("main", "forward", ("d_en", "s", "text_mask"), ("d", "durations")),),
              length_axes={"d_en": (2, 1), "text_mask": (1, 1), "d": (1, 1),
                           "durations": (1, 1)}, kokoro=kokoro_duration),
    Component("text_encoder", "tokens", True, ("packed_lstm",), TextEncoderWrapper,
              text_encoder_inputs,
              (Function("main", "forward", ("input_ids", "text_mask"), ("t_en",)),),
              length_axes={"input_ids": (1, 1), "text_mask": (1, 1), "t_en": (2, 1)},
              kokoro=kokoro_text_encoder),
    Component("f0n", "frames", True, (), F0NWrapper, f0n_inputs,
              (Function("main", "forward", ("en", "s", "frame_mask"), ("f0", "n")),),
              length_axes={"en": (2, 1), "frame_mask": (1, 1), "f0": (1, 2), "n": (1, 2)},
              kokoro=kokoro_f0n),
    Component("decoder", "frames", False, ("sinegen_noise_inputs", "stft_phase_where"),
              DecoderWrapper, decoder_inputs,
              (Function("source", "source", ("f0", "phase_noise", "sine_noise", "frame_mask"),
                        ("har",), tight=False),
               Function("body", "body", ("asr", "f0", "n", "s", "har", "frame_mask"),
                        ("audio",))),
              spectral_outputs=("audio",), spectral_probe=("f0", 1e-6),
              float64_reference=("har", source_float64),
              # 600 samples per frame: 2 F0 values per frame, x prod(upsample_rates) * hop.
              length_axes={"asr": (2, 1), "f0": (1, 2), "n": (1, 2), "frame_mask": (1, 1),
                           "sine_noise": (1, SAMPLES_PER_FRAME),
                           "audio": (1, SAMPLES_PER_FRAME)},
              kokoro=kokoro_decoder),
)}
assert tuple(COMPONENTS) == COMPONENT_NAMES


# --------------------------------------------------------------------------------------------
# Running and exporting.
# --------------------------------------------------------------------------------------------


class _Bound(nn.Module):
    """A wrapper's method as a module's forward, which is what torch.export exports."""

    def __init__(self, wrapper: nn.Module, method: str):
        super().__init__()
        for child_name, child in wrapper.named_children():  # parameter names stay KModel's
            self.add_module(child_name, child)
        # The wrapper's bound method, so torch.export names the inputs after its arguments.
        self.forward = getattr(wrapper, method)


def _as_tuple(out) -> tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def run_reference(kmodel, name: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """All functions of a component in PyTorch, chained, on the model's device: example inputs
    plus every output."""
    component = COMPONENTS[name]
    wrapper = component.wrapper(kmodel).eval()
    env = on_device(inputs, model_device(kmodel))
    with patched(component.patches), torch.no_grad():
        for fn in component.functions:
            outs = _as_tuple(getattr(wrapper, fn.method)(*(env[i] for i in fn.inputs)))
            env.update(zip(fn.outputs, outs))
    return env


def valid_length(name: str, inputs: dict[str, Any]) -> int:
    """The utterance's length in the bucket's units (tokens or frames), from its mask (a tensor
    or an array)."""
    component = COMPONENTS[name]
    valid = np.asarray(inputs[component.mask_input]).astype(bool)
    return int((valid if component.mask_marks_valid else ~valid).sum())


def crop(name: str, values: dict[str, Any], length: int) -> dict[str, Any]:
    """Inputs or outputs of a component cut to ``length`` valid positions along their length
    axes; values without a length axis are kept."""
    axes = COMPONENTS[name].length_axes
    return {key: value[(slice(None),) * axes[key][0] + (slice(0, length * axes[key][1]),)]
            if key in axes else value for key, value in values.items()}


def run_exact_length(kmodel, name: str, inputs: dict[str, torch.Tensor]
                     ) -> dict[str, torch.Tensor]:
    """Unpatched Kokoro on the utterance without its padding: the outputs at exactly its length,
    which the valid part of a bucketed run must equal."""
    component = COMPONENTS[name]
    cropped = crop(name, inputs, valid_length(name, inputs))
    cropped[component.mask_input] = component.unpadded_mask(cropped[component.mask_input])
    cropped = on_device(cropped, model_device(kmodel))
    with torch.no_grad():
        outs = component.kokoro(kmodel, **{i: cropped[i] for i in component.inputs})
    return dict(zip(component.functions[-1].outputs, _as_tuple(outs)))


def run_float64(kmodel, name: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The component's ``float64_reference`` output computed in float64 (empty without one)."""
    component = COMPONENTS[name]
    if component.float64_reference is None:
        return {}
    output, compute = component.float64_reference
    function = next(fn for fn in component.functions if output in fn.outputs)
    env = on_device(inputs, model_device(kmodel))
    with patched(component.patches), torch.no_grad():
        return {output: compute(kmodel, *(env[i] for i in function.inputs))}


def probe_inputs(name: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``inputs`` with the component's probe input scaled by 1 + its relative change."""
    probe, change = COMPONENTS[name].spectral_probe
    return dict(inputs, **{probe: inputs[probe] * (1 + change)})


def reference_values(kmodel, name: str, env: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Everything validation compares a library with, from ``env`` (``run_reference`` on the
    example inputs): computed once per (component, bucket), by the export stage, for every
    target and LSTM method (docs/decisions.md, Fidelity). Keys, by prefix:

    - ``input.``/``output.``: the example inputs and every function's PyTorch output;
    - ``float64.``: the ``float64_reference`` output's float64 truth;
    - ``exact.``: unpatched Kokoro on the utterance without its padding;
    - ``probe.``: the same with the probe input nudged (spectral outputs only): PyTorch's own
      reaction to a rounding-sized change, taken once at exact length since the padded
      wrapper's valid samples equal Kokoro's there (a full decoder pass saved per bucket)."""
    component = COMPONENTS[name]
    inputs = {i: env[i] for i in component.inputs}
    values = {**{f"input.{i}": env[i] for i in component.inputs},
              **{f"output.{o}": env[o] for o in component.outputs},
              **{f"float64.{o}": v for o, v in run_float64(kmodel, name, inputs).items()}}
    if component.kokoro is not None:
        values.update({f"exact.{o}": v for o, v in run_exact_length(kmodel, name, inputs).items()})
    if component.spectral_outputs:
        probe = run_exact_length(kmodel, name, probe_inputs(name, inputs))
        values.update({f"probe.{o}": probe[o] for o in component.spectral_outputs})
    return {key: value.detach().cpu().numpy() for key, value in values.items()}


def export_component(kmodel, name: str, bucket: int, seed: int = 0,
                     env: dict[str, torch.Tensor] | None = None
                     ) -> dict[str, torch.export.ExportedProgram]:
    """Function name -> ExportedProgram at static shapes for ``bucket``.

    Later functions are traced on the reference outputs of earlier ones (the decoder body on
    the harmonic source), so every function sees realistic values while tracing; ``env`` is
    that run (``run_reference`` on the example inputs at ``seed``) where the caller has it.
    """
    component = COMPONENTS[name]
    wrapper = component.wrapper(kmodel).eval()
    if env is None:
        env = run_reference(kmodel, name, component.example_inputs(kmodel, bucket, seed))
    programs = {}
    with patched(component.patches), torch.no_grad(), warnings.catch_warnings():
        # weight_norm's pre-hook and LSTM.flatten_parameters assign tensor attributes while
        # tracing; the traced values derive from the registered parameters, so this is benign.
        warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned")
        for fn in component.functions:
            args = tuple(env[i] for i in fn.inputs)
            programs[fn.name] = torch.export.export(_Bound(wrapper, fn.method), args, strict=False)
    return programs


def component_params(kmodel, name: str) -> dict[str, Any]:
    """The component's weights under KModel's state-dict keys: the names its libraries' weight
    inputs carry (the importer names them so), the same for every bucket and LSTM method."""
    wrapper = COMPONENTS[name].wrapper(kmodel)
    return {key: value.detach().cpu().numpy() for key, value in wrapper.named_parameters()}
