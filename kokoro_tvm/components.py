"""What each compiled component is, seen from outside PyTorch: its functions with their inputs
and outputs, its length axes and masks, and how validation judges it (docs/architecture.md,
Components). Plain data, without torch: the Snakefile, the build, validation and the GPU check
read it; ``model/components.py`` adds how each one runs and exports in PyTorch.

A component has one or more functions, run in order: each function's inputs come from the
component's example inputs or from outputs of earlier functions. All components have one
function ``main`` except the decoder, whose ill-conditioned harmonic source (``source``) is
split from the rest (``body``) so that each can be validated on its own terms.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kokoro_tvm.abi import NOISE_INPUTS
from kokoro_tvm.facts import COMPONENT_NAMES, F0_PER_FRAME, SAMPLES_PER_FRAME


@dataclass(frozen=True)
class Function:
    """One function of a library: its argument names and its output names.

    Names are lower case because torch.export lower-cases placeholder names, and the library's
    parameters keep them: the runtime passes inputs by these names.
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # False where the outputs are ill-conditioned in float32 (the decoder's harmonic source):
    # validation reports their error and judges them through the chained component instead.
    tight: bool = True
    # True where a target's ``precision: int8`` quantizes the function's convolutions (the
    # decoder's generator, compile/quantize.py): then judged through the chain as well, by the
    # spectral bars with the int8 SNR cap, never by the tight bar.
    quantizable: bool = False


@dataclass(frozen=True, kw_only=True)
class Component:
    """A compiled unit of Kokoro: its functions, what its bucket counts, how it is judged."""

    name: str
    axis: str  # "tokens" or "frames": what the bucket counts
    has_lstm: bool
    functions: tuple[Function, ...]
    # Length-exact fidelity (docs/fidelity.md); every component's inputs carry a
    # mask (True on padding): input or output name -> (its length axis, positions per valid one).
    length_axes: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Function arguments longer than a multiple of the length by a few positions (the decoder
    # body's ``har``: STFT frames, one more than hop-sized steps): name -> (axis, extra
    # positions); how many per valid position, the traced shape says (model/components.py).
    offset_axes: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Whether the mask is 1 on the valid positions instead (BERT's attention_mask).
    mask_marks_valid: bool = False
    # Outputs of the chained functions judged by spectral metrics (ill-conditioned end to end),
    # and the input and relative changes whose effects on PyTorch show rounding's share: the
    # bar rests on the largest effect, since one change's varies by 10-15 dB of SNR
    # (docs/fidelity.md).
    spectral_outputs: tuple[str, ...] = ()
    spectral_probe: tuple[str, tuple[float, ...]] = ("", ())
    # An output judged against its float64 truth (the decoder's ill-conditioned harmonic source).
    float64_output: str | None = None

    @property
    def mask_input(self) -> str:
        """The input that marks the padding (text_mask, frame_mask: True there) or the valid
        positions (attention_mask: 1 there, ``mask_marks_valid``)."""
        return next(name for name in self.length_axes if name.endswith("_mask"))

    @property
    def quantizable(self) -> bool:
        """Whether a target's ``precision: int8`` quantizes any of its functions."""
        return any(fn.quantizable for fn in self.functions)

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
    Component(name="bert", axis="tokens", has_lstm=False,
              functions=(Function("main", ("input_ids", "attention_mask"), ("d_en",)),),
              length_axes={"input_ids": (1, 1), "attention_mask": (1, 1), "d_en": (2, 1)},
              mask_marks_valid=True),
    Component(name="duration", axis="tokens", has_lstm=True,
              functions=(Function("main", ("d_en", "s", "text_mask"), ("d", "durations")),),
              length_axes={"d_en": (2, 1), "text_mask": (1, 1), "d": (1, 1),
                           "durations": (1, 1)}),
    Component(name="text_encoder", axis="tokens", has_lstm=True,
              functions=(Function("main", ("input_ids", "text_mask"), ("t_en",)),),
              length_axes={"input_ids": (1, 1), "text_mask": (1, 1), "t_en": (2, 1)}),
    Component(name="f0n", axis="frames", has_lstm=True,
              functions=(Function("main", ("en", "s", "frame_mask"), ("f0", "n")),),
              length_axes={"en": (2, 1), "frame_mask": (1, 1), "f0": (1, F0_PER_FRAME),
                           "n": (1, F0_PER_FRAME)}),
    Component(name="decoder", axis="frames", has_lstm=False,
              functions=(Function("source", ("f0", *NOISE_INPUTS, "frame_mask"),
                                  ("har",), tight=False),
                         Function("body", ("asr", "f0", "n", "s", "har", "frame_mask"),
                                  ("audio",), quantizable=True)),
              length_axes={"asr": (2, 1), "f0": (1, F0_PER_FRAME), "n": (1, F0_PER_FRAME),
                           "frame_mask": (1, 1),
                           "sine_noise": (1, SAMPLES_PER_FRAME),
                           "audio": (1, SAMPLES_PER_FRAME)},
              offset_axes={"har": (2, 1)},
              spectral_outputs=("audio",), spectral_probe=("f0", (1e-6, -1e-6)),
              float64_output="har"),
)}
assert tuple(COMPONENTS) == COMPONENT_NAMES

# Frame-side inputs that are a token-side output gathered into frames (the alignment: frame f
# takes token index[f]'s features): input -> the output it is gathered from.
ALIGNED_INPUTS = {"en": "d", "asr": "t_en"}


def token_axis(output: str) -> int:
    """The token axis of a token-side component's output."""
    return next(c.length_axes[output][0] for c in COMPONENTS.values() if output in c.outputs)


def valid_length(name: str, inputs: dict[str, Any]) -> int:
    """The utterance's length in the bucket's units (tokens or frames), from its mask (a tensor
    or an array)."""
    component = COMPONENTS[name]
    valid = np.asarray(inputs[component.mask_input]).astype(bool)
    return int((valid if component.mask_marks_valid else ~valid).sum())


def crop(name: str, values: dict[str, Any], length: int) -> dict[str, Any]:
    """Inputs or outputs of a component (tensors or arrays) cut to ``length`` valid positions
    along their length axes; values without a length axis are kept."""
    axes = COMPONENTS[name].length_axes
    return {key: value[(slice(None),) * axes[key][0] + (slice(0, length * axes[key][1]),)]
            if key in axes else value for key, value in values.items()}


def probe_inputs(name: str, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """``inputs`` with the component's probe input scaled by 1 + each of its relative
    changes."""
    probe, changes = COMPONENTS[name].spectral_probe
    return [dict(inputs, **{probe: inputs[probe] * (1 + change)}) for change in changes]
