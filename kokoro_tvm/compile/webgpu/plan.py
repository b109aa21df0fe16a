"""A webgpu library: the WGSL of its kernels and a launch plan per function, as one JSON
document that a player runs without TVM (runtime/webgpu.py here, the browser's module there).

A lowered module for a static bucket holds everything a player needs (docs/other-targets.md,
WebGPU, has the format):
- each Relax function, once lowered for the VM, is a sequence of storage allocations, tensors
  placed at offset 0 of a storage, calls of PrimFuncs in destination-passing style (constants
  inline), reshapes (views of the same storage), releases and shape checks (a static bucket
  passes them by construction);
- each PrimFunc, after TVM's TIR passes up to SplitHostDevice, is a host function that launches
  one or more kernels with its buffers, scalar arguments and grid extents; the device module
  gives each kernel's WGSL, its storage bindings in parameter order and a uniform of its scalars
  followed by the grid's x extent.

Four fixes to TVM's WGSL: float32 constants printed with too few digits are written exactly;
bool and int8 buffers become ``array<i8>``, a type WGSL does not
have, so they are stored as i32 (abi.WEBGPU_STORAGE; the plan and the player convert at the
edges); infinity is written ``inff``, which WGSL does not know; and the guard of a grid folded
into z (x extents over 65,535, as TVM's JS runtime folds them) compares with ``>`` where ``>=``
keeps the extra workgroups out.
"""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.tirx.build import split_host_device_mods

from kokoro_tvm.abi import WEBGPU_PLAN_FORMAT, WEBGPU_PLAN_VERSION, WEBGPU_STORAGE
from kokoro_tvm.compile.webgpu import limits

WORD = 4  # bytes of every stored element
GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_SKIPPED_BUILTINS = ("vm.builtin.check_tensor_info", "vm.builtin.match_shape")
_SCALAR_TYPES = {"i32": "int32", "u32": "uint32", "f32": "float32"}


def _storage_dtype(dtype: str) -> str:
    if str(dtype) not in WEBGPU_STORAGE:
        raise limits.WebGpuLimitError(f"a {dtype} tensor has no WebGPU storage type")
    return WEBGPU_STORAGE[str(dtype)]


# --- kernels: WGSL and its bindings ------------------------------------------------------------

_FUNCTION_HEADER = re.compile(r"//-+\n// Function: (\S+)\n//-+\n")
_STORAGE = re.compile(r"@binding\((\d+)\) var<storage, (read|read_write)> \w+ : array<(\w+)>;")
_PODARGS = re.compile(r"struct PODArgs \{([^}]*)\}")
_WORKGROUP_SIZE = re.compile(r"@workgroup_size\((\d+), (\d+), (\d+)\)")
_WORKGROUP_ARRAY = re.compile(r"var<workgroup> \w+ : array<(\w+), (\d+)>;")
_MISSING = re.compile(r"\b(" + "|".join(limits.MISSING_TYPES) + r")\b")


def _widened_stores(source: str) -> str:
    """``source`` with its ``array<i8>`` buffers (bool and int8 tensors) as ``array<i32>`` and
    every store into them converted (TVM stores bools as they are); loads are converted to
    bool where used already."""
    names = set(re.findall(r"var<storage, \w+> (\w+) : array<i8>", source))
    lines = []
    for line in source.split("\n"):
        target = line.lstrip().split("[", 1)[0]
        if target in names and line.rstrip().endswith(";"):
            depth = 0
            for i, char in enumerate(line):
                depth += {"[": 1, "]": -1}.get(char, 0)
                if depth == 0 and line.startswith(" = ", i):
                    line = f"{line[:i]} = i32({line[i + 3:].rstrip()[:-1]});"
                    break
        lines.append(line)
    return re.sub(r"\bi8\b", "i32", "\n".join(lines))


_INFINITY_BITS = "infinity_bits"


def _fixed_wgsl(source: str) -> str:
    source = _widened_stores(source).replace("> podArgs.packGridDimX)",
                                             ">= podArgs.packGridDimX)")
    # TVM writes infinity as C's ``inff``; WGSL has no literal for it, and Chromium's compiler
    # refuses a constant expression whose value is infinite (``bitcast<f32>(0x7f800000u)``),
    # so the bits are read from a private variable, which no compiler folds.
    if not re.search(r"\binff\b", source):
        return source
    return (f"var<private> {_INFINITY_BITS}: u32 = 0x7f800000u;\n"
            + re.sub(r"\binff\b", f"bitcast<f32>({_INFINITY_BITS})", source))


# TVM prints float32 constants with 7 significant digits, which do not always give the constant
# back (9 do): pi/2's 12-bit parts in the sine reduction, 2^-24 in the noise's uniforms. Each
# such literal is written as the bits of the one constant of the device module it prints.
_FLOAT_LITERAL = re.compile(r"(?<![\w.])(\d\.\d{6}e[+-]\d{2})f\b")
_SCRIPT_FLOAT = re.compile(r"T\.float32\((-?[\d.]+(?:e[+-]?\d+)?)\)")


def exact_float_literals(source: str, device_script: str) -> str:
    """``source`` with each float literal that does not give back the device module's constant
    (``device_script``: its TVMScript, which prints every digit) written as that constant's
    bits."""
    exact: dict[str, set] = {}
    for text in _SCRIPT_FLOAT.findall(device_script):
        value = abs(np.float32(text))
        exact.setdefault(f"{value:.6e}", set()).add(value)

    def literal(match: re.Match) -> str:
        printed = match.group(1)
        values = exact.get(printed, set())
        # Several: constants 7 digits cannot tell apart (tanh's rational coefficients), each
        # within a few ulp of the literal; kept as printed.
        if len(values) != 1 or np.float32(printed) == next(iter(values)):
            return match.group(0)
        bits = int(np.array([next(iter(values))], np.float32).view(np.uint32)[0])
        return f"bitcast<f32>({bits:#010x}u)"

    return _FLOAT_LITERAL.sub(literal, source)


def kernel_sources(device_source: str) -> dict[str, str]:
    """Each kernel's WGSL from the device module's source (its ``// Function:`` sections)."""
    parts = _FUNCTION_HEADER.split(device_source)
    return {parts[i]: _fixed_wgsl(parts[i + 1]).strip() + "\n" for i in range(1, len(parts), 2)}


def describe_kernel(name: str, wgsl: str) -> dict[str, Any]:
    """What a player needs of a kernel's WGSL, checked against WebGPU's default limits: its
    storage bindings (access and element type), scalar types and workgroup shape."""
    bindings = [{"binding": int(b), "access": access, "type": ty}
                for b, access, ty in _STORAGE.findall(wgsl)]
    if [b["binding"] for b in bindings] != list(range(len(bindings))):
        raise ValueError(f"webgpu kernel {name}: storage bindings out of order")
    pod = _PODARGS.search(wgsl)
    fields = [f.strip().split(":") for f in pod.group(1).split(",") if f.strip()] if pod else []
    scalars = [_SCALAR_TYPES[ty.strip()] for fname, ty in fields
               if fname.strip() != "packGridDimX"]
    size = _WORKGROUP_SIZE.search(wgsl)
    workgroup = [int(v) for v in size.groups()] if size else [1, 1, 1]
    shared = sum(int(n) * WORD for _, n in _WORKGROUP_ARRAY.findall(wgsl))
    if (missing := _MISSING.search(wgsl)) is not None:
        raise limits.WebGpuLimitError(f"webgpu kernel {name} uses {missing.group(1)}, a type "
                                      "WGSL has not on every device")
    limits.over_limit(name, len(bindings), limits.STORAGE_BUFFERS)
    limits.over_limit(name, int(np.prod(workgroup)), limits.INVOCATIONS)
    limits.over_limit(name, shared, limits.WORKGROUP_BYTES)
    return {"wgsl": wgsl, "bindings": bindings, "scalars": scalars, "workgroup": workgroup,
            "workgroup_bytes": shared}


# --- host functions: which kernels a PrimFunc launches, and how -------------------------------

@dataclass
class Launch:
    kernel: str
    params: list[int]  # per storage binding: the PrimFunc parameter it binds
    scalars: list[Any]  # PrimExprs, of the PrimFunc's shape variables and lets
    grid: list[Any]


@dataclass
class HostFunction:
    """One host PrimFunc: its lets and kernel launches, in order, with the shape variables of
    its parameters (a generic kernel such as TVM's scan takes its shape from its buffers)."""

    params: list[Any]
    lets: list[tuple[Any, Any]] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)

    def at(self, shapes: list[list[int]]) -> list[Launch]:
        """The launches with every expression evaluated for arguments of ``shapes``."""
        analyzer = tvm.sym.Analyzer()
        for param, shape in zip(self.params, shapes, strict=True):
            for dim, value in zip(param.ty.shape, shape, strict=True):
                if isinstance(dim, tirx.Var):
                    analyzer.bind(dim, tirx.IntImm(dim.ty, value))
        for var, value in self.lets:
            analyzer.bind(var, analyzer.simplify(value))

        def number(expr):
            value = analyzer.simplify(expr) if tvm.ir.is_prim_expr(expr) else expr
            if not isinstance(value, (tirx.IntImm, tirx.FloatImm)):
                raise ValueError(f"a launch argument {expr} is not a number at a static bucket")
            return value.value

        return [Launch(launch.kernel, launch.params, [number(v) for v in launch.scalars],
                       [number(v) for v in launch.grid]) for launch in self.launches]


def _host_function(func: tirx.PrimFunc, name: str) -> HostFunction:
    """What one host PrimFunc does, in order."""
    index = {param: i for i, param in enumerate(func.params)}
    declared: dict = {}  # a declared buffer -> the parameter whose data it views
    host = HostFunction(list(func.params))
    stmts = list(func.body.seq) if isinstance(func.body, tirx.SeqStmt) else [func.body]
    for stmt in stmts:
        if isinstance(stmt, tirx.DeclBuffer):
            (source,) = stmt.data.args
            declared[stmt.buffer] = index[source] if source in index else declared[source]
        elif isinstance(stmt, tirx.Bind):
            host.lets.append((stmt.var, stmt.value))
        elif isinstance(stmt, tirx.Evaluate) and stmt.value.op.name == "tirx.call_ffi_kernel":
            call = stmt.value
            tags = [str(tag) for tag in call.attrs.launch_params]
            args, extents = list(call.args[1:len(call.args) - len(tags)]), call.args[-len(tags):]
            unknown = set(tags) - set(GRID_TAGS) - {"threadIdx.x", "threadIdx.y", "threadIdx.z"}
            if unknown:
                raise ValueError(f"{name} launches with {sorted(unknown)}, which the webgpu "
                                 "plan has no place for")
            buffers = [a for a in args if isinstance(a, tvm.ir.Call)]
            dims = dict(zip(tags, extents))
            host.launches.append(Launch(
                str(call.args[0].value), [declared[b.args[0]] for b in buffers],
                [a for a in args if not isinstance(a, tvm.ir.Call)],
                [dims.get(tag, tirx.IntImm("int32", 1)) for tag in GRID_TAGS]))
        else:
            raise ValueError(f"{name}'s host code has a {type(stmt).__name__}, which the webgpu "
                             "plan cannot express")
    return host


def _uniform(kernel: dict[str, Any], scalars: list[Any], grid_x: int) -> list[int]:
    """A launch's uniform as 32-bit words: its scalars in the kernel's types, then the grid's x
    extent before folding."""
    words = []
    for dtype, value in zip(kernel["scalars"], scalars, strict=True):
        words.append(int(np.array([value], dtype).view(np.uint32)[0]))
    return words + [grid_x]


def _folded(grid: list[int]) -> list[int]:
    """The grid with an x extent over WebGPU's per-dimension limit halved into z (odd rounded
    up), as TVM's JS runtime folds it; the kernel rebuilds x from z."""
    x, y, z = grid
    if z != 1:
        raise ValueError("blockIdx.z is reserved for folding long grids")
    while x > limits.MAX_WORKGROUPS:
        x, z = (x + 1) // 2, z * 2
    return [x, y, z]


# --- Relax functions: buffers and dispatches ----------------------------------------------------

@dataclass
class _FunctionPlan:
    name: str
    slots: list[dict[str, Any]] = field(default_factory=list)
    of: dict = field(default_factory=dict)  # a Relax var -> its slot
    dispatches: list[dict[str, Any]] = field(default_factory=list)

    def slot(self, **entry) -> int:
        self.slots.append({"slot": len(self.slots), **entry})
        return len(self.slots) - 1

    def value(self, expr) -> int:
        if isinstance(expr, relax.Var):
            return self.of[expr]
        if isinstance(expr, tvm.ir.GenericConst):
            array = expr.value.numpy()
            stored = array.astype(_storage_dtype(array.dtype))
            return self.slot(kind="constant", dtype=str(array.dtype), shape=list(array.shape),
                             bytes=max(WORD, stored.nbytes),
                             data=base64.b64encode(stored.tobytes()).decode())
        raise ValueError(f"{self.name}: a {type(expr).__name__} argument has no webgpu buffer")


def _tensor(ty) -> dict[str, Any]:
    return {"shape": [int(d) for d in ty.shape], "dtype": str(ty.dtype),
            "storage": _storage_dtype(ty.dtype)}


def _plan_function(name: str, func: relax.Function, hosts: dict[str, HostFunction],
                   kernels: dict[str, dict]) -> dict[str, Any]:
    plan = _FunctionPlan(name)
    num_input = int(func.attrs["num_input"]) if "num_input" in func.attrs else len(func.params)
    for i, param in enumerate(func.params):
        plan.of[param] = plan.slot(kind="input" if i < num_input else "weight", name=param.name,
                                   **_tensor(param.ty))
    for block in func.body.blocks:
        for binding in block.bindings:
            _plan_binding(plan, binding.var, binding.value, hosts, kernels)
    result = func.body.body
    outputs = ([plan.value(f) for f in result.fields] if isinstance(result, relax.Tuple)
               else plan.of[result])
    outputs = outputs if isinstance(outputs, list) else [outputs]
    types = list(result.ty.fields) if isinstance(result.ty, relax.TupleType) else [result.ty]
    for slot in plan.slots:
        if slot["kind"] == "storage":
            limits.over_limit(f"{name}'s buffer {slot['slot']}", slot["bytes"],
                              limits.BINDING_BYTES)
    return {"num_input": num_input, "slots": plan.slots, "dispatches": plan.dispatches,
            "outputs": [{"slot": s, **_tensor(ty)} for s, ty in zip(outputs, types, strict=True)]}


def _plan_binding(plan: _FunctionPlan, var, value, hosts, kernels) -> None:
    if isinstance(value, relax.Tuple):
        plan.of[var] = [plan.value(f) for f in value.fields]
        return
    if isinstance(value, relax.Var):
        plan.of[var] = plan.of[value]
        return
    if not isinstance(value, relax.Call):
        raise ValueError(f"{plan.name}: a {type(value).__name__} binding has no webgpu form")
    op = value.op
    if isinstance(op, tvm.ir.Op):
        if op.name == "relax.vm.alloc_storage":
            plan.of[var] = plan.slot(kind="storage", bytes=WORD)
        elif op.name == "relax.vm.alloc_tensor":
            storage, offset, shape, dtype = value.args[:4]
            if int(offset.value) != 0:
                raise ValueError(f"{plan.name}: a tensor at offset {offset} of its storage")
            slot = plan.slots[plan.of[storage]]
            need = WORD * int(np.prod([int(d) for d in shape.values]))
            _storage_dtype(str(dtype.value))
            slot["bytes"] = max(slot["bytes"], need)
            plan.of[var] = slot["slot"]
        elif op.name not in ("relax.vm.kill_object", "relax.null_value"):
            raise ValueError(f"{plan.name}: {op.name} has no webgpu form")
        return
    if isinstance(op, relax.ExternFunc):
        symbol = str(op.global_symbol)
        if symbol == "vm.builtin.reshape":
            plan.of[var] = plan.value(value.args[0])
        elif symbol not in _SKIPPED_BUILTINS:
            raise ValueError(f"{plan.name}: {symbol} has no webgpu form")
        return
    # A PrimFunc in destination-passing style: its arguments, outputs last.
    args = [plan.value(arg) for arg in value.args]
    shapes = [[int(d) for d in arg.ty.shape] for arg in value.args]
    for launch in hosts[op.name_hint].at(shapes):
        kernel = kernels[launch.kernel]
        plan.dispatches.append({
            "kernel": launch.kernel, "bindings": [args[p] for p in launch.params],
            "grid": _folded(launch.grid), "uniform": _uniform(kernel, launch.scalars,
                                                              launch.grid[0])})
        for dim in launch.grid[1:]:
            limits.over_limit(launch.kernel, dim, limits.WORKGROUPS)


def host_and_device(lowered: tvm.IRModule, target: tvm.target.Target
                    ) -> tuple[tvm.IRModule, str]:
    """The lowered module's PrimFuncs through TVM's TIR passes: the host functions as
    SplitHostDevice leaves them, and the device module's WGSL."""
    target = target.with_host("llvm")
    prims = tvm.IRModule({gvar: func for gvar, func in lowered.functions_items()
                          if isinstance(func, tirx.PrimFunc)})
    prims = tirx.transform.BindTarget(target)(prims)
    split: dict[str, tvm.IRModule] = {}

    @tvm.instrument.pass_instrument
    class KeepSplit:
        def run_after_pass(self, mod, info):
            if info.name == "tirx.SplitHostDevice":
                split["host"] = mod

    pipeline, _, device_passes = tirx.get_default_tir_pipeline(target)
    with tvm.transform.PassContext(instruments=[KeepSplit()]):
        lowered_tir = pipeline(prims)
    _, devices = split_host_device_mods(lowered_tir)
    build = tvm.get_global_func("target.build.webgpu")
    sources = []
    for device, mod in devices.items():
        mod = device_passes()(mod)
        sources.append(exact_float_literals(build(mod, device).inspect_source(), mod.script()))
    return split["host"], "\n".join(sources)


def build_plan(lowered: tvm.IRModule, target: tvm.target.Target) -> dict[str, Any]:
    """The webgpu library of a lowered module: its kernels and a plan per Relax function,
    checked against WebGPU's default limits (``limits.WebGpuLimitError`` names the kernel and
    the limit)."""
    host, source = host_and_device(lowered, target)
    kernels = {name: describe_kernel(name, wgsl)
               for name, wgsl in kernel_sources(source).items()}
    hosts = {gvar.name_hint: _host_function(func, gvar.name_hint)
             for gvar, func in host.functions_items()
             if isinstance(func, tirx.PrimFunc) and gvar.name_hint not in kernels}
    functions = {gvar.name_hint: _plan_function(gvar.name_hint, func, hosts, kernels)
                 for gvar, func in lowered.functions_items() if isinstance(func, relax.Function)}
    used = {d["kernel"] for f in functions.values() for d in f["dispatches"]}
    return {"format": WEBGPU_PLAN_FORMAT, "version": WEBGPU_PLAN_VERSION, "target": str(target),
            "kernels": {name: kernels[name] for name in sorted(used)},
            "functions": dict(sorted(functions.items()))}
