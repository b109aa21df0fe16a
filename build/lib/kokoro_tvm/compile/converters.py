"""Replacements for TVM 0.27 PyTorch op converters that fail or are wrong on Kokoro's graphs.

Each entry of ``CONVERTERS`` is keyed by the ATen overload name that TVM's importer looks up
(``node.target.__name__``) and has the ``custom_convert_map`` signature
``(node, importer) -> relax.Expr``.

- ``clamp.default``: TVM emits ``clip(x, -inf, max)`` when a bound is None; for int64 ``x``
  (the index clamp in the decomposition of ``F.interpolate(mode="linear")``) the build then
  fails with "Cannot convert infinity to BigInt".
- ``clamp_min.default``/``clamp_max.default`` (seen only without torch's decompositions): TVM's
  ``clamp_max`` reads its bound from the wrong argument and silently returns ``x`` unclamped.

All three become the same converter: only the bounds that are given, as ``maximum``/``minimum``
in the output dtype.
"""
from __future__ import annotations

from typing import Any

from torch import fx
from tvm import relax


def _out_dtype(node: fx.Node) -> str:
    """The dtype torch computed for the node (clamp promotes int tensors with float bounds)."""
    return str(node.meta["val"].dtype).removeprefix("torch.")


def _bound_expr(importer, bound: Any, dtype: str) -> relax.Expr:
    """A scalar or tensor clamp bound as a Relax expression of ``dtype``."""
    if isinstance(bound, fx.Node):
        expr = importer.env[bound]
        return expr if expr.ty.dtype == dtype else relax.op.astype(expr, dtype)
    return relax.const(bound, dtype)


def _clamp_between(node: fx.Node, importer, low: Any, high: Any) -> relax.Expr:
    """clamp(x, low, high) where either bound may be None (meaning unbounded on that side)."""
    bb = importer.block_builder
    dtype = _out_dtype(node)
    x = importer.env[node.args[0]]
    if x.ty.dtype != dtype:
        x = bb.emit(relax.op.astype(x, dtype))
    if low is not None:
        x = bb.emit(relax.op.maximum(x, _bound_expr(importer, low, dtype)))
    if high is not None:
        x = bb.emit(relax.op.minimum(x, _bound_expr(importer, high, dtype)))
    return x


def _arg(node: fx.Node, index: int, name: str) -> Any:
    """A positional-or-keyword argument of an ATen call, None when absent."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name)


def clamp(node: fx.Node, importer) -> relax.Expr:
    """aten.clamp(x, min=None, max=None)."""
    return _clamp_between(node, importer, _arg(node, 1, "min"), _arg(node, 2, "max"))


def clamp_min(node: fx.Node, importer) -> relax.Expr:
    """aten.clamp_min(x, min)."""
    return _clamp_between(node, importer, _arg(node, 1, "min"), None)


def clamp_max(node: fx.Node, importer) -> relax.Expr:
    """aten.clamp_max(x, max)."""
    return _clamp_between(node, importer, None, _arg(node, 1, "max"))


CONVERTERS = {
    "clamp.default": clamp,
    "clamp_min.default": clamp_min,
    "clamp_max.default": clamp_max,
}
