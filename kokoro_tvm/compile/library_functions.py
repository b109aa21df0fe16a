"""What lowering adds to a library besides its component's own functions (the engine's ``align``
and ``noise``, compile/alignment.py and compile/noise.py): a Relax function calling one
hand-written kernel, where the module's functions take the inputs it serves."""
from __future__ import annotations

import tvm
from tvm import relax


def input_types(mod: tvm.IRModule, names) -> dict[str, relax.TensorType]:
    """The types of the module's Relax function parameters named in ``names`` (by name)."""
    return {param.name: param.ty for func in mod.functions.values()
            if isinstance(func, relax.Function) for param in func.params if param.name in names}


def add_kernel_function(mod: tvm.IRModule, name: str, params: list[relax.Var],
                        kernel: tvm.tirx.PrimFunc, kernel_name: str, outputs
                        ) -> tvm.IRModule:
    """``mod`` with the Relax function ``name(*params)`` returning ``kernel``'s ``outputs`` (one
    tensor type, or a list of them: a tuple); every parameter is an input (no weights)."""
    bb = relax.BlockBuilder(mod)
    with bb.function(name, params, {"num_input": len(params)}):
        gvar = bb.add_func(kernel, kernel_name)
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.call_tir(gvar, params, outputs)))
        bb.emit_func_output(out)
    return bb.get()
