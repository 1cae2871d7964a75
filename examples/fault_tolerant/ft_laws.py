"""A fault-tolerant law of the user's own (issue 24, item 5): computed torque on the serial
arm that detects a joint whose drive stopped giving its torque (a ``free_swing``, or a
large loss of ``effectiveness``), reports it through ``controller.detection_slot`` and
re-plans. Run from this folder: ``hil sim serial3_ft.toml`` (docs/FAULTS.md, Detection).

Detection, from the residual of the arm's model: the joint torques the plant really
received over the last step are M(q) a + c(q, qd) + g(q) + D qd (plant.model_kernels.
inverse_dynamics) with a the measured acceleration (qd_k - qd_{k-1}) / dt; each joint's
residual is the torque the law commanded over that step minus that. A healthy drive
gives what it is told, so its residual is only the finite difference's error (about
h/2 dtau/dt); a free-swinging joint's is its whole command, and only its own: the
others still receive theirs, the coupling is in the model. The residuals are low-pass
filtered (time constant ``tau_f``); at the first call where one exceeds ``threshold``
(N m), the joint with the largest is blamed: state[0] = its 1-based number. Commands
clamped by ``safety.max_command`` would show as residuals: the reference starts at rest
so that they are not.

Reaction: from then on that joint gets no torque (u = 0: it swings) and the others stop
following their references and hold the reference positions they had at the detection,
by computed torque with the blamed joint's acceleration taken as zero.
"""
import math

from hilrig.controllers.interface import declare_sizes
from hilrig.plant import model_kernels as mk
from numba import njit

N_OWN = 7      # kp, kd, amplitude, frequency, threshold, tau_f, dt; then n starts, model


@declare_sizes(params=lambda n: N_OWN + n, state=lambda n: 3 + 6 * n)
@njit(cache=True)
def computed_torque_ft(t, pos, vel, cur, params, state, u):
    """Computed torque with free-swing detection and re-planning (module docstring).

    params = [kp (1/s^2), kd (1/s), amplitude (rad), frequency (Hz), threshold (N m),
    tau_f (s, the residual's filter), dt (s, the control period), start_1 .. start_n
    (rad)], then the plant's model block (controller.with_model = true).
    state (3 + 6 n): [0] the detection slot (0, or the blamed joint, 1-based), [1] calls
    so far, [2] the detection's time (s), then n each: the previous rates (rad/s), the
    previous commands (N m), the filtered residuals (N m), an acceleration (rad/s^2), the
    inverse dynamics' torques (N m), the positions held after a detection (rad).
    """
    n = u.shape[0]
    kp, kd, amplitude, frequency = params[0], params[1], params[2], params[3]
    threshold, tau_f, dt = params[4], params[5], params[6]
    model = params[N_OWN + n:]
    prev_vel = state[3:3 + n]
    prev_u = state[3 + n:3 + 2 * n]
    residual = state[3 + 2 * n:3 + 3 * n]
    acc = state[3 + 3 * n:3 + 4 * n]
    tau = state[3 + 4 * n:3 + 5 * n]
    held = state[3 + 5 * n:3 + 6 * n]
    w = 2.0 * math.pi * frequency
    # detect: the torque each joint received over the last step against what it was told
    if state[0] == 0.0 and state[1] >= 1.0:
        for j in range(n):
            acc[j] = (vel[j] - prev_vel[j]) / dt
        mk.inverse_dynamics(model, pos, vel, acc, tau)
        alpha = dt / (tau_f + dt)
        worst, blamed = threshold, -1
        for j in range(n):
            residual[j] += alpha * (prev_u[j] - tau[j] - residual[j])
            if abs(residual[j]) > worst:
                worst, blamed = abs(residual[j]), j
        if blamed >= 0:
            state[0] = blamed + 1.0
            state[2] = t
            for j in range(n):
                held[j] = params[N_OWN + j] + amplitude * (1.0 - math.cos(w * t))
    # control: follow r = start + amplitude (1 - cos 2 pi f t) (at rest at t = 0, so the
    # first commands stay inside the drives' range), or after a detection hold the others
    failed = int(state[0]) - 1
    for j in range(n):
        if failed < 0:
            r = params[N_OWN + j] + amplitude * (1.0 - math.cos(w * t))
            acc[j] = amplitude * w * w * math.cos(w * t) + kp * (r - pos[j]) \
                + kd * (amplitude * w * math.sin(w * t) - vel[j])
        elif j == failed:
            acc[j] = 0.0
        else:
            acc[j] = kp * (held[j] - pos[j]) - kd * vel[j]
    mk.inverse_dynamics(model, pos, vel, acc, u)
    if failed >= 0:
        u[failed] = 0.0
    for j in range(n):
        prev_vel[j] = vel[j]
        prev_u[j] = u[j]
    state[1] += 1.0
