"""Our CPU schedules (kokoro_tvm.compile.schedules) against TVM's unscheduled lowering.

Each case builds a one-op (or small fused) Relax function, lowers it twice with
``lower(schedule=True)`` and ``lower(schedule=False)`` (TVM's own legalization, naive loops),
runs both on the same random inputs and compares: max abs error <= 1e-5 relative to the
output's scale (float32 sums in a different order). Small shapes, chosen to hit ragged tiles,
strides, dilations, groups and polyphase edge cases; on the host CPU and on a generic x86-64
(SSE, 128-bit) target, which gets other tiles.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir, te

from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.schedules.common import vectorize_innermost
from kokoro_tvm.compile.schedules.contraction import register_tile, vec_multiple
from kokoro_tvm.compile.schedules.cpu import CpuFacts, cpu_facts
from kokoro_tvm.compile.schedules.elementwise import PARALLEL_CHUNKS
from kokoro_tvm.compile.schedules.reduction import LONG_REDUCTION
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.runtime.library import Library, Weights

TOLERANCE = 1e-5
TARGETS = {"host": {"kind": "llvm", "mcpu": "host", "num-cores": 2},
           "sse": {"kind": "llvm", "mcpu": "x86-64", "num-cores": 2}}

pytestmark = pytest.mark.filterwarnings("ignore")


def _function(shapes: dict[str, tuple], body) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(s, "float32")) for n, s in shapes.items()]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(body(*params)))
        bb.emit_func_output(out)
    return bb.get()


def _run(mod, target, inputs, schedule: bool, tmp_path
         ) -> tuple[np.ndarray, tvm.IRModule]:
    """The module's output on ``inputs``, with or without our schedules, and the lowered module."""
    lowered = lower(mod, target, schedule=schedule)
    so = tmp_path / f"{'s' if schedule else 'u'}.so"
    build_library(lowered, target, so)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(so)), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy(), lowered


def _check(mod, shapes, tmp_path, target_name="host", seed=0):
    target = make_target(TARGETS[target_name])
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(s).astype("float32") for s in shapes.values()]
    got, lowered = _run(mod, target, inputs, True, tmp_path)
    want, _ = _run(mod, target, inputs, False, tmp_path)
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1e-30)
    assert float(np.abs(got - want).max()) / scale <= TOLERANCE
    return lowered


def _scheduled(lowered: tvm.IRModule) -> list[str]:
    return [gv.name_hint for gv, f in lowered.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs.get("tirx.is_scheduled")]


# (in channels, out channels, length, kernel, stride, padding, dilation, groups)
CONV1D = [
    (8, 16, 37, 3, 1, (1, 1), 1, 1),
    (16, 8, 50, 11, 1, (15, 15), 3, 1),  # dilated, like the resblocks
    (6, 5, 33, 7, 1, (9, 9), 3, 1),  # prime rows
    (3, 12, 61, 12, 6, (3, 3), 1, 1),  # strided, like noise_convs
    (1, 11, 80, 20, 5, (0, 0), 1, 1),  # the STFT
    (8, 8, 20, 3, 2, (1, 1), 1, 8),  # depthwise, strided
    (8, 4, 64, 1, 1, (0, 0), 1, 2),  # grouped 1x1
    # Enough vec tiles for the input to be padded per tile (contraction.PARALLEL_CHUNKS):
    (8, 16, 9001, 11, 1, (25, 25), 5, 1),  # a generator resblock conv, fewer channels
    (4, 8, 20001, 3, 2, (1, 1), 1, 1),  # strided
    (8, 8, 9001, 3, 1, (1, 1), 1, 2),  # grouped
]


@pytest.mark.parametrize("case", CONV1D, ids=str)
@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_conv1d_with_bias_and_activation(case, target_name, tmp_path):
    c_in, c_out, length, kernel, stride, padding, dilation, groups = case
    shapes = {"x": (1, c_in, length), "w": (c_out, c_in // groups, kernel), "b": (c_out,)}

    def body(x, w, b):
        y = relax.op.nn.conv1d(x, w, strides=stride, padding=padding, dilation=dilation,
                               groups=groups)
        return relax.op.nn.leakyrelu(relax.op.add(y, relax.op.reshape(b, (1, c_out, 1))), 0.1)

    lowered = _check(_function(shapes, body), shapes, tmp_path, target_name)
    assert any("conv1d" in n for n in _scheduled(lowered))
    (conv,) = [f for gv, f in lowered.functions_items() if "conv1d" in gv.name_hint]
    facts = cpu_facts(make_target(TARGETS[target_name]))
    out_len = (length + sum(padding) - dilation * (kernel - 1) - 1) // stride + 1
    tiles = -(-out_len // vec_multiple(facts, c_out, out_len))
    assert _padded_per_tile(conv) == (tiles >= PARALLEL_CHUNKS)


def _padded_per_tile(func: tvm.tirx.PrimFunc) -> bool:
    """Whether the conv's padded input is computed inside the contraction's tile loop."""
    sch = s_tir.Schedule(func)
    xpad, conv = sch.get_sblock("xpad"), sch.get_sblock("conv1d_update")
    return sch.get(sch.get_loops(xpad)[0]).same_as(sch.get(sch.get_loops(conv)[0]))


# (in channels, out channels, length, kernel, stride, padding, output padding, groups)
CONV_TRANSPOSE = [
    (16, 8, 9, 20, 10, (5, 5), 0, 1),  # Kokoro's first upsampling, scaled down
    (8, 4, 13, 12, 6, (3, 3), 0, 1),  # the second
    (11, 1, 17, 20, 5, (0, 0), 0, 1),  # the inverse STFT
    (8, 8, 10, 3, 2, (1, 1), 1, 8),  # AdainResBlk1d's depthwise pool
    (6, 4, 7, 5, 3, (1, 2), 2, 2),  # K not a multiple of the stride, grouped, asymmetric
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE, ids=str)
@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_conv1d_transpose_polyphase(case, target_name, tmp_path):
    c_in, c_out, length, kernel, stride, padding, output_padding, groups = case
    shapes = {"x": (1, c_in, length), "w": (c_in, c_out // groups, kernel)}

    def body(x, w):
        return relax.op.nn.conv1d_transpose(x, w, strides=stride, padding=padding,
                                            output_padding=output_padding, groups=groups)

    lowered = _check(_function(shapes, body), shapes, tmp_path, target_name)
    assert any("conv1d_transpose" in n for n in _scheduled(lowered))
    # No zero-stuffed input: TVM's lowering has a data_dilate block, ours none.
    assert "data_dilate" not in lowered.script(show_meta=False)


MATMUL = [
    ((7, 24), (24, 48)),  # rows not a multiple of the tile
    ((1, 16), (16, 40)),  # GEMV (an LSTM step), ragged columns
    ((2, 5, 8), (8, 32)),  # batched activations, shared weight (a Linear)
    ((3, 6, 8), (3, 8, 16)),  # batched both (attention)
]


@pytest.mark.parametrize("shapes_ab", MATMUL, ids=str)
@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_matmul(shapes_ab, target_name, tmp_path):
    shapes = {"a": shapes_ab[0], "b": shapes_ab[1]}
    lowered = _check(_function(shapes, lambda a, b: relax.op.matmul(a, b)), shapes, tmp_path,
                     target_name)
    assert any("matmul" in n for n in _scheduled(lowered))


@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_elementwise_and_reductions(target_name, tmp_path):
    """An InstanceNorm + Snake-like chain: reductions and elementwise blocks, parallel and
    vectorized; a bool intermediate (which cannot be vectorized) on the way."""
    shapes = {"x": (1, 48, 128), "alpha": (1, 48, 1)}

    def body(x, alpha):
        mean = relax.op.mean(x, axis=[2], keepdims=True)
        centred = relax.op.subtract(x, mean)
        var = relax.op.mean(relax.op.multiply(centred, centred), axis=[2], keepdims=True)
        y = relax.op.divide(centred, relax.op.sqrt(relax.op.add(var, relax.const(1e-5))))
        s = relax.op.sin(relax.op.multiply(alpha, y))
        snake = relax.op.add(y, relax.op.multiply(s, s))
        return relax.op.where(relax.op.greater(snake, relax.const(0.5)), snake,
                              relax.op.negative(snake))

    lowered = _check(_function(shapes, body), shapes, tmp_path, target_name)
    script = lowered.script(show_meta=False)
    assert "T.parallel" in script and "T.vectorized" in script


def test_cpu_facts_follow_the_target():
    facts = {m: cpu_facts(tvm.target.Target({"kind": "llvm", "mcpu": m}))
             for m in ("x86-64", "haswell", "skylake-avx512", "znver4")}
    assert [facts[m].vector_bits for m in facts] == [128, 256, 512, 512]
    assert facts["znver4"].registers == 32 and facts["haswell"].registers == 16


@pytest.mark.parametrize("registers", [16, 32])
@pytest.mark.parametrize("rows", [1, 7, 11, 64, 128, 1024])
def test_register_tile_fits_and_divides(registers, rows):
    facts = CpuFacts(vector_bits=256, registers=registers)
    r, m = register_tile(facts, rows, vec_extent=1000)
    assert rows % r == 0
    assert r * m + m + 1 <= registers


@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_tanh_gelu(target_name, tmp_path):
    """ALBERT's GELU: tanh and a cube, legalized without libm calls (fast_tanh, products)."""
    shapes = {"x": (2, 7, 64)}

    def body(x):
        cube = relax.op.power(x, relax.const(3.0))
        inner = relax.op.multiply(relax.const(0.7978845608), relax.op.add(
            x, relax.op.multiply(relax.const(0.044715), cube)))
        return relax.op.multiply(relax.op.multiply(relax.const(0.5), x),
                                 relax.op.add(relax.const(1.0), relax.op.tanh(inner)))

    x = np.linspace(-12, 12, 2 * 7 * 64, dtype="float32").reshape(shapes["x"])
    target = make_target(TARGETS[target_name])
    got, lowered = _run(_function(shapes, body), target, [x], True, tmp_path)
    want, _ = _run(_function(shapes, body), target, [x], False, tmp_path)
    assert float(np.abs(got - want).max()) / float(np.abs(want).max()) <= TOLERANCE
    assert "powf" not in lowered.script(show_meta=False)


@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_snake_and_phase_sin_cos(target_name, tmp_path):
    """Snake (x + sin(a x)^2 / a) on activations and sin/cos of sine-generator phases up to 1e6,
    legalized without libm calls, against TVM's libm lowering: max abs error <= 1e-6 (both
    round to float32 within an ulp of the exact value)."""
    shapes = {"x": (3, 16, 1001), "phase": (3, 16, 1001)}

    def body(x, phase):
        alpha = relax.const(1.7)
        snake = relax.op.add(x, relax.op.divide(
            relax.op.power(relax.op.sin(relax.op.multiply(alpha, x)), relax.const(2.0)), alpha))
        return relax.op.add(snake, relax.op.multiply(relax.op.sin(phase), relax.op.cos(phase)))

    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shapes["x"]) * 4).astype("float32")
    phase = rng.uniform(-1e6, 1e6, shapes["phase"]).astype("float32")
    target = make_target(TARGETS[target_name])
    got, lowered = _run(_function(shapes, body), target, [x, phase], True, tmp_path)
    want, _ = _run(_function(shapes, body), target, [x, phase], False, tmp_path)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    script = lowered.script(show_meta=False)
    assert "T.sin(" not in script and "T.cos(" not in script


# Rows shorter than the partial results, with a tail, and without (as ALBERT's 64 tokens), and
# long enough for a vector loop with a scalar rest (37 on SSE's 4 lanes, 149 on the host's).
@pytest.mark.parametrize("length", [8, 37, 64, 149])
@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_softmax_as_row_statistics(length, target_name, tmp_path):
    """ALBERT's attention: scores plus a mask (float32's most negative on padded keys), softmax
    over the keys, the padded queries' rows replaced after it. One parallel kernel, row
    statistics in vector lanes, exp without libm, against TVM's own lowering: relative error
    <= 1e-5."""
    shapes = {"scores": (1, 3, length, length), "mask": (1, 1, 1, length),
              "masked": (1, 3, length, length)}

    def body(scores, mask, masked):
        weights = relax.op.nn.softmax(relax.op.add(scores, mask), axis=-1)
        return relax.op.where(relax.op.greater(mask, relax.const(-1.0)), weights, masked)

    rng = np.random.default_rng(0)
    scores = (rng.standard_normal(shapes["scores"]) * 4).astype("float32")
    mask = np.zeros(shapes["mask"], "float32")
    mask[..., length - length // 4:] = np.finfo(np.float32).min
    masked = rng.standard_normal(shapes["masked"]).astype("float32")
    target = make_target(TARGETS[target_name])
    mod = _function(shapes, body)
    got, lowered = _run(mod, target, [scores, mask, masked], True, tmp_path)
    want, _ = _run(mod, target, [scores, mask, masked], False, tmp_path)
    assert float(np.abs(got - want).max()) <= TOLERANCE  # softmax's scale is 1
    kernels = {gv.name_hint: f for gv, f in lowered.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc)}
    (name,) = [n for n in kernels if "softmax" in n]
    script = kernels[name].script()
    assert "T.exp(" not in script
    assert "T.parallel" in script and "T.vectorized" in script
    assert "row_statistic" in script
    # Every statistic inside the one parallel row loop, each before what reads it (a producer
    # placed after its consumer reads memory never written: wrong at random).
    assert len(re.findall(r"^    for ", script, re.MULTILINE)) == 1
    assert script.index('sblock("peak_total")') < script.index('sblock("exps') < script.index(
        'sblock("inverse")')


def test_softmax_over_another_axis_keeps_tvms_lowering(tmp_path):
    shapes = {"x": (4, 9, 5)}
    lowered = _check(_function(shapes, lambda x: relax.op.nn.softmax(x, axis=1)), shapes,
                     tmp_path)
    assert "row_statistic" not in lowered.script(show_meta=False)


def test_weight_transforms_are_lifted(tmp_path):
    """A Linear used twice (ALBERT shares its layers): transpose and panel packing of the weight
    move into main_transform_params, which takes the weight by name and runs once per library;
    main keeps only the contraction."""
    rows, depth, cols = 5, 24, 40
    x_var = relax.Var("x", relax.TensorType((rows, depth), "float32"))
    w_var = relax.Var("linear.weight", relax.TensorType((cols, depth), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x_var, w_var], attrs={"num_input": 1}):
        with bb.dataflow():
            first = bb.emit(relax.op.matmul(x_var, relax.op.permute_dims(w_var)))
            second = bb.emit(relax.op.matmul(x_var, relax.op.permute_dims(w_var)))
            out = bb.emit_output(bb.emit(relax.op.add(first, second)))
        bb.emit_func_output(out)
    target = make_target(TARGETS["host"])
    lowered = lower(bb.get(), target)
    names = {gv.name_hint for gv in lowered.get_global_vars()}
    assert "main_transform_params" in names
    transform = lowered["main_transform_params"]
    assert [p.name for p in transform.params] == ["linear.weight"]
    assert "weight_panels" not in lowered["main"].script(show_meta=False)
    so = tmp_path / "lifted.so"
    build_library(lowered, target, so)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, depth)).astype("float32")
    w = rng.standard_normal((cols, depth)).astype("float32")
    library = Library(so, Weights({"linear.weight": w}))
    (got,) = library("main", {"x": x})
    np.testing.assert_allclose(got, 2 * x @ w.T, rtol=1e-5, atol=1e-4)
    assert len(library.prepared("main")) == 1  # one prepared weight for both uses


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_long_sums_accumulate_in_float64(tmp_path, op):
    """schedules/reduction.py: a sum or mean over 60,000 samples is float32-exact (float64
    accumulation), where TVM's sequential float32 sum is measurably off (why the rule exists);
    one over fewer than LONG_REDUCTION elements keeps TVM's legalization."""
    shapes = {"x": (1, 4, 60_000)}
    x = (1.0 + np.random.default_rng(0).random(shapes["x"])).astype("float32")
    want = getattr(x.astype(np.float64), op)(axis=-1, keepdims=True)
    reduce = getattr(relax.op, op)
    target = make_target(TARGETS["host"])
    errors = {}
    for schedule in (True, False):
        got, _ = _run(_function(shapes, lambda v: reduce(v, axis=[2], keepdims=True)),
                      target, [x], schedule, tmp_path)
        errors[schedule] = float(np.abs(got - want).max() / np.abs(want).max())
    assert errors[True] <= 1e-7 < errors[False] / 10, errors
    short = _function({"x": (4, LONG_REDUCTION - 1)}, lambda v: reduce(v, axis=[1]))
    assert "float64" not in lower(short, target).script()


def _one_block(length: int, padded: bool) -> tvm.tirx.PrimFunc:
    """y[r, t] = 2 x[r, t] + 1 over 3 rows, or (``padded``) x shifted by one with a zero edge."""
    x = te.placeholder((3, length), "float32", name="x")
    if padded:
        y = te.compute((3, length), lambda r, t: tvm.tirx.if_then_else(
            t >= 1, x[r, tvm.tirx.max(t - 1, 0)], tvm.tirx.const(0.0, "float32")), name="y")
    else:
        y = te.compute((3, length), lambda r, t: x[r, t] * 2.0 + 1.0, name="y")
    return te.create_prim_func([x, y])


# (length, padded): what the innermost loop becomes with 16 lanes.
@pytest.mark.parametrize("length, padded, vector_loops, rest", [
    (1001, False, 1, (992, 1001)),  # 62 chunks, then 9 scalar steps
    (1008, False, 1, None),  # whole chunks
    (9, False, 1, None),  # one vector of 9
    (38, False, 0, None),  # too few chunks for a rest loop: scalar
    (1001, True, 0, None),  # a vector if_then_else would run lane by lane: scalar
])
def test_vectorize_innermost_splits_off_a_scalar_rest(length, padded, vector_loops, rest):
    sch = s_tir.Schedule(_one_block(length, padded))
    left = vectorize_innermost(sch, sch.get_sblock("y"), lanes=16)
    script = sch.mod.script()
    assert script.count("T.vectorized(") == vector_loops
    if rest is not None:
        assert left is None and f"range({rest[0]}, {rest[1]})" in script
    elif vector_loops == 0:
        assert left is not None and sch.get(left).extent == length  # the loop, untouched
    lib = tvm.compile(sch.mod, target=make_target(TARGETS["host"]))
    x = np.random.default_rng(0).standard_normal((3, length)).astype("float32")
    out = tvm.runtime.tensor(np.zeros_like(x))
    lib["main"](tvm.runtime.tensor(x), out)
    want = np.pad(x[:, :-1], ((0, 0), (1, 0))) if padded else x * 2 + 1
    np.testing.assert_array_equal(out.numpy(), want)

