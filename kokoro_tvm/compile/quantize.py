"""int8 convolutions on CPUs with VNNI: the opt-in ``precision: int8`` of a CPU target.

Which convolutions: the generator's residual blocks (``resblocks``, ``noise_res``), most of the
decoder's arithmetic, in decoder buckets up to ``devices.INT8_MAX_FRAMES``; every other op stays
float32 (docs/int8.md: int8 everywhere fails the spectral and word-error
bars, these alone pass them).

How (``quantize_convs``, a Relax pass run before legalization), at each call:
- activations: uint8 per input channel with a zero point, over the channel's range and zero
  (so that padding is exact), packed ``[1, C/4, time, 4]`` and padded;
- weights: the activations' channel scales folded in (``w * scale_x[c]``: a sum over channels
  cannot take a scale per channel after it), then int8 per output channel, symmetric, packed
  ``[O, C/4, K, 4]`` so that four input channels are one 32-bit broadcast (O x C x K work per
  call, against O x C x K x time for the product);
- the product: ``acc[o, t] = sum_{c4, k, i} xq[c4, t + k*d, i] * wq[o, c4, k, i]`` in int32, a
  contraction scheduled like the float32 one with its lanes (16 time steps) times the 4
  channels of a group as one ``vpdpbusd`` (``DOT_INTRIN``), then
  ``y = (acc - sum wq * zero_x) * scale_w[o]`` in its epilogue.
One scale per tensor was the first form: its error grew with the utterance's range, and failed
the log-mel bar past 768 frames (docs/int8.md).
"""
from __future__ import annotations

import re

import tvm
from tvm import relax, te, tirx
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T
from tvm.target import codegen

from kokoro_tvm.compile.schedules.common import round_up
from kokoro_tvm.compile.schedules.contraction import annotation, vec_multiple
from kokoro_tvm.compile.schedules.conv1d import static_float32_ncw
from kokoro_tvm.compile.schedules.cpu import cpu_facts

# Convolutions whose weights come only from parameters matching this are quantized.
QUANTIZED_WEIGHTS = re.compile(r"(^|\.)generator\.(resblocks|noise_res)\.")
GROUP = 4  # input channels per 32-bit lane of vpdpbusd
LANES = 16  # int32 accumulators per 512-bit register
REQUIRED_FEATURES = ("avx512vnni",)
DOT_INTRIN = "kokoro_tvm_vnni_u8s8_16x4"
OPAQUE = 8  # relax's OpPatternKind kOpaque: hand-scheduled kernels are neither fused nor analysed


def missing_features(target: tvm.target.Target) -> list[str]:
    """The CPU features int8 needs that ``target`` lacks."""
    return [f for f in REQUIRED_FEATURES if not codegen.target_has_features([f], target)]


# One vpdpbusd: 16 time steps (lanes) x 4 channels of uint8 activations, contiguous, times the
# 4 int8 weights of those channels broadcast to every lane, added to 16 int32 accumulators.
@T.prim_func(s_tir=True)
def _dot_desc(a: T.Buffer((LANES, GROUP), "uint8", offset_factor=1),
              b: T.Buffer((GROUP,), "int8", offset_factor=1),
              c: T.Buffer((LANES,), "int32", offset_factor=1, scope="local")) -> None:
    with T.sblock("root"):
        T.reads(c[0:LANES], a[0:LANES, 0:GROUP], b[0:GROUP])
        T.writes(c[0:LANES])
        for j in T.serial(0, LANES):
            for i in T.serial(0, GROUP):
                with T.sblock("update"):
                    vj, vi = T.axis.remap("SR", [j, i])
                    c[vj] = c[vj] + T.cast(a[vj, vi], "int32") * T.cast(b[vi], "int32")


# LLVM types vpdpbusd's operands as <64 x i8> (TVM's own VNNI intrinsic passes <16 x i32> and
# fails LLVM's verifier).
@T.prim_func(s_tir=True)
def _dot_vnni(a: T.Buffer((LANES, GROUP), "uint8", offset_factor=1),
              b: T.Buffer((GROUP,), "int8", offset_factor=1),
              c: T.Buffer((LANES,), "int32", offset_factor=1, scope="local")) -> None:
    with T.sblock("root"):
        T.reads(c[0:LANES], a[0:LANES, 0:GROUP], b[0:GROUP])
        T.writes(c[0:LANES])
        activations = T.reinterpret(a.vload([0, 0], "uint8x64"), dtype="int8x64")
        weights = T.reinterpret(
            T.broadcast(T.reinterpret(b.vload([0], "int8x4"), dtype="int32"), LANES),
            dtype="int8x64")
        c[T.ramp(T.int32(0), 1, LANES)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            c.vload([0], dtype="int32x16"), activations, weights, dtype="int32x16")


TensorIntrin.register(DOT_INTRIN, _dot_desc, _dot_vnni, override=True)


def weight_scales(w: te.Tensor, qparams: te.Tensor) -> te.Tensor:
    """Per output channel: ``max |w * scale_x| / 127`` (never 0), the activations' channel
    scales folded into the weights."""
    out, c_in, kernel = w.shape
    rc, rk = te.reduce_axis((0, c_in), "rc"), te.reduce_axis((0, kernel), "rk")
    peak = te.compute((out,), lambda o: te.max(tirx.abs(w[o, rc, rk] * qparams[rc, 0]),
                                               axis=[rc, rk]), name="weight_peak")
    return te.compute((out,), lambda o: tirx.max(peak[o], tirx.const(1e-30, "float32")) / 127.0,
                      name="weight_scale")


def quantize_weights(w: te.Tensor, qparams: te.Tensor, scale: te.Tensor) -> te.Tensor:
    """``w * scale_x`` [O, C, K] in int8, packed [O, C/4, K, 4]."""
    out, c_in, kernel = (int(d) for d in w.shape)
    return te.compute(
        (out, c_in // GROUP, kernel, GROUP),
        lambda o, c4, k, i: tirx.max(tirx.min(tirx.nearbyint(
            w[o, c4 * GROUP + i, k] * qparams[c4 * GROUP + i, 0] / scale[o]), 127.0),
            -127.0).astype("int8"),
        name="weight_int8")


def zero_point_sums(wq: te.Tensor, qparams: te.Tensor) -> te.Tensor:
    """Per output channel, ``sum wq * zero_x``: the zero points' share of a product."""
    out, groups, kernel, group = wq.shape
    rc, rk, ri = (te.reduce_axis((0, n), name) for n, name in
                  ((groups, "rc"), (kernel, "rk"), (group, "ri")))
    return te.compute((out,), lambda o: te.sum(
        wq[o, rc, rk, ri].astype("int32") * qparams[rc * GROUP + ri, 1].astype("int32"),
        axis=[rc, rk, ri]), name="zero_point_sum")


def activation_qparams_kernel(c: int, length: int) -> tirx.PrimFunc:
    """x [1, c, length] -> [c, 2]: each channel's uint8 scale and zero point over its range and
    zero. Hand-scheduled: a thread per channel keeps a vector of minima and maxima (a reduction
    the generic rules would leave scalar), then folds it."""
    blocks, tail = divmod(length, LANES)

    @T.prim_func(s_tir=True, private=True)
    def activation_qparams(x: T.Buffer((1, c, length), "float32"),
                           qparams: T.Buffer((c, 2), "float32")):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True, "op_pattern": OPAQUE})
        # A root block: relax's analyses expect one in every PrimFunc.
        with T.sblock("root"):
            for r in T.parallel(c):
                lows = T.alloc_buffer((LANES,), "float32", scope="local")
                highs = T.alloc_buffer((LANES,), "float32", scope="local")
                for lane in T.vectorized(LANES):
                    lows[lane] = T.float32(0)
                    highs[lane] = T.float32(0)
                for blk in range(blocks):
                    for lane in T.vectorized(LANES):
                        lows[lane] = T.min(lows[lane], x[0, r, blk * LANES + lane])
                        highs[lane] = T.max(highs[lane], x[0, r, blk * LANES + lane])
                for j in range(tail):
                    lows[0] = T.min(lows[0], x[0, r, blocks * LANES + j])
                    highs[0] = T.max(highs[0], x[0, r, blocks * LANES + j])
                for lane in range(1, LANES):
                    lows[0] = T.min(lows[0], lows[lane])
                    highs[0] = T.max(highs[0], highs[lane])
                qparams[r, 0] = T.max(highs[0] - lows[0], T.float32(1e-30)) / T.float32(255)
                qparams[r, 1] = T.nearbyint(-lows[0] / qparams[r, 0])

    return activation_qparams


def _uint8_level(value, scale, zero):
    """``round(value / scale) + zero`` clipped to [0, 255], still float32."""
    return T.max(T.min(T.nearbyint(value / scale) + zero, T.float32(255)), T.float32(0))


def quantize_activations_kernel(c: int, length: int, left: int, span: int) -> tirx.PrimFunc:
    """x [1, c, length] -> uint8 [1, c/4, span, 4]: per channel, ``left`` zero points, then
    ``round(x / scale) + zero`` clipped to [0, 255], then zero points up to ``span``.

    Whole vectors of time are one loop without conditions (a condition inside a vectorized loop
    makes TVM emit scalar code); the edges (padding, the last part vector) are a scalar loop.
    Parallel over the channel groups (32-64 in the generator)."""
    groups = c // GROUP
    blocks = length // LANES
    edge = span - blocks * LANES  # positions outside the vector loop: [0, left) and the rest

    @T.prim_func(s_tir=True, private=True)
    def quantize_activations(x: T.Buffer((1, c, length), "float32"),
                             qparams: T.Buffer((c, 2), "float32"),
                             xq: T.Buffer((1, groups, span, GROUP), "uint8")):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True, "op_pattern": OPAQUE})
        # A root block: relax's analyses expect one in every PrimFunc.
        with T.sblock("root"):
            for g in T.parallel(groups):
                for blk in range(blocks):
                    # Four rows' vectors quantized, then written interleaved in one 64-byte
                    # store (stored row by row, the stride-4 bytes go out one at a time: 6x
                    # slower).
                    vals = T.alloc_buffer((GROUP * LANES,), "int32", scope="local")
                    for i in T.unroll(GROUP):
                        for lane in T.vectorized(LANES):
                            vals[i * LANES + lane] = T.Cast("int32", _uint8_level(
                                x[0, g * GROUP + i, blk * LANES + lane],
                                qparams[g * GROUP + i, 0], qparams[g * GROUP + i, 1]))
                    for j in T.vectorized(GROUP * LANES):
                        xq[0, g, left + blk * LANES + j // GROUP,
                           j % GROUP] = T.Cast("uint8", vals[j % GROUP * LANES + j // GROUP])
                for e, i in T.grid(edge, GROUP):
                    # e -> the positions before the vectors, then those after them
                    xq[0, g, T.if_then_else(e < left, e, e + blocks * LANES), i] = T.Cast(
                        "uint8", T.if_then_else(
                            T.And(e >= left, e + blocks * LANES < left + length),
                            _uint8_level(
                                x[0, g * GROUP + i, T.max(e + blocks * LANES - left, 0)],
                                qparams[g * GROUP + i, 0], qparams[g * GROUP + i, 1]),
                            qparams[g * GROUP + i, 1]))

    return quantize_activations


def conv1d_int8_compute(xq: te.Tensor, wq: te.Tensor, zero_sums: te.Tensor,
                        wscale: te.Tensor, dilation: int, out_len: int,
                        padded: int) -> te.Tensor:
    """The int8 product of ``quantize_activations`` and ``quantize_weights``, dequantized:
    ``padded`` steps (whole register tiles) computed, ``out_len`` kept."""
    n = int(xq.shape[0])
    out, groups, kernel, _ = (int(d) for d in wq.shape)
    rc, rk, ri = (te.reduce_axis((0, e), name) for e, name in
                  ((groups, "rc"), (kernel, "rk"), (GROUP, "ri")))
    acc = te.compute(
        (n, out, padded),
        lambda b, o, t: te.sum(xq[b, rc, t + rk * dilation, ri].astype("int32")
                               * wq[o, rc, rk, ri].astype("int32"), axis=[rc, rk, ri]),
        name="conv1d_int8", attrs=annotation(row_axis=1, vec_axis=2, dot=DOT_INTRIN))
    return te.compute(
        (n, out, out_len),
        lambda b, o, t: (acc[b, o, t] - zero_sums[o]).astype("float32") * wscale[o],
        name="dequantize")


def quantizable(call: relax.Call) -> bool:
    """Whether a conv1d is one the int8 product covers: static float32 NCW, batch 1 (the
    activations' channel scales are folded into the weights), no groups or stride, input
    channels a multiple of 4."""
    x, _ = call.args
    return (static_float32_ncw(call, kernel_layout="OIW") and int(call.attrs.groups) == 1
            and int(call.attrs.strides[0]) == 1 and int(x.ty.shape[0]) == 1
            and int(x.ty.shape[1]) % GROUP == 0)


@relax.expr_functor.mutator
class _Quantizer(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, target: tvm.target.Target):
        super().__init__(mod)
        self.mod_, self.target = mod, target
        self.kernels: dict[str, relax.GlobalVar] = {}

    def transform(self) -> tvm.IRModule:
        for gvar, func in self.mod_.functions_items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gvar, self.visit_expr(func))
        return self.builder_.get()

    def _roots(self, expr: relax.Expr) -> set[str]:
        """Names of the function parameters ``expr`` is computed from."""
        names, stack = set(), [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, relax.Var):
                bound = self.lookup_binding(e)
                if bound is None:
                    names.add(e.name)
                else:
                    stack.append(bound)
            elif isinstance(e, relax.Call):
                stack += list(e.args)
            elif isinstance(e, relax.Tuple):
                stack += list(e.fields)
            elif isinstance(e, relax.TupleGetItem):
                stack.append(e.tuple_value)
        return names

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv1d"):
            return call
        roots = self._roots(call.args[1])
        if not roots or not all(QUANTIZED_WEIGHTS.search(r) for r in roots):
            return call
        if not quantizable(call):
            return call
        return self._int8(call)

    def _call(self, kernel: tirx.PrimFunc, name: str, args: list, shape, dtype: str):
        """``call_tir`` of a hand-scheduled kernel, one copy per name (the shapes it holds)."""
        gvar = self.kernels.get(name)
        if gvar is None:
            gvar = self.kernels[name] = self.builder_.add_func(kernel, name)
        return self.builder_.emit(relax.call_tir(gvar, args, relax.TensorType(shape, dtype)))

    def _int8(self, call: relax.Call) -> relax.Expr:
        bb = self.builder_
        x, w = call.args
        length = int(x.ty.shape[2])
        out, _, kernel = (int(d) for d in w.ty.shape)
        dilation = int(call.attrs.dilation[0])
        left, right = int(call.attrs.padding[0]), int(call.attrs.padding[1])
        out_len = length + left + right - dilation * (kernel - 1)
        multiple = vec_multiple(cpu_facts(self.target), out, out_len)
        padded = round_up(out_len, multiple)
        span = padded + dilation * (kernel - 1)
        c = int(x.ty.shape[1])
        shape = f"c{c}_t{length}"
        qparams = self._call(activation_qparams_kernel(c, length), f"activation_qparams_{shape}",
                             [x], (c, 2), "float32")
        xq = self._call(quantize_activations_kernel(c, length, left, span),
                        f"quantize_activations_{shape}_l{left}_s{span}", [x, qparams],
                        (1, c // GROUP, span, GROUP), "uint8")
        wscale = bb.emit_te(weight_scales, w, qparams, primfunc_name_hint="weight_scales")
        wq = bb.emit_te(quantize_weights, w, qparams, wscale,
                        primfunc_name_hint="quantize_weights")
        zero_sums = bb.emit_te(zero_point_sums, wq, qparams, primfunc_name_hint="zero_point_sums")
        return bb.call_te(conv1d_int8_compute, xq, wq, zero_sums, wscale, dilation, out_len,
                          padded, primfunc_name_hint="conv1d_int8")


def quantize_convs(target: tvm.target.Target) -> tvm.transform.Pass:
    """The pass replacing the selected float32 convolutions by their int8 form."""
    missing = missing_features(target)
    if missing:
        raise ValueError(f"precision int8 needs CPU features {', '.join(missing)}, which target "
                         f"{target} lacks: use precision float32 for it")

    @tvm.transform.module_pass(opt_level=0, name="QuantizeConvs")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return _Quantizer(mod, target).transform()

    return _pass
