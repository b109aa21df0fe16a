"""compile/branch_joins.py: which joins are kept out of fusion, and what fusion then does."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.script import relax as R

from kokoro_tvm.compile.branch_joins import OPAQUE, branch_joins, separate_branch_joins


@tvm.script.ir_module
class TwoBranches:
    """``join`` adds two branches, each a matmul and an elementwise op; ``residual`` adds a
    matmul's result to an input that its own branch also reads (not a join of two chains)."""

    @R.function
    def main(x: R.Tensor((8, 8), "float32"), w1: R.Tensor((8, 8), "float32"),
             w2: R.Tensor((8, 8), "float32")):
        with R.dataflow():
            first = R.add(R.matmul(x, w1), x)
            second = R.matmul(x, w2)
            join = R.add(first, second)
            activated = R.exp(join)
            shared = R.matmul(activated, w1)
            residual = R.add(R.matmul(R.nn.relu(shared), w2), shared)
            R.output(residual)
        return residual


@tvm.script.ir_module
class InjectiveLinks:
    """Each branch a matmul whose result is transposed (injective, as a Winograd
    convolution's interleave after its contraction) before they are added."""

    @R.function
    def main(x: R.Tensor((8, 8), "float32"), w1: R.Tensor((8, 8), "float32"),
             w2: R.Tensor((8, 8), "float32")):
        with R.dataflow():
            first = R.permute_dims(R.matmul(x, w1))
            second = R.permute_dims(R.matmul(x, w2))
            join = R.add(first, second)
            R.output(join)
        return join


def _legalized(mod: tvm.IRModule) -> tvm.IRModule:
    return tvm.transform.Sequential([relax.transform.LegalizeOps(),
                                     relax.transform.AnnotateTIROpPattern()])(mod)


def _calls(func: relax.Function) -> list[str]:
    """What ``func`` calls, in order: fused functions and PrimFuncs by name (a lowered
    function's packed calls left out)."""
    names = []
    for block in func.body.blocks:
        for binding in block.bindings:
            call = binding.value
            if isinstance(call, relax.Call) and isinstance(call.op, relax.GlobalVar):
                names.append(call.op.name_hint)
            elif (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)
                  and call.op.name == "relax.call_tir"):
                names.append(call.args[0].name_hint)
    return names


def test_a_join_of_two_contraction_chains_is_found_and_a_residual_is_not():
    mod = _legalized(TwoBranches)
    joins = branch_joins(mod, mod["main"])
    assert len(joins) == 1
    (join,) = joins
    # The join's operands are the two branches: an add (of the first matmul) and a matmul.
    operand_producers = {b.var: b.value.args[0].name_hint for block in mod["main"].body.blocks
                         for b in block.bindings if isinstance(b.value, relax.Call)
                         and b.value.op.name == "relax.call_tir"}
    assert sorted(operand_producers[a] for a in join.args[1].fields) == ["add", "matmul"]


def test_a_chain_through_an_injective_op_counts():
    mod = _legalized(InjectiveLinks)
    (join,) = branch_joins(mod, mod["main"])
    assert join.args[0].name_hint == "add"
    separated = relax.transform.FuseOps()(separate_branch_joins(mod))
    assert _calls(separated["main"]) == ["matmul", "transpose", "matmul", "transpose",
                                         "add_join0"]


def test_fusion_computes_each_branch_where_it_is_ready():
    plain = relax.transform.FuseOps()(_legalized(TwoBranches))
    separated = relax.transform.FuseOps()(separate_branch_joins(_legalized(TwoBranches)))
    # Without the pass the first branch's matmul is fused with the join and what follows, and
    # so runs after the second branch; with it, it runs first and the join stands alone.
    assert _calls(plain["main"])[:2] == ["matmul", "fused_matmul_add_add_tir_exp"]
    assert _calls(separated["main"])[:4] == ["fused_matmul_add", "matmul", "add_join0", "tir_exp"]
    assert int(separated["add_join0"].attrs["op_pattern"]) == OPAQUE


def test_the_result_is_unchanged():
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((8, 8)).astype(np.float32) * 0.3 for _ in range(3)]
    outputs = []
    for mod in (TwoBranches, separate_branch_joins(_legalized(TwoBranches))):
        vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
        outputs.append(vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-6, atol=1e-6)
