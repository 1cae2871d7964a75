"""Control laws as numba kernels over a flat ``gains`` array.

Layout of ``gains``: ``[kind, nact, kp (nact), kd (nact), target (nact),
scale (nact), u_const (nact)]``.

- ``OPEN_LOOP``: u = u_const (V or N m).
- ``PD`` (paper 003 §5.2): c = Kp (target - q) - Kd qd; u = scale * c. ``scale``
  is 1 when the law's output is what the plant takes (voltage gains on a
  voltage-driven plant, torque gains on a torque-driven one) and 1/k =
  R_a / (r K_m) when the gains give a joint torque and the plant wants volts
  (the "torque" reading of the paper's law).

Measurements: ``pos`` (rad) and ``vel`` (rad/s) of the actuated joints.
"""
import numpy as np

from plant.kernel import kernel
OPEN_LOOP = 0
PD = 1


def make_gains(kind: int, nact: int, kp=0.0, kd=0.0, target=0.0, scale=1.0,
               u_const=0.0) -> np.ndarray:
    """Pack a ``gains`` array (scalars broadcast to every joint)."""
    out = np.zeros(2 + 5 * nact)
    out[0], out[1] = kind, nact
    for block, value in enumerate((kp, kd, target, scale, u_const)):
        out[2 + block * nact:2 + (block + 1) * nact] = value
    return out


@kernel
def command(gains, t, pos, vel, u):
    """Write the command for time t (s) into u (V or N m per actuated joint)."""
    kind = int(gains[0])
    n = int(gains[1])
    for j in range(n):
        if kind == PD:
            c = gains[2 + j] * (gains[2 + 2 * n + j] - pos[j]) - gains[2 + n + j] * vel[j]
            u[j] = gains[2 + 3 * n + j] * c
        else:
            u[j] = gains[2 + 4 * n + j]
