"""Joint references r(t), r'(t), r''(t) as numba kernels over the controller array
(controllers.layout).

Kinds (``C_REF`` in controllers.law):
- ``HOLD``: r = target.
- ``STEP``: r = start before t_start, target from t_start on.
- ``QUINTIC``: from start to target over [t_start, t_start + duration], zero rate
  and acceleration at both ends (s(τ) = 10τ³ − 15τ⁴ + 6τ⁵), held outside.
- ``SINUSOID``: r = target + amplitude sin(2π f (t − t_start) + phase) for t ≥ t_start.
- ``FOURIER`` (an exciting trajectory for identification, hilrig.identify): a finite
  Fourier series per joint with base angular frequency w = 2π f and L harmonics,
  r = target + Σ_l a_l/(w l) sin(w l τ) − b_l/(w l) cos(w l τ), τ = t − t_start (held at
  its τ = 0 value before t_start); a_l, b_l in rad/s (controllers.layout.fourier_coefficient).

Units: rad, rad/s, rad/s², s, Hz.
"""
import math

from hilrig.controllers.layout import (
    B_AMPLITUDE,
    B_PHASE,
    B_START,
    B_TARGET,
    C_DURATION,
    C_FREQUENCY,
    C_NACT,
    C_HARMONICS,
    C_T_START,
    at,
    fourier_coefficient,
)
from hilrig.jit.kernel import kernel

HOLD = 0
STEP = 1
QUINTIC = 2
SINUSOID = 3
FOURIER = 4


@kernel
def reference(kind, t, ctrl, work):
    """Fill rows 0, 1, 2 of ``work`` with r, r', r'' (one column per joint) at time
    t (s), from the times and the start, target, amplitude and phase blocks of
    ``ctrl`` (controllers.layout) and, for FOURIER, its coefficients."""
    n = int(ctrl[C_NACT])
    t_start, duration, frequency = ctrl[C_T_START], ctrl[C_DURATION], ctrl[C_FREQUENCY]
    for j in range(n):
        start = at(ctrl, B_START, n, j)
        target = at(ctrl, B_TARGET, n, j)
        amplitude = at(ctrl, B_AMPLITUDE, n, j)
        phase = at(ctrl, B_PHASE, n, j)
        work[1, j] = 0.0
        work[2, j] = 0.0
        if kind == STEP:
            work[0, j] = start if t < t_start else target
        elif kind == QUINTIC:
            tau = (t - t_start) / duration
            if tau <= 0.0:
                work[0, j] = start
            elif tau >= 1.0:
                work[0, j] = target
            else:
                span = target - start
                t2 = tau * tau
                work[0, j] = start + span * t2 * tau * (10.0 - 15.0 * tau + 6.0 * t2)
                work[1, j] = span * 30.0 * t2 * (1.0 - tau) * (1.0 - tau) / duration
                work[2, j] = span * 60.0 * tau * (1.0 - tau) * (1.0 - 2.0 * tau) \
                    / (duration * duration)
        elif kind == SINUSOID and t >= t_start:
            w = 2.0 * math.pi * frequency
            arg = w * (t - t_start) + phase
            work[0, j] = target + amplitude * math.sin(arg)
            work[1, j] = amplitude * w * math.cos(arg)
            work[2, j] = -amplitude * w * w * math.sin(arg)
        elif kind == SINUSOID:
            work[0, j] = target + amplitude * math.sin(phase)
        elif kind == FOURIER:
            _fourier(ctrl, n, j, 2.0 * math.pi * frequency, t - t_start, target, work)
        else:
            work[0, j] = target


@kernel
def _fourier(ctrl, n, j, w, tau, offset, work):
    """Column j of ``work``: the Fourier series of joint j at tau (s) after t_start, base
    angular frequency w (rad/s), around ``offset`` (rad); before t_start (tau < 0) its
    value at tau = 0 with zero rate and acceleration."""
    moving = tau >= 0.0
    tau = max(tau, 0.0)
    r, rd, rdd = offset, 0.0, 0.0
    for harmonic in range(1, int(ctrl[C_HARMONICS]) + 1):
        a = fourier_coefficient(ctrl, n, 0, j, harmonic)
        b = fourier_coefficient(ctrl, n, 1, j, harmonic)
        wl = w * harmonic
        s, c = math.sin(wl * tau), math.cos(wl * tau)
        r += (a * s - b * c) / wl
        rd += a * c + b * s
        rdd += wl * (b * c - a * s)
    work[0, j] = r
    if moving:
        work[1, j] = rd
        work[2, j] = rdd
