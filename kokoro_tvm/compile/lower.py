"""Lowering: the target's Relax pipeline, stopping before codegen.

The result is a plain IRModule (finalised Relax functions and unscheduled TIR PrimFuncs) that
``tvm.ir.save_json`` can store, so lowering and building are separate, separately cached stages;
``build.build_library`` continues from it without re-running these passes.
"""
from __future__ import annotations

import tvm
from tvm import relax


def lower(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """``mod`` through the target's default Relax pipeline (legalize, fuse, memory planning,
    VM lowering): everything ``relax.build`` does before VM codegen and TIR compilation."""
    pipeline = relax.get_default_pipeline(target)
    with target:
        return pipeline(mod)
