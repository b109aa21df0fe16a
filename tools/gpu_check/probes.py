"""One probe function per Relax op kind that our components use, for finding a wrong op on a GPU.

Every call of an op (``relax.add``, ``relax.power``, ...) in the components' imported modules is a
candidate; the first one of each kind becomes a function ``op_<kind>`` of its own, taking that
call's tensor arguments as parameters with the same shapes and dtypes (constants stay constant).
The probe module is built for cuda and for a generic x86-64 CPU; check.py runs both on the same
seeded inputs and compares, so one GPU run names the op kind that is wrong, if any.
Calls of our own kernels (``call_tir``: LSTM recurrences, the masked InstanceNorm) are not op
kinds: the real libraries cover them.
"""
from __future__ import annotations

import tvm
from tvm import relax

# Ops that are not a computation of their own.
NOT_PROBED = ("relax.call_tir", "relax.call_dps_packed", "relax.call_pure_packed")
# The CPU side of the probes: generic x86-64, so it runs on whatever CPU the GPU machine has.
CPU_OPTIONS = {"kind": "llvm", "mcpu": "x86-64"}


def op_kinds(mod: tvm.IRModule) -> set[str]:
    """Names of the Relax ops called in ``mod``'s Relax functions."""
    return set(first_calls(mod))


def first_calls(mod: tvm.IRModule) -> dict[str, relax.Call]:
    """Op name -> its first call in ``mod`` (Relax functions in name order)."""
    found: dict[str, relax.Call] = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            found.setdefault(expr.op.name, expr)

    for _, func in sorted(mod.functions_items(), key=lambda item: item[0].name_hint):
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _probe_function(call: relax.Call) -> relax.Function:
    """``call`` alone in a function whose parameters are its variable arguments (constants,
    shapes and prim values stay as they are)."""
    params: list[relax.Var] = []

    def fresh(var: relax.Var) -> relax.Var:
        param = relax.Var(f"x{len(params)}", var.ty)
        params.append(param)
        return param

    def argument(arg):
        if isinstance(arg, relax.Var):
            return fresh(arg)
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([argument(a) for a in arg.fields])
        return arg  # constants, shapes, prim values

    args = [argument(a) for a in call.args]
    bb = relax.BlockBuilder()
    with bb.function("probe", params):
        with bb.dataflow():
            out = bb.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()["probe"]


def probe_module(modules: list[tvm.IRModule]) -> tvm.IRModule:
    """One function ``op_<kind>`` per op kind called in ``modules`` (first call of each)."""
    calls: dict[str, relax.Call] = {}
    for mod in modules:
        for name, call in first_calls(mod).items():
            calls.setdefault(name, call)
    functions = {}
    for name, call in sorted(calls.items()):
        if name in NOT_PROBED:
            continue
        functions["op_" + name.removeprefix("relax.").replace(".", "_")] = _probe_function(call)
    return tvm.IRModule({tvm.ir.GlobalVar(name): func.with_attr("global_symbol", name)
                         for name, func in functions.items()})


def signatures(mod: tvm.IRModule) -> dict[str, list[dict]]:
    """Probe name -> its parameters' shapes and dtypes."""
    return {gvar.name_hint: [{"shape": [int(d) for d in param.ty.shape],
                              "dtype": str(param.ty.dtype)} for param in func.params]
            for gvar, func in sorted(mod.functions_items(), key=lambda i: i[0].name_hint)}
