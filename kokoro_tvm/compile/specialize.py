"""A component's Relax module, imported once with its length symbolic, made one bucket's.

The export stage traces each component once with a symbolic length and the relax stage imports
that program once (compile/relax.py); the lower and tune stages start every bucket's library
here: the length bound to the bucket (Relax's ``BindSymbolicVars``), then our ops converted.
Our ops (Kokoro's packed LSTMs, the masked InstanceNorm) become kernels written for static
shapes (compile/lstm.py, compile/instance_norm.py), so the importer leaves a placeholder for
each, a ``call_dps_packed`` of ``DEFERRED`` + the op's name with the op's arguments and result
type (compile/deferred.py), and ``specialize`` emits the kernels in its place once the shapes are
the bucket's: the same kernels a static import made.
"""
from __future__ import annotations

from typing import Callable

import tvm
from tvm import relax

from kokoro_tvm.compile import instance_norm, lstm
from kokoro_tvm.compile.deferred import DEFERRED

# The importer's function attributes bounding a symbolic length (torch.export's range).
LENGTH_BOUNDS = ("tir_var_lower_bound", "tir_var_upper_bound")
_CALL_DPS_PACKED = tvm.ir.Op.get("relax.call_dps_packed")


def _emitters() -> dict[str, Callable[..., relax.Expr]]:
    """Op name -> what emits it for static shapes: ``emit(block_builder, *args)``."""
    return {instance_norm.OP_NAME: instance_norm.emit_masked_instance_norm,
            **{lstm.op_name(name): emit for name, emit in lstm.LSTM_METHODS.items()}}


@relax.expr_functor.mutator
class _EmitDeferred(relax.PyExprMutator):
    """Replaces every placeholder by its op's kernels."""

    def __init__(self, mod: tvm.IRModule, emitters: dict[str, Callable[..., relax.Expr]]):
        super().__init__(mod)
        self.mod_ = mod
        self.emitters = emitters

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        if call.op.same_as(_CALL_DPS_PACKED):
            symbol = call.args[0].global_symbol
            if symbol.startswith(DEFERRED):
                args = [self.visit_expr(arg) for arg in call.args[1].fields]
                return self.emitters[symbol[len(DEFERRED):]](self.builder_, *args)
        return super().visit_call_(call)

    def transform(self) -> tvm.IRModule:
        for gvar, func in self.mod_.functions_items():
            if isinstance(func, relax.Function):
                for bound in LENGTH_BOUNDS:  # the length they bounded is a number now
                    func = func.without_attr(bound)
                self.builder_.update_func(gvar, self.visit_expr(func))
        return self.builder_.get()


def length_vars(mod: tvm.IRModule) -> set[str]:
    """Names of the symbolic lengths of the module's Relax functions (one per function)."""
    names = set()
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            found = {var.name for var in relax.analysis.defined_symbolic_vars(func)}
            if len(found) > 1:
                raise ValueError(f"{gvar.name_hint} has {len(found)} symbolic lengths: {found}")
            names |= found
    return names


def specialize(mod: tvm.IRModule, bucket: int) -> tvm.IRModule:
    """``mod`` at ``bucket``: its length bound, and our ops converted for that length."""
    bound = relax.transform.BindSymbolicVars({name: bucket for name in length_vars(mod)})(mod)
    return _EmitDeferred(bound, _emitters()).transform()
