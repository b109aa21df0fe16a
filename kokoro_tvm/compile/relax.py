"""ExportedPrograms -> one Relax IRModule, with the weights detached as a name -> array dict.

Weights stay function inputs (``keep_params_as_input``): embedding them made the decoder library
216 MB per bucket (docs/tvm.md). Each function takes its user inputs first
(attribute ``num_input``), then its weights, named by torch.export's placeholder names (``p_``
+ the KModel state-dict key with dots as underscores). Those names depend only on the module
tree, not on shapes, so one params file serves every bucket of a component; the runtime looks
weights up by the parameter names the VM reports.
"""
from __future__ import annotations

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_tvm import paths
from kokoro_tvm.compile.converters import CONVERTERS
from kokoro_tvm.compile.instance_norm import convert_masked_instance_norm
from kokoro_tvm.compile.lstm import CONVERTER_KEY, converters
from kokoro_tvm.model import masked_norm, packed_lstm  # noqa: F401 - register the programs' ops
from kokoro_tvm.model.custom_ops import MASKED_INSTANCE_NORM, converter_key

Params = dict[str, np.ndarray]
# Converters of our own ops (the LSTM's come with its method).
OUR_OPS = {converter_key(MASKED_INSTANCE_NORM): convert_masked_instance_norm}
LSTM_OPS = ("lstm.input", "lstm.data", CONVERTER_KEY)


def lstm_nodes(program: torch.export.ExportedProgram) -> list[str]:
    """Names of the LSTM calls in a program."""
    return [n.name for n in program.graph.nodes
            if n.op == "call_function" and getattr(n.target, "__name__", "") in LSTM_OPS]


def _state_dict_keys(program: torch.export.ExportedProgram) -> dict[str, str]:
    """Placeholder name -> KModel state-dict key of every parameter input of the program."""
    kind = torch.export.graph_signature.InputKind.PARAMETER
    return {spec.arg.name: spec.target for spec in program.graph_signature.input_specs
            if spec.kind is kind}


@relax.expr_functor.mutator
class _RenameVars(relax.PyExprMutator):
    """Replaces variables by others (Relax has no public substitution helper in 0.27)."""

    def __init__(self, replacements: dict[relax.Var, relax.Var]):
        super().__init__()
        self.replacements = replacements

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.replacements.get(var, var)


def _name_weights_by_key(func: relax.Function, keys: dict[str, str]) -> relax.Function:
    """Weight parameters renamed from torch.export's placeholder names (lower-cased, dots
    flattened) to KModel's state-dict keys, so that one params file, written straight from the
    model's state dict, serves every bucket and every LSTM method of a component."""
    num_input = int(func.attrs["num_input"])
    renamed = {p: relax.Var(keys[p.name], p.ty) for p in func.params[num_input:]}
    body = _RenameVars(renamed).visit_expr(func.body)
    params = list(func.params[:num_input]) + list(renamed.values())
    return relax.Function(params, body, func.ret_ty, func.is_pure, func.attrs, func.span)


def _drop_unused_weights(func: relax.Function) -> relax.Function:
    """The function without weight parameters its body never reads.

    torch.export lifts every parameter of the exported module (the decoder's ``source`` gets
    all decoder weights but uses one Linear); a caller should not have to pass them.
    """
    num_input = int(func.attrs["num_input"])
    used = set(relax.analysis.free_vars(func.body))
    keep = list(func.params[:num_input]) + [p for p in func.params[num_input:] if p in used]
    return relax.Function(keep, func.body, func.ret_ty, func.is_pure, func.attrs, func.span)


def import_program(program: torch.export.ExportedProgram, lstm: str
                   ) -> tuple[relax.Function, Params, dict[tvm.ir.GlobalVar, tvm.ir.BaseFunc]]:
    """One ExportedProgram, decomposed as ``export_component`` makes it, -> a Relax function
    (inputs, then weights), the weights it takes, and the other functions it calls by name. A
    symbolic length stays symbolic, and our ops are placeholders until
    ``specialize.specialize`` makes the module a bucket's."""
    without = lstm == paths.WITHOUT_LSTM
    if without and (found := lstm_nodes(program)):
        raise ValueError(f"lstm method 'none' used for a program with LSTMs: {found}")
    mod = from_exported_program(program, keep_params_as_input=True, run_ep_decomposition=False,
                                custom_convert_map={**CONVERTERS, **OUR_OPS,
                                                    **({} if without else converters(lstm))})
    keys = _state_dict_keys(program)
    func = _name_weights_by_key(_drop_unused_weights(mod["main"].without_attr("params")), keys)
    num_input = int(func.attrs["num_input"])
    callees = {gvar: f for gvar, f in mod.functions_items() if gvar.name_hint != "main"}
    return func, {p.name: program.state_dict[p.name].detach().cpu().numpy()
                  for p in func.params[num_input:]}, callees


def _merge_params(params: Params, more: Params) -> None:
    """Adds ``more`` to ``params``; a name shared by two functions must hold the same weight."""
    for name, value in more.items():
        if name in params and not np.array_equal(params[name], value):
            raise ValueError(f"weight {name} differs between functions of one component")
        params[name] = value


def import_programs(programs: dict[str, torch.export.ExportedProgram], lstm: str
                    ) -> tuple[tvm.IRModule, Params]:
    """Function name -> ExportedProgram into one IRModule (a Relax function per name) + weights."""
    mod = tvm.IRModule()
    params: Params = {}
    for name, program in programs.items():
        func, func_params, callees = import_program(program, lstm)
        mod[name] = func.with_attr("global_symbol", name)  # each import calls its function main
        _merge_params(params, func_params)
        for gvar, body in callees.items():  # kept under the GlobalVar the function calls
            if any(g.name_hint == gvar.name_hint for g in mod.get_global_vars()):
                raise ValueError(f"two functions of one component add {gvar.name_hint}")
            mod[gvar] = body
    return mod, params


def ir_lines(mod: tvm.IRModule) -> int:
    """Lines of the module's TVMScript: the IR size figure of the artifact metadata."""
    return len(mod.script(show_meta=False).splitlines())
