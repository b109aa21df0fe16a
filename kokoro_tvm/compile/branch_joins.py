"""Joins of two contraction branches kept out of fusion, so that no branch waits for another.

FuseOps folds a contraction (a convolution, a matmul) together with the elementwise ops that
follow it into one kernel, which runs where the last of those ops stood. Where such a chain
ends in a join with another branch, ``a + b`` with ``b`` computed after ``a``'s contraction,
the kernel runs after ``b``: the contraction is deferred past the other branch's work and its
own input stays alive all that time, next to ``b``'s buffers. The generator sums its three
residual blocks that way, so the first block's last convolution ran after the third block, and
two of its full-size buffers (128 channels by 120 samples a frame) were held through the other
two (docs/memory.md). A join of two such chains is made opaque to fusion here: each branch's
result is then computed where it is ready, and the join adds the two results (a pass over
memory that the convolutions it follows dwarf).

A chain's links are elementwise or injective ops (a Winograd convolution's interleave follows
its contraction); it counts when each link has one consumer, so that FuseOps would take it whole:
a residual add whose earlier operand also feeds the next block's normalization is left alone.
"""
from __future__ import annotations

import tvm
from tvm import relax

# TVM's OpPatternKind, as AnnotateTIROpPattern writes it into each PrimFunc's attributes.
BROADCAST = 1  # elementwise and broadcast ops: at most this
INJECTIVE = 2  # reshapes, gathers (a Winograd convolution's interleave): FuseOps chains them too
CONTRACTION = 4  # kOutEWiseFusable: convolutions and matmuls, fused with what follows
OPAQUE = 8


def _pattern(mod: tvm.IRModule, call: relax.Call) -> int:
    func = mod[call.args[0]]
    return int(func.attrs["op_pattern"]) if func.attrs and "op_pattern" in func.attrs else OPAQUE


def _tensor_calls(func: relax.Function) -> list[tuple[relax.Var, relax.Call]]:
    """The function's ``call_tir`` bindings, in order."""
    return [(b.var, b.value) for block in func.body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
            and b.value.op.name == "relax.call_tir"]


def _uses(func: relax.Function) -> dict[relax.Var, int]:
    """How many bindings (and the function's result) use each variable."""
    uses: dict[relax.Var, int] = {}

    def count(expr) -> None:
        if isinstance(expr, relax.Var):
            uses[expr] = uses.get(expr, 0) + 1

    for block in func.body.blocks:
        for binding in block.bindings:
            relax.analysis.post_order_visit(binding.value, count)
    relax.analysis.post_order_visit(func.body.body, count)
    return uses


def branch_joins(mod: tvm.IRModule, func: relax.Function) -> list[relax.Call]:
    """The elementwise calls of ``func`` that join two chains FuseOps would each take whole
    from a contraction (distinct ones), a chain ending in an earlier join not counted."""
    calls = _tensor_calls(func)
    producer = dict(calls)
    uses = _uses(func)
    joined: set[relax.Var] = set()

    def contraction(var: relax.Var) -> relax.Var | None:
        """The contraction whose single-consumer chain ends in ``var``, if any."""
        while var in producer and var not in joined and uses.get(var, 0) == 1:
            call = producer[var]
            pattern = _pattern(mod, call)
            if pattern == CONTRACTION:
                return var
            if pattern > INJECTIVE:
                return None
            inputs = [a for a in call.args[1].fields if isinstance(a, relax.Var) and a in producer]
            if not inputs:
                return None
            var = inputs[0]
        return None

    joins = []
    for var, call in calls:
        if _pattern(mod, call) > BROADCAST:
            continue
        roots = {contraction(a) for a in call.args[1].fields if isinstance(a, relax.Var)}
        if len(roots - {None}) >= 2:
            joins.append(call)
            joined.add(var)
    return joins


@tvm.transform.module_pass(opt_level=0, name="SeparateBranchJoins")
def separate_branch_joins(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Each branch join (``branch_joins``) calls its own copy of its PrimFunc, marked opaque.
    Runs after AnnotateTIROpPattern, before FuseOps."""
    joins = [call for func in mod.functions.values() if isinstance(func, relax.Function)
             for call in branch_joins(mod, func)]
    if not joins:
        return mod
    bb = relax.BlockBuilder(mod)
    opaque = {}
    for index, call in enumerate(joins):
        name = f"{call.args[0].name_hint}_join{index}"
        prim = mod[call.args[0]].with_attr("op_pattern", OPAQUE)
        if "global_symbol" in prim.attrs:
            prim = prim.with_attr("global_symbol", name)
        opaque[call] = bb.add_func(prim, name)
    mod = bb.get()

    @relax.expr_functor.mutator
    class CallOpaque(relax.PyExprMutator):
        def visit_call_(self, call: relax.Call) -> relax.Expr:
            for join, gvar in opaque.items():
                if call.same_as(join):
                    return relax.Call(call.op, [gvar, *call.args[1:]], call.attrs, call.ty_args)
            return super().visit_call_(call)

    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            mod[gvar] = CallOpaque().visit_expr(func)
    return mod
