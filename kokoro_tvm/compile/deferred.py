"""The placeholder the importer leaves for one of our ops (compile/instance_norm.py,
compile/lstm.py) until its shapes are a bucket's: a ``call_dps_packed`` of ``DEFERRED`` + the
op's name with the op's arguments and result type, which compile/specialize.py replaces by the
op's kernels.
"""
from __future__ import annotations

from tvm import relax

DEFERRED = "kokoro_tvm.deferred."


def placeholder(bb: relax.BlockBuilder, op_name: str, args: list[relax.Expr],
                out_ty: relax.TensorType) -> relax.Expr:
    """Where the importer leaves our op ``op_name`` for ``specialize`` to convert."""
    return bb.emit(relax.call_dps_packed(DEFERRED + op_name, args, out_ty))
