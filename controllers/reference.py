"""Joint references r(t), r'(t), r''(t) as numba kernels over the controller array.

Kinds (``C_REF`` in controllers.law):
- ``HOLD``: r = target.
- ``STEP``: r = start before t_start, target from t_start on.
- ``QUINTIC``: from start to target over [t_start, t_start + duration], zero rate
  and acceleration at both ends (s(τ) = 10τ³ − 15τ⁴ + 6τ⁵), held outside.
- ``SINUSOID``: r = target + amplitude sin(2π f (t − t_start) + phase) for t ≥ t_start.

Units: rad, rad/s, rad/s², s, Hz.
"""
import math

from plant.kernel import kernel

HOLD = 0
STEP = 1
QUINTIC = 2
SINUSOID = 3


@kernel
def reference(kind, t, t_start, duration, frequency, start, target, amplitude, phase,
              r, rd, rdd):
    """Fill r, rd, rdd (one entry per joint) at time t (s)."""
    n = r.shape[0]
    for j in range(n):
        rd[j] = 0.0
        rdd[j] = 0.0
        if kind == STEP:
            r[j] = start[j] if t < t_start else target[j]
        elif kind == QUINTIC:
            tau = (t - t_start) / duration
            if tau <= 0.0:
                r[j] = start[j]
            elif tau >= 1.0:
                r[j] = target[j]
            else:
                span = target[j] - start[j]
                t2 = tau * tau
                r[j] = start[j] + span * t2 * tau * (10.0 - 15.0 * tau + 6.0 * t2)
                rd[j] = span * 30.0 * t2 * (1.0 - tau) * (1.0 - tau) / duration
                rdd[j] = span * 60.0 * tau * (1.0 - tau) * (1.0 - 2.0 * tau) / (duration * duration)
        elif kind == SINUSOID and t >= t_start:
            w = 2.0 * math.pi * frequency
            arg = w * (t - t_start) + phase[j]
            r[j] = target[j] + amplitude[j] * math.sin(arg)
            rd[j] = amplitude[j] * w * math.cos(arg)
            rdd[j] = -amplitude[j] * w * w * math.sin(arg)
        elif kind == SINUSOID:
            r[j] = target[j] + amplitude[j] * math.sin(phase[j])
        else:
            r[j] = target[j]
