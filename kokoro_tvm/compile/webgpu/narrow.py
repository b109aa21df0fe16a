"""Relax graphs without 64-bit integers, for WebGPU.

WGSL has no 64-bit integers, and TVM's WebGPU code generator refuses int64 buffers. Every int64
tensor of a graph meant for WebGPU is made int32 before legalization: the functions' int64
inputs, constants, and the ops whose ``dtype`` attribute says int64 (astype, arange, full,
cumsum); every other op follows its inputs when the graph is normalised again. Our tensors'
integers are token ids, lengths, frame indices and sample indices (at most a few million), far
inside int32.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

WIDE = "int64"
NARROW = "int32"


def _narrow_type(ty):
    if isinstance(ty, relax.TensorType) and ty.dtype == WIDE:
        return relax.TensorType(ty.shape, NARROW)
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_narrow_type(field) for field in ty.fields])
    return ty


def _narrow_attrs(attrs):
    """``attrs`` with an int64 ``dtype`` field made int32 (None where it has none)."""
    info = getattr(type(attrs), "__tvm_ffi_type_info__", None)
    fields = [field.name for field in info.fields] if info is not None else []
    if "dtype" not in fields or str(attrs.dtype) != WIDE:
        return None
    values = {name: getattr(attrs, name) for name in fields}
    return tvm.ir.make_node(info.type_key, **{**values, "dtype": NARROW})


def _narrow_scalar(arg):
    """An int64 scalar operand (a shape's arithmetic, such as a length minus one) as int32."""
    if tvm.ir.is_prim_expr(arg) and str(arg.ty) == WIDE:
        if isinstance(arg, tvm.tirx.IntImm):
            return tvm.tirx.IntImm(NARROW, arg.value)
        return tvm.tirx.Cast(NARROW, arg)
    return arg


@relax.expr_functor.mutator
class _Narrow(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod_ = mod
        self.params: dict[relax.Var, relax.Var] = {}

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.params.get(var, var)

    def visit_generic_const_(self, const):
        value = const.value
        if isinstance(value, tvm.runtime.Tensor) and str(value.dtype) == WIDE:
            return relax.const(value.numpy().astype(np.int32), NARROW)
        return const

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        if not isinstance(call.op, tvm.ir.Op):
            return super().visit_call_(call)
        # Scalars first: the default visit rebuilds the call with its narrowed tensors.
        args = [_narrow_scalar(arg) for arg in call.args]
        call = super().visit_call_(relax.Call(call.op, args, call.attrs, call.ty_args))
        attrs = _narrow_attrs(call.attrs)
        if attrs is None:
            return call
        return self.builder_.normalize(relax.Call(call.op, call.args, attrs, call.ty_args))

    def transform(self) -> tvm.IRModule:
        for gvar, func in self.mod_.functions_items():
            if not isinstance(func, relax.Function):
                continue
            params = [relax.Var(p.name, _narrow_type(p.ty)) for p in func.params]
            self.params = dict(zip(func.params, params))
            body = self.visit_expr(func.body)
            narrowed = relax.Function(params, body, None, func.is_pure, func.attrs, func.span)
            self.builder_.update_func(gvar, narrowed)
        return self.builder_.get()


@tvm.transform.module_pass(opt_level=0, name="NarrowInt64")
def narrow_int64(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Every int64 tensor of ``mod``'s Relax functions made int32 (see the module docstring)."""
    return _Narrow(mod).transform()
