"""compile/lower.py's own passes, on small Relax modules."""
import tvm
from tvm import relax
from tvm.script import relax as R

from kokoro_tvm.abi import TRANSFORM_SUFFIX
from kokoro_tvm.compile.lower import lift_weight_transforms


def _op_calls(func: relax.Function, op_name: str) -> int:
    calls = []
    relax.analysis.post_order_visit(
        func.body, lambda e: calls.append(e) if isinstance(e, relax.Call)
        and isinstance(e.op, tvm.ir.Op) and e.op.name == op_name else None)
    return len(calls)


def test_weight_transforms_share_work_and_functions_keep_theirs():
    """Repeated work on weights is done once in the lifted transform (ALBERT's shared layer);
    repeated work on inputs stays where it is, so that no result outlives its use (one
    instance-normalised input shared by the generator's three residual blocks was a full-size
    buffer held through all three)."""
    @tvm.script.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((4, 4), "float32"), w: R.Tensor((4, 4), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                first = R.matmul(R.exp(x), R.permute_dims(w))
                second = R.matmul(R.exp(x), R.permute_dims(w))
                out = R.add(first, second)
                R.output(out)
            return out

    lifted = lift_weight_transforms(Module)
    assert _op_calls(lifted["main" + TRANSFORM_SUFFIX], "relax.permute_dims") == 1
    assert _op_calls(lifted["main"], "relax.permute_dims") == 0
    assert _op_calls(lifted["main"], "relax.exp") == 2
    assert [p.name for p in lifted["main" + TRANSFORM_SUFFIX].params] == ["w"]
    # The weight prepared once is returned once and taken once.
    assert len(lifted["main" + TRANSFORM_SUFFIX].ret_ty.fields) == 1
    assert len(lifted["main"].params) == 2


def test_a_function_without_weights_keeps_its_inputs():
    """A function with no weights (the alignment, the noise) gets an empty transform."""
    @tvm.script.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((4, 4), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                out = R.exp(x)
                R.output(out)
            return out

    lifted = lift_weight_transforms(Module)
    assert len(lifted["main" + TRANSFORM_SUFFIX].params) == 0
    assert [p.name for p in lifted["main"].params] == ["x"]
