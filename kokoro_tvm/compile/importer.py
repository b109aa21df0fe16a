"""ExportedPrograms -> one Relax IRModule, with the weights detached as a name -> array dict.

Weights stay function inputs (``keep_params_as_input``): embedding them made the decoder library
216 MB per bucket (DESIGN.md section 4). Each function takes its user inputs first (attribute
``num_input``), then its weights, named by torch.export's placeholder names (``p_`` + the KModel
state-dict key with dots as underscores). Those names depend only on the module tree, not on
shapes, so one params file serves every bucket of a component; the runtime looks weights up by
the parameter names the VM reports.
"""
from __future__ import annotations

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_tvm.compile.converters import CONVERTERS
from kokoro_tvm.compile.lstm import LSTM_METHODS

Params = dict[str, np.ndarray]


def _parameter_arrays(program: torch.export.ExportedProgram) -> Params:
    """Placeholder name -> value of every parameter input of the program."""
    kind = torch.export.graph_signature.InputKind.PARAMETER
    return {spec.arg.name: program.state_dict[spec.target].detach().cpu().numpy()
            for spec in program.graph_signature.input_specs if spec.kind is kind}


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
                   ) -> tuple[relax.Function, Params]:
    """One ExportedProgram -> a Relax function (inputs, then weights) and the weights it takes."""
    method = LSTM_METHODS[lstm]
    program = method.prepare(program)
    mod = from_exported_program(program, keep_params_as_input=True, run_ep_decomposition=False,
                                custom_convert_map={**CONVERTERS, **method.converters})
    func = _drop_unused_weights(mod["main"].without_attr("params"))
    arrays = _parameter_arrays(program)
    num_input = int(func.attrs["num_input"])
    return func, {p.name: arrays[p.name] for p in func.params[num_input:]}


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
        func, func_params = import_program(program, lstm)
        mod[name] = func.with_attr("global_symbol", name)  # each import calls its function main
        _merge_params(params, func_params)
    return mod, params


def ir_lines(mod: tvm.IRModule) -> int:
    """Lines of the module's TVMScript: the IR size figure of the artifact metadata."""
    return len(mod.script(show_meta=False).splitlines())
