"""A length-aware bidirectional LSTM that torch.export keeps as one node.

``torch.ops.kokoro_tvm.packed_lstm(x, lengths, w_ih, w_hh, b_ih, b_hh, w_ih_reverse,
w_hh_reverse, b_ih_reverse, b_hh_reverse)`` takes ``x`` [B, T, I] (batch first, as Kokoro's
LSTMs), ``lengths`` [B] int64 (1 <= length <= T) and one nn.LSTM layer's weights per direction
(torch's layout and gate order i, f, g, o), and returns [B, T, 2H]: exactly nn.LSTM over
``pack_padded_sequence(x, lengths)`` then ``pad_packed_sequence(..., total_length=T)``. The
forward direction stops at each sequence's length, the reverse one starts at its last valid step
(not at the padded end), and outputs beyond the length are zeros.

The eager kernel is torch's own packed LSTM, so the op's meaning is nn.LSTM's by construction;
the fake kernel gives torch.export the output shape. TVM converters (compile/lstm.py) lower it.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from kokoro_tvm.model.custom_ops import PACKED_LSTM

# Bound at import, before any patch of torch.nn.utils.rnn (patches.PATCHES) is applied.
_pack, _unpack = pack_padded_sequence, pad_packed_sequence

WEIGHT_NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                "bias_hh_l0_reverse")


@torch.library.custom_op(PACKED_LSTM, mutates_args=())
def packed_lstm(x: Tensor, lengths: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor,
                b_hh: Tensor, w_ih_reverse: Tensor, w_hh_reverse: Tensor, b_ih_reverse: Tensor,
                b_hh_reverse: Tensor) -> Tensor:
    batch, steps, _ = x.shape
    hidden = w_hh.shape[1]
    packed = _pack(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    zeros = x.new_zeros(2, batch, hidden)
    weights = [w_ih, w_hh, b_ih, b_hh, w_ih_reverse, w_hh_reverse, b_ih_reverse, b_hh_reverse]
    data, _, _ = torch.lstm(packed.data, packed.batch_sizes, (zeros, zeros), weights,
                            True, 1, 0.0, False, True)
    out = PackedSequence(data, packed.batch_sizes, packed.sorted_indices,
                         packed.unsorted_indices)
    return _unpack(out, batch_first=True, total_length=steps)[0].contiguous()


@packed_lstm.register_fake
def _packed_lstm_fake(x, lengths, w_ih, w_hh, b_ih, b_hh, w_ih_reverse, w_hh_reverse,
                      b_ih_reverse, b_hh_reverse):
    return x.new_empty(x.shape[0], x.shape[1], 2 * w_hh.shape[1])


def lstm_weights(lstm: nn.LSTM) -> list[Tensor]:
    """The op's weight arguments from an nn.LSTM of the kind Kokoro uses (checked)."""
    if not (lstm.num_layers == 1 and lstm.bidirectional and lstm.batch_first and lstm.bias
            and lstm.proj_size == 0):
        raise ValueError(f"packed_lstm covers one-layer bidirectional batch-first LSTMs with "
                         f"biases, not {lstm}")
    return [getattr(lstm, name) for name in WEIGHT_NAMES]


def run_lstm(lstm: nn.LSTM, x: Tensor, lengths: Tensor) -> Tensor:
    """``lstm`` over ``x`` [B, T, I] packed by ``lengths``, padded back to T with zeros."""
    return torch.ops.kokoro_tvm.packed_lstm(x, lengths.to(torch.int64), *lstm_weights(lstm))
