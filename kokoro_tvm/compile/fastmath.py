"""Vectorizable float32 tanh, sigmoid, sin, cos and exp as TIR expressions.

TVM lowers these on the CPU to a libm call per element, which LLVM cannot vectorize (16 times
slower than the forms below: docs/tvm.md). These are arithmetic only:

- tanh: Eigen's rational approximation on [-9, 9] (the same one as ``topi.fast_tanh``; beyond 9,
  float32 tanh is +-1), absolute error about 1e-7; sigmoid(x) = (1 + tanh(x / 2)) / 2. The LSTM
  kernels (compile/lstm.py) use them inside hand-written TIR, and compile/schedules/math.py
  legalizes Relax's ``tanh`` (ALBERT's GELU) with the same expression.
- sin, cos (compile/schedules/math.py legalizes Relax's with them: Snake activations, the
  generator's phase, SineGen): the argument is reduced in float64 to r = x - k pi/2 with |r| <=
  pi/4 (pi/2 in two doubles, so r stays exact to about 1e-16 * k: the sine generator's phases
  reach 1e6); r rounded to float32 then goes through Cephes' sinf and cosf polynomials (degree
  7 and 8, in float32: only the reduction needs double), and the quadrant k mod 4 picks +-sin r
  or +-cos r. The result is within 1.5 ulp of the exact one at any phase up to 1e6 (libm's:
  0.5). Infinities and NaN give NaN, like libm. Devices without float64 (Metal) reduce in
  float32 instead (``wide=False``): pi/2 in three 12-bit parts and a float32 rest, k split into
  two 12-bit halves, so that every product k_part * pi_part is exact (Cody and Waite's scheme);
  exact to the float32 rest's precision for k < 2^24.
- exp (schedules/softmax.py: ALBERT's attention): Cephes' ``expf``, x = n ln 2 + r with ln 2
  in two parts and |r| <= ln 2 / 2, a degree-5 polynomial for (exp(r) - 1 - r) / r^2, and 2^n
  written into the exponent bits; within 2 ulp of libm. Arguments are clamped to [-88, 88]:
  below, float32 exp is under 2^-126 and this gives 0 (libm: a subnormal or 0), above it gives
  exp(88), where libm overflows towards infinity at 88.72. NaN stays NaN.
"""
from __future__ import annotations

from tvm import tirx

DTYPE = "float32"
TANH_CLAMP = 9.0
# tanh(x) ~ x * P(x^2) / Q(x^2)
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)


def _horner(coefficients, x, dtype=DTYPE):
    value = tirx.const(coefficients[0], dtype)
    for c in coefficients[1:]:
        value = value * x + tirx.const(c, dtype)
    return value


def tanh(x: tirx.PrimExpr) -> tirx.PrimExpr:
    clamped = tirx.max(tirx.min(x, tirx.const(TANH_CLAMP, DTYPE)),
                       tirx.const(-TANH_CLAMP, DTYPE))
    square = clamped * clamped
    return clamped * _horner(_TANH_P, square) / _horner(_TANH_Q, square)


def sigmoid(x: tirx.PrimExpr) -> tirx.PrimExpr:
    half = tirx.const(0.5, DTYPE)
    return half + half * tanh(half * x)


# pi/2 as a double plus the double nearest to the rest.
_HALF_PI_HI = 1.5707963267948966
_HALF_PI_LO = 6.123233995736766e-17
# Cephes' sinf and cosf on [-pi/4, pi/4]: sin r = r + r^3 P(r^2), cos r = 1 - r^2/2 + r^4 Q(r^2).
_SIN_P = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COS_Q = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)


# pi/2 as three floats of 12 significant bits and the float nearest to the rest; k is split at
# 2^12 so that both halves have at most 12 bits too.
_HALF_PI_PARTS = (1.57080078125, -4.453584551811218e-06, -8.706138032721356e-10)
_HALF_PI_REST = 6.223371969669989e-14
_K_SPLIT = 4096.0


def _reduced_wide(x: tirx.PrimExpr) -> tuple[tirx.PrimExpr, tirx.PrimExpr]:
    """(r, k): x = k pi/2 + r, reduced in float64; k as a float64."""
    f64 = "float64"
    wide = tirx.Cast(f64, x)
    k = tirx.round(wide * tirx.const(1 / _HALF_PI_HI, f64))
    r = wide - k * tirx.const(_HALF_PI_HI, f64) - k * tirx.const(_HALF_PI_LO, f64)
    return tirx.Cast(DTYPE, r), k


def _quarter_turns(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """k, the whole number of quarter turns nearest to x, as a float32."""
    return tirx.round(x * tirx.const(1 / _HALF_PI_HI, DTYPE))


def _reduced_float32(x: tirx.PrimExpr, k: tirx.PrimExpr) -> tirx.PrimExpr:
    """r = x - k pi/2, reduced in float32 alone."""
    # Towards zero, so that both halves have the sign of k and x - high * part loses nothing.
    high = tirx.trunc(k * tirx.const(1 / _K_SPLIT, DTYPE)) * tirx.const(_K_SPLIT, DTYPE)
    low = k - high
    r = x
    for part in _HALF_PI_PARTS:
        r = r - high * tirx.const(part, DTYPE)
        r = r - low * tirx.const(part, DTYPE)
    return r - k * tirx.const(_HALF_PI_REST, DTYPE)


def bound(value: tirx.PrimExpr, use) -> tirx.PrimExpr:
    """``use(v)`` with float32 ``v`` bound to ``value`` once (a Let). GPU source is printed as
    trees: an argument used n times is printed n times, with whatever fusion inlined into it
    (the sine generator's upsampling: megabytes of WGSL); a Let prints it once."""
    var = tirx.Var("v", DTYPE)
    return tirx.Let(var, value, use(var))


def _sin_quadrant(x: tirx.PrimExpr, quarter_turns: int, wide: bool) -> tirx.PrimExpr:
    """sin(x + quarter_turns * pi/2) for float32 ``x``, reduced in float64 if ``wide``; the
    float32 form (for GPUs) binds its intermediate values once."""
    if wide:
        return _sin_reduced(*_reduced_wide(x), quarter_turns, "float64", lambda v, use: use(v))
    return bound(x, lambda x: bound(_quarter_turns(x), lambda k: bound(
        _reduced_float32(x, k), lambda r: _sin_reduced(r, k, quarter_turns, DTYPE, bound))))


def _sin_reduced(r, k, quarter_turns: int, kind: str, bind) -> tirx.PrimExpr:
    """sin(r + (k + quarter_turns) * pi/2) for |r| <= pi/4; ``kind``: k's type (exact for
    whole numbers below 2^24 in both)."""
    def value(square):
        sine = r + r * square * _horner(_SIN_P, square)
        cosine = (tirx.const(1.0, DTYPE) - tirx.const(0.5, DTYPE) * square
                  + square * square * _horner(_COS_Q, square))
        turns = k + tirx.const(quarter_turns, kind)
        quadrant = turns - tirx.const(4, kind) * tirx.floor(turns * tirx.const(0.25, kind))
        odd = tirx.Or(quadrant == tirx.const(1, kind), quadrant == tirx.const(3, kind))
        chosen = tirx.Select(odd, cosine, sine)
        return tirx.Select(quadrant >= tirx.const(2, kind), -chosen, chosen)

    return bind(r * r, value)


def sin(x: tirx.PrimExpr, wide: bool = True) -> tirx.PrimExpr:
    return _sin_quadrant(x, 0, wide)


def cos(x: tirx.PrimExpr, wide: bool = True) -> tirx.PrimExpr:
    return _sin_quadrant(x, 1, wide)


# exp: Cephes' expf (x = n ln 2 + r; ln 2 = _LN2_HI + _LN2_LO, _LN2_HI exact in 9 bits).
EXP_CLAMP = 88.0
_LOG2E = 1.4426950408889634
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
_FLOAT32_EXPONENT_BIAS, _FLOAT32_MANTISSA_BITS = 127, 23


def exp(x: tirx.PrimExpr) -> tirx.PrimExpr:
    clamped = tirx.max(tirx.min(x, tirx.const(EXP_CLAMP, DTYPE)), tirx.const(-EXP_CLAMP, DTYPE))
    n = tirx.floor(clamped * tirx.const(_LOG2E, DTYPE) + tirx.const(0.5, DTYPE))
    r = clamped - n * tirx.const(_LN2_HI, DTYPE) - n * tirx.const(_LN2_LO, DTYPE)
    expm1 = _horner(_EXP_POLY, r) * r * r + r
    # 2^n for n in [-127, 127]: n = -127 has a zero exponent field, i.e. 0.
    biased = tirx.Cast("int32", n) + tirx.const(_FLOAT32_EXPONENT_BIAS, "int32")
    scale = tirx.reinterpret(DTYPE, biased << tirx.const(_FLOAT32_MANTISSA_BITS, "int32"))
    value = (expm1 + tirx.const(1.0, DTYPE)) * scale
    return tirx.Select(tirx.isnan(x), x, value)  # NaN in, NaN out (the clamp would hide it)


# log: Cephes' logf (x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(1 + f) for f = m - 1 by a
# degree-9 polynomial, e ln 2 in the two parts of exp's).
_SQRT_HALF = 0.70710678118654752440
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
             1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
             3.3333331174e-1)


def log(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """log of a positive normal float32 ``x``, within 2 ulp, its values bound once as sin's are
    (the WebGPU noise kernel's: WGSL's own log may be off by 2^-21 near 1)."""
    def of(x):
        bits = tirx.reinterpret("int32", x)
        exponent = (bits >> tirx.const(_FLOAT32_MANTISSA_BITS, "int32")) - tirx.const(
            _FLOAT32_EXPONENT_BIAS - 1, "int32")
        # The mantissa as m in [1/2, 1): x = m 2^exponent.
        half = tirx.reinterpret(DTYPE, (bits & tirx.const((1 << _FLOAT32_MANTISSA_BITS) - 1,
                                                          "int32"))
                                | tirx.const((_FLOAT32_EXPONENT_BIAS - 1)
                                             << _FLOAT32_MANTISSA_BITS, "int32"))
        low = half < tirx.const(_SQRT_HALF, DTYPE)
        e = tirx.Cast(DTYPE, exponent - tirx.Cast("int32", low))
        return bound(tirx.Select(low, half + half, half) - tirx.const(1.0, DTYPE),
                     lambda f: bound(f * f, lambda square: (
                         f + (f * square * _horner(_LOG_POLY, f)
                              + e * tirx.const(_LN2_LO, DTYPE)
                              - tirx.const(0.5, DTYPE) * square)
                         + e * tirx.const(_LN2_HI, DTYPE))))

    return bound(x, of)
