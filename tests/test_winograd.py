"""Winograd conv1d (compile/schedules/winograd.py): its transform matrices, which convolutions
take it, and whole convolutions against TVM's unscheduled lowering (same tolerance as
test_schedules: 1e-5 of the output's scale; Winograd's own error is about 3e-6)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from test_branch_joins import _calls
from test_schedules import TARGETS, _check, _function, _scheduled
from tvm import relax, s_tir

from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.schedules import winograd
from kokoro_tvm.compile.schedules.common import root_blocks
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.runtime.library import Library, Weights

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.mark.parametrize("form", sorted(set(winograd.FORMS.values()), key=str), ids=str)
def test_transforms_compute_the_correlation_exactly(form):
    """y[j] = sum_k x[j + k] g[k] for every window, in float64, through at, g and bt."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, form.alpha))
    g = rng.standard_normal((100, form.taps))
    want = np.stack([(x[:, j:j + form.taps] * g).sum(-1) for j in range(form.outputs)], axis=-1)
    got = ((g @ form.g.T) * (x @ form.bt.T)) @ form.at.T
    assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()


def _conv_call(c_in, c_out, kernel, stride=1, dilation=1, groups=1, length=2048) -> relax.Call:
    x = relax.Var("x", relax.TensorType((1, c_in, length), "float32"))
    w = relax.Var("w", relax.TensorType((c_out, c_in // groups, kernel), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        call = bb.normalize(relax.op.nn.conv1d(x, w, strides=stride, dilation=dilation,
                                               groups=groups))
        bb.emit_func_output(bb.emit(call))
    return call


@pytest.mark.parametrize(("args", "taken"), [
    ((128, 128, 11), True),  # a generator resblock
    ((256, 256, 7, 1, 3), True),  # dilated
    ((128, 128, 3), True),  # a resblock's short kernel, as F(6, 3)
    ((1024, 1024, 3), True),  # a decode block at 2048 frames
    ((512, 512, 3), True),  # f0n's
    ((1024, 1024, 3, 1, 1, 1, 2 + winograd.MIN_STEPS), True),  # long enough
    ((1024, 1024, 3, 1, 1, 1, 1 + winograd.MIN_STEPS), False),  # one step short
    ((256, 256, 11, 1, 1, 1, 640), False),  # the first generator stage at 32 frames
    ((512, 512, 5), False),  # the text encoder's CNN: 5 taps gain too little
    ((64, 22, 7), False),  # conv_post: few output channels
    ((22, 128, 12, 6), False),  # noise_convs: strided
    ((128, 128, 7, 1, 1, 2), False),  # grouped
])
def test_which_convolutions_take_winograd(args, taken):
    assert winograd.covers(_conv_call(*args)) is taken


@pytest.fixture
def short_convolutions_too(monkeypatch):
    """Winograd for every length: the cases below are short, to keep them quick (which lengths
    take it in a build is test_which_convolutions_take_winograd's)."""
    monkeypatch.setattr(winograd, "MIN_STEPS", 1)


# (in channels, out channels, length, kernel, padding, dilation)
WINOGRAD = [
    (64, 64, 300, 7, (3, 3), 1),
    (72, 64, 257, 11, (15, 15), 3),  # dilated, channels not a tile multiple
    (64, 80, 100, 9, (1, 6), 2),  # taps not a whole chunk, asymmetric padding
    (64, 64, 9001, 11, (25, 25), 5),  # enough tiles for the input transform per tile
    (64, 64, 301, 3, (1, 1), 1),  # F(6, 3)
    (80, 64, 9001, 3, (5, 5), 5),  # F(6, 3), dilated, many tiles
]


@pytest.mark.parametrize("case", WINOGRAD, ids=str)
@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_winograd_conv1d_with_bias_and_activation(case, target_name, tmp_path,
                                                   short_convolutions_too):
    c_in, c_out, length, kernel, padding, dilation = case
    shapes = {"x": (1, c_in, length), "w": (c_out, c_in, kernel), "b": (c_out,)}

    def body(x, w, b):
        y = relax.op.nn.conv1d(x, w, padding=padding, dilation=dilation)
        return relax.op.nn.leakyrelu(relax.op.add(y, relax.op.reshape(b, (1, c_out, 1))), 0.1)

    lowered = _check(_function(shapes, body), shapes, tmp_path, target_name)
    assert "conv1d_winograd" in _scheduled(lowered)
    sch = s_tir.Schedule(lowered["conv1d_winograd"])
    # The output transform runs inside the contraction's register tile.
    update, transform = (sch.get_sblock(n) for n in ("winograd_update",
                                                        "output_transform_update"))
    tile = [sch.get(loop) for loop in sch.get_loops(update)]
    alpha = winograd.FORMS[kernel].alpha
    points = next(i for i, loop in enumerate(tile) if int(loop.extent) == alpha)
    inner = [sch.get(loop) for loop in sch.get_loops(transform)]
    assert all(any(loop.same_as(other) for other in inner) for loop in tile[:points])
    # The gather before it and the interleave after it (with the bias and the activation,
    # one pass) are calls of their own, so that their full-length buffers are activations
    # in the function's memory plan, not workspace inside the kernel.
    assert [n for n in _calls(lowered["main"]) if "winograd" in n] == [
        "conv1d_winograd_planes", "conv1d_winograd",
        "fused_conv1d_winograd_interleave_reshape_add_leaky_relu"]
    names = [sch.get(b).name_hint for b in root_blocks(sch)]
    assert "planes" not in names and "interleave" not in names


def test_winograd_buffers_are_planned_activations(short_convolutions_too):
    """No full-length buffer inside the Winograd kernel: TVM takes such a buffer from a
    per-thread workspace pool that keeps it at its largest size for the life of the process.
    The contraction allocates only the points' weights and its per-tile input transform,
    whatever the length (both lengths have enough vec tiles for the input transform per tile:
    elementwise.PARALLEL_CHUNKS)."""
    sizes = {}
    for length in (40000, 80000):
        shapes = {"x": (1, 64, length), "w": (64, 64, 11)}
        lowered = lower(_function(shapes, lambda x, w: relax.op.nn.conv1d(x, w, padding=5)),
                        make_target(TARGETS["host"]))
        compact = tvm.transform.Sequential([
            tvm.s_tir.transform.ConvertBlocksToOpaque(),
            tvm.s_tir.transform.CompactBufferAllocation()])(
            tvm.IRModule({"conv": lowered["conv1d_winograd"]}))["conv"]
        sizes[length] = _allocated(compact)
        assert set(sizes[length]) <= {"winograd_weights", "input_transform", "winograd_local"}
    assert sizes[40000] == sizes[80000]


def _allocated(func) -> dict[str, int]:
    """Elements of each buffer a PrimFunc allocates (from its script: TVM's statement visitor
    has no Python binding)."""
    found = re.findall(r"(\w+) = T\.sblock_alloc_buffer\(\(([^)]*)\)", func.script())
    return {name: int(np.prod([int(d) for d in re.findall(r"T\.int64\((\d+)\)", shape)]))
            for name, shape in found}


def test_winograd_weights_are_computed_in_the_call(tmp_path, short_convolutions_too):
    """The points' weights (G @ each chunk of taps) are computed in each call from the kernel,
    not by the library's weight transform: a speaking process keeps the kernel as stored, not
    the 1.75-2.7 times as large transformed weights."""
    c, length, kernel = 64, 200, 7
    x_var = relax.Var("x", relax.TensorType((1, c, length), "float32"))
    w_var = relax.Var("conv.weight", relax.TensorType((c, c, kernel), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x_var, w_var], attrs={"num_input": 1}):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.conv1d(x_var, w_var, padding=3)))
        bb.emit_func_output(out)
    target = make_target(TARGETS["host"])
    lowered = lower(bb.get(), target)
    assert "winograd_weights" not in lowered["main_transform_params"].script(show_meta=False)
    sch = s_tir.Schedule(lowered["conv1d_winograd"])
    assert "winograd_weights" in [sch.get(b).name_hint for b in root_blocks(sch)]
    so = tmp_path / "in_call.so"
    build_library(lowered, target, so)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, length)).astype("float32")
    w = (rng.standard_normal((c, c, kernel)) / np.sqrt(c * kernel)).astype("float32")
    library = Library(so, Weights({"conv.weight": w}))
    (got,) = library("main", {"x": x})
    assert [t.numpy().shape for t in library.prepared("main")] == [w.shape]
    xpad = np.pad(x[0], ((0, 0), (3, 3)))
    want = np.einsum("ock,ckt->ot", w,
                     np.stack([xpad[:, k:k + length] for k in range(kernel)], axis=1))
    assert np.abs(got[0] - want).max() <= 1e-5 * np.abs(want).max()
