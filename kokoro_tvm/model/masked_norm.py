"""InstanceNorm over the valid positions only, as an op that torch.export keeps as one node.

``torch.ops.kokoro_tvm.masked_instance_norm(x, valid, eps)`` takes ``x`` [B, C, L] and
``valid`` [B, 1, L] (1.0 on valid positions, 0.0 on padding) and returns
``(x - mean) / sqrt(var + eps)`` with the mean and the biased variance of each row taken over
its valid positions: at exact length (all valid), torch's ``instance_norm`` without affine.

Kokoro's AdaIN layers use it (wrappers._masked_adain). As one node it reaches TVM's importer
whole, and compile/instance_norm.py lowers it to one kernel instead of eight Relax ops.
"""
from __future__ import annotations

import torch
from torch import Tensor

from kokoro_tvm.model.custom_ops import MASKED_INSTANCE_NORM


@torch.library.custom_op(MASKED_INSTANCE_NORM, mutates_args=())
def masked_instance_norm(x: Tensor, valid: Tensor, eps: float) -> Tensor:
    count = valid.sum(dim=-1, keepdim=True)
    mean = (x * valid).sum(dim=-1, keepdim=True) / count
    var = (((x - mean) * valid) ** 2).sum(dim=-1, keepdim=True) / count
    return (x - mean) * torch.rsqrt(var + eps)


@masked_instance_norm.register_fake
def _masked_instance_norm_fake(x, valid, eps):
    return torch.empty_like(x)
