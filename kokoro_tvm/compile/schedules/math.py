"""Exact and cheaper forms of transcendental ops, as legalizations.

Two sets. ``EVERY_TARGET`` are correctness fixes that ``lower`` applies for CPUs and GPUs alike:
TVM's default forms are wrong on CUDA (``powf`` of a negative base is NaN there, and single-
precision ``sin`` of the sine generator's phases, which reach 1e6, loses digits), so whole
powers become products and sin/cos reduce their argument in float64 on every target
(docs/gpu.md, "CUDA math"). ``CPU_ONLY`` are speed forms for our CPU schedules.

- ``tanh`` (ALBERT's GELU): compile/fastmath.py's clamped rational approximation (Eigen's, as
  ``topi.fast_tanh``), vectorizable, instead of a scalar libm call per element.
- ``sin``, ``cos`` (the decoder's Snake activations, generator phase and sine source): the
  vectorizable forms of compile/fastmath.py (float64 argument reduction, so phases of 1e6 stay
  within 1.5 ulp); libm's scalar ``sinf`` took 8 ns per element, a fifth of the AdaIN + Snake
  kernels' time.
- ``power`` by a small whole constant (``x ** 3`` in the GELU): repeated multiplication instead
  of ``powf``, which LLVM cannot vectorize and which is NaN on CUDA for negative ``x``.

``WITHOUT_FLOAT64`` is ``EVERY_TARGET`` for devices that have no float64 (Metal, WebGPU): sin
and cos reduce their argument in float32 (fastmath.py), binding their intermediate values once,
as whole powers bind their base (GPU source repeats an expression at every use).

Everything else keeps TVM's legalization.
"""
from __future__ import annotations

import tvm
from tvm import relax, te

from kokoro_tvm.compile import fastmath
from kokoro_tvm.compile.schedules.common import tvm_legalization

MAX_WHOLE_EXPONENT = 4


def _elementwise(fn, name: str):
    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        if call.args[0].ty.dtype != "float32":
            return tvm_legalization(bb, call)
        return bb.call_te(lambda x: te.compute(x.shape, lambda *i: fn(x(*i)), name=name),
                          call.args[0], primfunc_name_hint=name)

    return legalize


legalize_tanh = _elementwise(fastmath.tanh, "tanh")
legalize_sin = _elementwise(fastmath.sin, "sin")
legalize_cos = _elementwise(fastmath.cos, "cos")
legalize_sin_float32 = _elementwise(lambda x: fastmath.sin(x, wide=False), "sin")
legalize_cos_float32 = _elementwise(lambda x: fastmath.cos(x, wide=False), "cos")


def _whole_exponent(expr: relax.Expr) -> int | None:
    """The exponent if it is a scalar constant equal to a whole number in 1..MAX, else None."""
    if not isinstance(expr, tvm.ir.expr.Constant) or expr.value.numpy().size != 1:
        return None
    value = float(expr.value.numpy().reshape(()))
    return int(value) if value.is_integer() and 1 <= value <= MAX_WHOLE_EXPONENT else None


def _repeated_product(x: te.Tensor, exponent: int, bind: bool) -> te.Tensor:
    def product(*i):
        def power(base):
            value = base
            for _ in range(exponent - 1):
                value = value * base
            return value

        return fastmath.bound(x(*i), power) if bind else power(x(*i))

    return te.compute(x.shape, product, name="power")


def _legalize_power(bind: bool):
    """``power`` by a whole constant as a product; ``bind``: its base bound once (for GPUs,
    whose source would print the base, and what fusion inlined into it, once per factor)."""
    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        base, exponent = call.args
        whole = _whole_exponent(exponent)
        if whole is None or base.ty.dtype != "float32":
            return tvm_legalization(bb, call)
        return bb.call_te(_repeated_product, base, whole, bind, primfunc_name_hint="power")

    return legalize


EVERY_TARGET = {
    "relax.sin": legalize_sin,
    "relax.cos": legalize_cos,
    "relax.power": _legalize_power(bind=False),
}
# For devices without float64 (Metal): EVERY_TARGET with sin and cos reduced in float32.
WITHOUT_FLOAT64 = {**EVERY_TARGET, "relax.sin": legalize_sin_float32,
                   "relax.cos": legalize_cos_float32, "relax.power": _legalize_power(bind=True)}
CPU_ONLY = {"relax.tanh": legalize_tanh}
