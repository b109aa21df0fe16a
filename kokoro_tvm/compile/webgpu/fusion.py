"""Fusion within WebGPU's storage-buffer limit.

Relax's FuseOps fuses without counting arguments, and a fused kernel binds one storage buffer
per argument and output: the decoder's norm fused with the Snake activation and the residual
sum needs 9, where every WebGPU device offers 8 (compile/webgpu/limits.py). Where a fused
function would bind more than the limit, its widest kernel (the one with the most parameters)
is kept out of fusion and the module fused again, until every fused function fits (a single
kernel over the limit is left to the build's check, compile/webgpu/plan.py, to name).
"""
from __future__ import annotations

import tvm
from tvm import relax

from kokoro_tvm.compile.branch_joins import OPAQUE

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _bindings(func: relax.Function) -> int:
    """Storage buffers a fused function's kernel binds: its inputs and its outputs."""
    ret = func.ret_ty
    outputs = len(ret.fields) if isinstance(ret, relax.TupleType) else 1
    return len(func.params) + outputs


def _kernels(func: relax.Function) -> list[tvm.ir.GlobalVar]:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR):
            found.append(expr.args[0])

    relax.analysis.post_order_visit(func.body, visit)
    return found


def fuse_within(limit: int) -> tvm.transform.Pass:
    """FuseOps, with kernels kept out of fusion where a fused function would bind more than
    ``limit`` storage buffers."""

    @tvm.transform.module_pass(opt_level=0, name="FuseWithinBindings")
    def fuse(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod = mod.clone()  # kernels are marked opaque in this copy alone
        while True:
            fused = relax.transform.FuseOps()(mod)
            widened = False
            for func in fused.functions.values():
                if not (isinstance(func, relax.Function) and "Primitive" in (func.attrs or {})
                        and _bindings(func) > limit):
                    continue
                fusible = [k for k in _kernels(func)
                           if int(mod[k].attrs.get("op_pattern", OPAQUE)) != OPAQUE]
                if len(_kernels(func)) > 1 and fusible:  # one kernel alone: the build names it
                    widest = max(fusible, key=lambda k: len(mod[k].params))
                    mod[widest] = mod[widest].with_attr("op_pattern", OPAQUE)
                    widened = True
            if not widened:
                return fused

    return fuse
