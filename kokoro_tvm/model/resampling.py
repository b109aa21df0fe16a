"""Kokoro's resampling by integer factors, written so that torch.export traces it with a
symbolic length and TVM imports it.

``F.interpolate`` with a ``scale_factor`` decomposes into index arithmetic on a symbolic float
scale (``sym_float``, ``truediv``), which TVM's importer cannot convert; these forms compute the
same values from integer shapes: nearest upsampling and the linear downsampling bit for bit,
the linear upsampling with PyTorch's index arithmetic to rounding (tests/test_resampling.py).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F


def nearest_up(x: torch.Tensor, factor: int) -> torch.Tensor:
    """``F.interpolate(x, scale_factor=factor, mode="nearest")`` along the last axis."""
    return x.repeat_interleave(factor, dim=-1)


def linear_down(x: torch.Tensor, factor: int, dim: int = -1,
                of: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """``F.interpolate(x, scale_factor=1 / factor, mode="linear")`` of ``x`` [B, C, N * factor]
    (along ``dim``, the last by default) for an even ``factor``: each output sits halfway
    between the two middle samples of its ``factor`` inputs, so it is their mean (PyTorch's
    weights are 0.5 and 0.5 there). With ``of``, the downsampling of ``of(x)`` (an elementwise
    function), computed on those samples alone."""
    first, second = middle_samples(x, factor, dim)
    if of is not None:
        first, second = of(first), of(second)
    return (first + second) * 0.5


def middle_samples(x: torch.Tensor, factor: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two middle samples of each group of ``factor`` along ``dim`` of ``x`` (an even
    ``factor``), the only ones ``linear_down`` reads: a function of ``x`` computed on these
    alone gives what it gives on all of ``x``, downsampled, without a buffer of ``x``'s size."""
    if factor % 2:
        raise ValueError(f"middle_samples: factor {factor} is odd; Kokoro's SineGen uses 300")
    dim %= x.dim()
    groups = x.reshape(*x.shape[:dim], x.shape[dim] // factor, factor, *x.shape[dim + 1:])
    # Slices, not select: TVM imports select as a gather, which it cannot fuse with the
    # function of x computed on these samples, and so computes that function on all of x.
    return (groups.narrow(dim + 1, factor // 2 - 1, 1).squeeze(dim + 1),
            groups.narrow(dim + 1, factor // 2, 1).squeeze(dim + 1))


def linear_up(x: torch.Tensor, factor: int) -> torch.Tensor:
    """``F.interpolate(x, scale_factor=factor, mode="linear")`` along the last axis of ``x``
    [B, C, N] (``align_corners=False``).

    Exported, it is torch's own decomposition of that call with the length an integer: output j
    reads the source position (j + 0.5) / factor - 0.5, clamped at 0, between its two
    neighbours (the last repeated at the end), in ``x``'s dtype, and blends them as
    ``left + (right - left) * weight``. The neighbours of output j = factor * i + r are x[i - 1]
    and x[i], or x[i] and x[i + 1]: they are taken from ``x`` and its copies shifted by one, not
    gathered by index, so that TVM fuses the upsampling into what reads it (a gather it cannot
    fuse would be a buffer of the output's size). Run eagerly it is ``F.interpolate`` itself:
    that blend rounds otherwise than PyTorch's compiled kernel (1e-7 relative), which SineGen's
    phase of hundreds of thousands of radians turns into a waveform 38 dB from Kokoro's, and the
    PyTorch reference must stay Kokoro's bit for bit where no padding reaches
    (tests/test_padding.py)."""
    if not torch.compiler.is_exporting():
        return F.interpolate(x, scale_factor=factor, mode="linear")
    length = x.shape[-1]
    frame = torch.arange(length, device=x.device)[:, None]  # i, [N, 1]
    position = (frame * factor + torch.arange(factor, device=x.device)).to(x.dtype)  # j
    source = torch.clamp((1 / factor) * (position + 0.5) - 0.5, min=0)
    left = source.to(torch.int64)
    weight = source - left.to(x.dtype)
    right = torch.clamp(left + 1, max=length - 1)
    # Shifted by padding and narrowing with an explicit length, which TVM can prove equal to
    # x's where the length is symbolic, on a positive axis (TVM's strided slice takes no
    # negative one); the zero each shift brings in is never read (left is 0 at i = 0, right
    # is the last sample at the end).
    last = x.dim() - 1
    previous = F.pad(x, (1, 0)).narrow(last, 0, length)[..., None]
    following = F.pad(x, (0, 1)).narrow(last, 1, length)[..., None]
    here = x[..., None]
    near = torch.where(left == frame, here, previous)
    far = torch.where(right == frame, here, following)
    return (near + (far - near) * weight.clamp(0, 1)).flatten(-2)
