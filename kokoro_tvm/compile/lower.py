"""Lowering: the target's Relax pipeline, stopping before codegen.

The result is a plain IRModule (finalised Relax functions and unscheduled TIR PrimFuncs) that
``tvm.ir.save_json`` can store, so lowering and building are separate, separately cached stages;
``build.build_library`` continues from it without re-running these passes.

The passes are the target's own (its backend's dispatch, legalize, dataflow-lowering and finalize
lists, as in ``relax.get_default_pipeline(target)``) with one change of purpose: nothing that
grows with the bucket may become a constant, because constants are embedded in a library meant
to hold code only. The decoder's interpolations and upsampling index with ``arange`` over the
audio samples; TVM legalizes a constant-bounded ``arange`` into a numpy table and
``FoldConstant`` then evaluates the index arithmetic on it, leaving int64/float32 tables as long
as the audio in the library (tens of MB at the largest buckets). So ``arange`` is legalized
to a kernel and ``FoldConstant`` is skipped; computing the indices at run time costs nothing
measurable (docs/tvm.md).

Weight transforms: whatever a function computes from weights alone (transposes, weight norm,
the matmul weight panels of our legalization) is lifted into a companion function
``{name}_transform_params`` right after legalization (TVM's LiftTransformParams), and
common subexpressions are eliminated in the transforms alone, so that ALBERT's twelve uses of
one shared layer prepare its weights once. Not in the functions themselves: there, sharing a
result keeps it alive longer (the generator's three residual blocks would share one
instance-normalised copy of their input, a full-size buffer held through all three;
docs/memory.md). The runtime calls the transform once per library (``runtime/library.py``); left
in place, bert transposed its Linear weights on every call, most of its time (docs/tvm.md).

Fusion: a join of two branches that FuseOps would fuse with each one's contraction is kept out
of fusion (``compile/branch_joins.py``), so that no contraction is deferred past the other
branch and the buffers it reads are not held meanwhile.

Schedules: TVM 0.27 applies none on CPU (every conv and matmul a naive loop). Our own
(``kokoro_tvm.compile.schedules``) come in twice: their legalizations of conv1d,
conv_transpose1d and matmul replace TVM's inside LegalizeOps, and their rules schedule every
PrimFunc right after FuseTIR, before the dataflow is lowered. ``schedule=False`` gives TVM's
plain pipeline (the reference the schedule tests compare against).
"""
from __future__ import annotations

import importlib

import tvm
from tvm import relax, topi

from kokoro_tvm.abi import TRANSFORM_SUFFIX
from kokoro_tvm.compile import schedules
from kokoro_tvm.compile.alignment import add_align_function
from kokoro_tvm.compile.branch_joins import separate_branch_joins
from kokoro_tvm.compile.devices import WITHOUT_FLOAT64
from kokoro_tvm.compile.noise import add_noise_function

SKIPPED_PASSES = ("FoldConstant",)
# Where each target kind's pass lists live. ``relax.pipeline.dataflow_lower_passes`` cannot be
# used for llvm in TVM 0.27: the cpu_generic package does not re-export that list.
# CUDA's lists schedule every PrimFunc with dlight's GPU rules after FuseTIR (compile/gpu/).
BACKENDS = {"llvm": "tvm.relax.backend.cpu_generic.pipeline",
            "cuda": "tvm.relax.backend.cuda.pipeline",
            "metal": "tvm.relax.backend.gpu_generic.pipeline",
            "webgpu": "tvm.relax.backend.gpu_generic.pipeline"}


def passes(target: tvm.target.Target, schedule: bool = True, tuning_db: str | None = None,
           until: str | None = None, precision: str = "float32") -> list[tvm.transform.Pass]:
    """The target's default Relax passes in order, without ``SKIPPED_PASSES``; with
    ``schedule``, our legalizations in LegalizeOps and our schedules after FuseTIR; with
    ``tuning_db`` (a MetaSchedule work dir, compile/tune.py), its tuned kernels first, so that
    our schedules take only the kernels it does not have; ``until`` stops after that pass.

    Our schedules are for CPUs (x86 and Arm: they read the vector width from the target); GPU
    targets keep their backend's own schedules (dlight) whatever ``schedule`` says, and get
    the GPU form of our hand-written kernels first. ``precision`` int8 quantizes the
    generator's residual convolutions first (compile/quantize.py; CPUs with VNNI only)."""
    if target.kind.name not in BACKENDS:
        raise ValueError(f"no Relax pipeline known for target kind {target.kind.name}")
    schedule = schedule and "cpu" in target.keys
    backend = importlib.import_module(BACKENDS[target.kind.name])
    every = (backend.library_dispatch_passes(target) + backend.legalize_passes(target)
             + backend.dataflow_lower_passes(target) + backend.finalize_passes(target))
    gpu = "cpu" not in target.keys
    float64 = target.kind.name not in WITHOUT_FLOAT64
    webgpu = target.kind.name == "webgpu"
    chosen = [_gpu_kernels(float64, "int32" if webgpu else "int64")] if gpu else []
    if webgpu:  # imported only here, as the GPU lowering is (_gpu_kernels)
        from kokoro_tvm.compile.webgpu.fusion import fuse_within
        from kokoro_tvm.compile.webgpu.limits import MAX_STORAGE_BUFFERS
        from kokoro_tvm.compile.webgpu.narrow import narrow_int64

        chosen.append(narrow_int64)
    if precision == "int8":
        from kokoro_tvm.compile.quantize import quantize_convs

        chosen.append(quantize_convs(target))
    for p in every:
        if p.info.name in SKIPPED_PASSES:
            continue
        if p.info.name == "LegalizeOps":
            # Lifted after legalization, so that the weight layouts our legalizations
            # introduce (matmul panels) are computed once too.
            chosen += [_legalize(schedule, gpu, float64), lift_weight_transforms]
            continue
        if p.info.name == "ApplyDefaultSchedule" and target.kind.name == "metal":
            p = _metal_default_schedules()
        if p.info.name == "FuseOps" and webgpu:
            p = fuse_within(MAX_STORAGE_BUFFERS)
        chosen.append(p)
        if p.info.name == "AnnotateTIROpPattern":
            chosen.append(separate_branch_joins)
        if p.info.name == until:
            break
        if p.info.name == "FuseTIR" and tuning_db is not None:
            chosen.append(relax.transform.MetaScheduleApplyDatabase(tuning_db))
        if p.info.name == "FuseTIR" and schedule:
            chosen.append(schedules.apply_schedules())
        if p.info.name == "FuseTIR" and gpu:
            chosen.append(_gpu_schedules())
    return chosen


def _named_inputs(transform: relax.Function, names: list[str]) -> relax.Function:
    """``transform`` taking the weights as named parameters instead of LiftTransformParams'
    one tuple, so that callers bind them by state-dict key as they bind the function's own."""
    (packed,) = transform.params
    fields = list(packed.ty.fields)
    if len(fields) != len(names):
        raise ValueError(f"weight transform takes {len(fields)} weights, expected {len(names)}")
    params = [relax.Var(name, ty) for name, ty in zip(names, fields)]
    unpack = relax.BindingBlock([relax.VarBinding(packed, relax.Tuple(params))])
    body = relax.SeqExpr([unpack, *transform.body.blocks], transform.body.body)
    return relax.Function(params, body, transform.ret_ty, transform.is_pure, transform.attrs,
                          transform.span)


@tvm.transform.module_pass(opt_level=0, name="LiftWeightTransforms")
def lift_weight_transforms(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Weight-only computation of every function with inputs and weights (``num_input``) moved
    to ``{name}_transform_params``, which takes the weights by name."""
    weights = {gvar.name_hint: [p.name for p in func.params[int(func.attrs["num_input"]):]]
               for gvar, func in mod.functions_items()
               if isinstance(func, relax.Function) and func.attrs and "num_input" in func.attrs}
    mod = relax.transform.LiftTransformParams()(mod)
    eliminate_common = tvm.transform.Sequential([relax.transform.EliminateCommonSubexpr(),
                                                 relax.transform.CanonicalizeBindings()])
    for name, names in weights.items():
        transform = mod.get_global_var(name + TRANSFORM_SUFFIX)
        alone = eliminate_common(tvm.IRModule({transform: mod[transform]}))
        function = mod.get_global_var(name)
        distinct, mod[function] = _distinct_outputs(alone[transform], mod[function])
        mod[transform] = _named_inputs(distinct, names)
    return mod


def _distinct_outputs(transform: relax.Function, function: relax.Function
                      ) -> tuple[relax.Function, relax.Function]:
    """``transform`` returning each prepared weight once, and ``function`` taking it once: a
    weight used twice is prepared once by common-subexpression elimination, but stays two
    outputs of the transform and two parameters of the function until merged here."""
    bindings = {b.var: b for block in transform.body.blocks for b in block.bindings}
    output = bindings.get(transform.body.body)
    if output is None:  # no weights: the transform returns an empty tuple
        return transform, function
    fields = list(output.value.fields)
    prepared = function.params[len(function.params) - len(fields):]
    first_of: dict = {}  # an output var (by identity) -> its first position
    for i, field in enumerate(fields):
        first_of.setdefault(field, i)
    merged = {prepared[i]: prepared[first_of[field]] for i, field in enumerate(fields)
              if first_of[field] != i}
    kept = sorted(first_of.values())
    if not merged:
        return transform, function
    value = relax.Tuple([fields[i] for i in kept])
    var = relax.Var(output.var.name, relax.TupleType([fields[i].ty for i in kept]))
    blocks = [type(block)([relax.VarBinding(var, value) if b.same_as(output) else b
                           for b in block.bindings]) for block in transform.body.blocks]
    transform = relax.Function(transform.params, relax.SeqExpr(blocks, var), var.ty,
                               transform.is_pure, transform.attrs, transform.span)
    return transform, function.bind_params(merged)


def _gpu_kernels(float64: bool, lengths: str) -> tvm.transform.Pass:
    """Our hand-written CPU kernels replaced by GPU ones (compile/gpu/lstm.py,
    compile/gpu/instance_norm.py; imported here only for GPU targets, so that CPU libraries do
    not depend on them); without ``float64``, the graph's float64 sum in fixed point
    (compile/gpu/without_float64.py)."""
    from kokoro_tvm.compile.gpu.instance_norm import gpu_instance_norm
    from kokoro_tvm.compile.gpu.lstm import gpu_lstm_recurrence
    from kokoro_tvm.compile.gpu.without_float64 import fixed_point_cumsum

    accumulator = "float64" if float64 else "float32"
    return tvm.transform.Sequential([gpu_lstm_recurrence(lengths), gpu_instance_norm(accumulator),
                                     *([] if float64 else [fixed_point_cumsum])])


def _gpu_schedules() -> tvm.transform.Pass:
    """Our GPU schedules (convolutions, the norm) before dlight's rules take the rest; imported
    only for GPU targets, as ``_gpu_kernels``."""
    from tvm.s_tir import dlight as dl

    from kokoro_tvm.compile.gpu.contraction import Contraction
    from kokoro_tvm.compile.gpu.instance_norm import RowNorm

    return dl.ApplyDefaultSchedule(Contraction(), RowNorm())


def _metal_default_schedules() -> tvm.transform.Pass:
    """dlight's GPU rules less Matmul, which crashes the process on metal targets (a segfault
    in its tensorization, that Python cannot catch); matrix products fall to GEMV, the
    reductions or Fallback (compile/gpu/__init__.py)."""
    from tvm.s_tir import dlight as dl

    return dl.ApplyDefaultSchedule(dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                   dl.gpu.Fallback())


def _arange_kernel(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """relax.arange as a TIR kernel even when its bounds are constants (TVM makes a table)."""
    start, end, step = call.args
    return bb.call_te(topi.arange, start, end, step, call.attrs.dtype)


def _legalize(schedule: bool, gpu: bool, float64: bool = True) -> tvm.transform.Pass:
    # Whole powers as products and sin/cos with float64 argument reduction on every target
    # that has float64: TVM's own forms are wrong on CUDA (schedules/math.py).
    math = schedules.math.EVERY_TARGET if float64 else schedules.math.WITHOUT_FLOAT64
    custom = {"relax.arange": _arange_kernel, **math}
    if schedule:
        custom.update(schedules.LEGALIZATIONS)
    if gpu:
        from kokoro_tvm.compile.gpu.contraction import LEGALIZATIONS as GPU_LEGALIZATIONS

        custom.update(GPU_LEGALIZATIONS)
    return relax.transform.LegalizeOps(customize_legalize_map=custom)


def lower(mod: tvm.IRModule, target: tvm.target.Target, schedule: bool = True,
          tuning_db: str | None = None, precision: str = "float32") -> tvm.IRModule:
    """``mod`` through the target's Relax pipeline (legalize, fuse, schedule, memory planning,
    VM lowering): everything ``relax.build`` does before VM codegen and TIR compilation."""
    # On GPUs each library call replays its kernels as captured CUDA graphs (the kernels
    # between the first and last that touch the call's inputs and outputs): at these sizes a
    # call is otherwise bound by kernel launches.
    graphs = {"relax.backend.use_cuda_graph": "gpu" in target.keys}
    mod = add_noise_function(mod, target)
    mod = add_align_function(mod, target)
    with target, tvm.transform.PassContext(config=graphs):
        return tvm.transform.Sequential(passes(target, schedule, tuning_db,
                                               precision=precision))(mod)


def fused_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """The PrimFuncs ``lower`` would schedule, unscheduled: the pipeline up to FuseTIR.

    These are exactly the functions the MetaSchedule database is later applied to, so tuning
    records match them structurally."""
    with target:
        fused = tvm.transform.Sequential(passes(target, until="FuseTIR"))(mod)
    return tvm.IRModule({gvar: func for gvar, func in fused.functions_items()
                         if isinstance(func, tvm.tirx.PrimFunc)
                         and not func.attrs.get("tirx.is_scheduled", False)})
