"""The optional MetaSchedule stage: a database for a library's kernels, applied by lower."""
from __future__ import annotations

import inspect
import sys

import numpy as np
import tvm
from tvm import relax

from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.lower import fused_kernels, lower
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.compile.tune import module_scans_skipped, tune
from kokoro_tvm.runtime.library import Library, Weights

TARGET = {"kind": "llvm", "mcpu": "host", "num-cores": 2}


def _matmul_tanh() -> tvm.IRModule:
    """tanh(x @ w.T), w a weight (a parameter after num_input)."""
    x = relax.Var("x", relax.TensorType((24, 48), "float32"))
    w = relax.Var("linear.weight", relax.TensorType((64, 48), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.op.permute_dims(w)))
            out = bb.emit_output(bb.emit(relax.op.tanh(y)))
        bb.emit_func_output(out)
    return bb.get()


def _scheduled_by(lowered: tvm.IRModule) -> dict[str, str]:
    return {gv.name_hint: f.script(show_meta=False) for gv, f in lowered.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc)}


def test_tuned_kernels_replace_our_schedules_and_compute_the_same(tmp_path):
    mod, target = _matmul_tanh(), make_target(TARGET)
    kernels = fused_kernels(mod, target)
    # Two kernels: the weight's panels (prepared once) and the matmul with tanh fused in.
    assert sorted(gv.name_hint for gv, _ in kernels.functions_items()) == [
        "fused_matmul_tanh", "fused_transpose_weight_panels"]
    figures = tune(mod, target, tmp_path / "db", max_trials=4, trials_per_task=4)
    assert figures["kernels"] == len(kernels.functions_items()) and figures["tuning_records"] > 0
    ours, tuned = lower(mod, target), lower(mod, target, tuning_db=str(tmp_path / "db"))
    assert _scheduled_by(tuned) != _scheduled_by(ours)  # some kernel took the database's schedule
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 48)).astype("float32")
    w = rng.standard_normal((64, 48)).astype("float32")
    for name, lowered in (("ours", ours), ("tuned", tuned)):
        build_library(lowered, target, tmp_path / f"{name}.so")
        (got,) = Library(tmp_path / f"{name}.so", Weights({"linear.weight": w}))("main", {"x": x})
        np.testing.assert_allclose(got, np.tanh(x @ w.T), rtol=1e-5, atol=1e-5, err_msg=name)


def test_skipped_module_scans_give_getmodules_answers():
    """The shortcut tuning takes through ``inspect.getmodule`` answers as Python does: the
    module of a frame in a real file, none for a pseudo file, and is undone after."""
    original, frame = inspect.getmodule, inspect.currentframe()
    code = compile("x = 1", "<string>", "exec")

    def answers():
        return (inspect.getmodule(frame, frame.f_code.co_filename),
                inspect.getmodule(code, "<string>"), inspect.getmodule(np.add))

    with module_scans_skipped():
        assert inspect.getmodule is not original
        shortcut = answers()
    assert inspect.getmodule is original
    assert shortcut == answers() == (sys.modules[__name__], None, np)
