"""Sines and cosines of an angle moved by a small increment, without calling sin and cos.

The fused integrators (plant.rk4_arm3, plant.rrr3_scalar) evaluate sin and cos
once per step at the step's angles; each stage (and each correction update)
moves them by its increment d with the angle-addition formulas, with sin d and
1 - cos d from their Taylor series. For |d| <= MAX_INCREMENT the series are
exact to rounding (the first omitted terms are below 3e-18 relative), so the
result agrees with sin(a + d), cos(a + d) to rounding (tests/test_fast_paths.py).
Callers check the increment and call sin and cos beyond it.
"""
from plant.kernel import inline_kernel

MAX_INCREMENT = 0.1  # rad; 100 rad/s at h = 1 ms

# Taylor coefficients: sin d = d (1 - d^2/6 (1 - d^2/20 (1 - ...))), 1 - cos d likewise
_S1, _S2, _S3, _S4 = 1.0 / 6.0, 1.0 / 20.0, 1.0 / 42.0, 1.0 / 72.0
_V1, _V2, _V3, _V4 = 1.0 / 12.0, 1.0 / 30.0, 1.0 / 56.0, 1.0 / 90.0


@inline_kernel
def moved(s, c, d):
    """(sin(a + d), cos(a + d)) from s = sin a and c = cos a, for |d| <= MAX_INCREMENT (rad)."""
    d2 = d * d
    sin_d = d * (1.0 - d2 * _S1 * (1.0 - d2 * _S2 * (1.0 - d2 * _S3 * (1.0 - d2 * _S4))))
    vers_d = 0.5 * d2 * (1.0 - d2 * _V1 * (1.0 - d2 * _V2 * (1.0 - d2 * _V3 * (1.0 - d2 * _V4))))
    return s + (c * sin_d - s * vers_d), c - (s * sin_d + c * vers_d)
