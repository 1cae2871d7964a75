"""Sines and cosines of an angle moved by a small increment, without calling sin and cos.

The fused integrators (plant.rk4_arm3, plant.rrr3_scalar) evaluate sin and cos
once per step at the step's angles; each stage (and each correction update)
moves them by its increment d with the angle-addition formulas, with sin d and
1 - cos d from their Taylor series. For |d| <= MAX_INCREMENT the series are
exact to rounding (the first omitted terms are below 3e-18 relative), so the
result agrees with sin(a + d), cos(a + d) to rounding (tests/test_fast_paths.py).
Callers check the increment and call sin and cos beyond it. For |d| <=
SMALL_INCREMENT, the common case, shorter series suffice (omitted terms below
3e-21 absolute): measured 10 % of the arm's fused step.

``sincos`` evaluates sin a and cos a together: one argument reduction for both
(a = k pi/2 + r, |r| <= pi/4, pi/2 in three parts after Cody and Waite) and the
minimax polynomials of fdlibm's __kernel_sin and __kernel_cos on r. It agrees
with libm to 1 ulp for |a| <= 10 rad and to 2 ulp up to SINCOS_LIMIT
(tests/test_fast_paths.py), and is 2-5 % faster per fused step than the two
libm calls (bench/bench_plant.py).
"""
import math

import numpy as np
from hilrig.jit.kernel import inline_kernel

MAX_INCREMENT = 0.1     # rad; 100 rad/s at h = 1 ms
SMALL_INCREMENT = 0.01  # rad; 10 rad/s at h = 1 ms

# Taylor coefficients: sin d = d (1 - d^2/6 (1 - d^2/20 (1 - ...))), 1 - cos d likewise
_S1, _S2, _S3, _S4 = 1.0 / 6.0, 1.0 / 20.0, 1.0 / 42.0, 1.0 / 72.0
_V1, _V2, _V3, _V4 = 1.0 / 12.0, 1.0 / 30.0, 1.0 / 56.0, 1.0 / 90.0
# for |d| <= SMALL_INCREMENT: sin d = d + d^3 (-1/3! + d^2 (1/5! - d^2/7!)),
# 1 - cos d = d^2 (1/2! + d^2 (-1/4! + d^2/6!))
_SIN_SMALL = (-1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0)
_VERS_SMALL = (0.5, -1.0 / 24.0, 1.0 / 720.0)


@inline_kernel
def moved(s, c, d):
    """(sin(a + d), cos(a + d)) from s = sin a and c = cos a, for |d| <= MAX_INCREMENT (rad)."""
    d2 = d * d
    if abs(d) <= SMALL_INCREMENT:
        sin_d = d + d * d2 * (_SIN_SMALL[0] + d2 * (_SIN_SMALL[1] + d2 * _SIN_SMALL[2]))
        vers_d = d2 * (_VERS_SMALL[0] + d2 * (_VERS_SMALL[1] + d2 * _VERS_SMALL[2]))
    else:
        sin_d = d * (1.0 - d2 * _S1 * (1.0 - d2 * _S2 * (1.0 - d2 * _S3 * (1.0 - d2 * _S4))))
        vers_d = 0.5 * d2 * (1.0 - d2 * _V1 * (1.0 - d2 * _V2 * (1.0 - d2 * _V3 * (
            1.0 - d2 * _V4))))
    return s + (c * sin_d - s * vers_d), c - (s * sin_d + c * vers_d)


# sincos: pi/2 = _PIO2_1 + _PIO2_2 + _PIO2_3 (33 + 33 + 53 bits: k * _PIO2_1 and
# k * _PIO2_2 are exact for |k| < 2^20); beyond SINCOS_LIMIT, libm
SINCOS_LIMIT = 1.0e5  # rad
_TWO_OVER_PI = 6.36619772367581382433e-01
_PIO2_1 = 1.57079632673412561417e+00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624879595063154e-21
_SIN = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
        2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_COS = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
        -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


# inlined: in the fused steps a call cost about 7 ns, since every live float is saved
# around it (no callee-saved float registers); inlining costs ~0.25 s of compile per call site
@inline_kernel
def sincos(a):
    """(sin a, cos a) for a in rad (see the module docstring for the accuracy)."""
    if abs(a) > SINCOS_LIMIT:
        return np.sin(a), np.cos(a)
    k = math.floor(a * _TWO_OVER_PI + 0.5)
    r = ((a - k * _PIO2_1) - k * _PIO2_2) - k * _PIO2_3
    z = r * r
    s = r + r * z * (_SIN[0] + z * (_SIN[1] + z * (_SIN[2] + z * (_SIN[3] + z * (
        _SIN[4] + z * _SIN[5])))))
    half = 0.5 * z
    w = 1.0 - half
    c = w + (((1.0 - w) - half) + z * z * (_COS[0] + z * (_COS[1] + z * (_COS[2] + z * (
        _COS[3] + z * (_COS[4] + z * _COS[5]))))))
    quadrant = int(k) & 3
    if quadrant == 0:
        return s, c
    if quadrant == 1:
        return c, -s
    if quadrant == 2:
        return -s, -c
    return -c, s
