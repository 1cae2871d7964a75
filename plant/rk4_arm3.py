"""One RK4 step of the 3-link serial arm, fused: the per-step path of paper 000's arm.

plant.integrators.step takes this for every 3-link arm without current states
(plant.dynamics.is_arm3) in any jam state. It computes the classical RK4 step
of plant.integrators over the same unrolled accelerations as
plant.dynamics.derivative (serial_arm.accel3_scalar), with two savings:

- the state and the four stages stay in scalars (registers): no stage arrays,
  no array reads per evaluation, the arm's constants, drive terms and jam
  phases read once per step (serial_arm.body3, plant.motor.drive3,
  serial_arm.jams3);
- the sines and cosines: stage 1 calls sin and cos at the step's angles; stages
  2-4 move those by the stage's increment d = c * (absolute link rate), c = h/2
  or h (plant.trig: exact to rounding; an increment beyond plant.trig.MAX_INCREMENT,
  a link faster than 100 rad/s at h = 1 ms, calls sin and cos).

Jam phases are constant over the step (plant.integrators.step splits a step
where a jamming phase ends).
"""
from hilrig.jit.kernel import fused_kernel, inline_kernel, kernel
from hilrig.plant.motor import drive3
from hilrig.plant.serial_arm import accel3_scalar, body3, jams3, trig3
from hilrig.plant.trig import MAX_INCREMENT, moved


@inline_kernel
def _stage_trig(trig, q1, q2, q3, c, v1, v2, v3):
    """trig3 at the stage angles q + c v (rad), from trig = trig3(q); v in rad/s, c in s."""
    d1 = c * v1
    d2 = d1 + c * v2
    d3 = d2 + c * v3
    if max(abs(d1), abs(d2), abs(d3)) > MAX_INCREMENT:
        return _far_trig(q1 + c * v1, q2 + c * v2, q3 + c * v3)
    s1, c1, s2, c2, s3, c3 = trig
    s1, c1 = moved(s1, c1, d1)
    s2, c2 = moved(s2, c2, d2)
    s3, c3 = moved(s3, c3, d3)
    return s1, c1, s2, c2, s3, c3


@kernel   # called, not inlined: a rare path need not cost compile time at three sites
def _far_trig(q1, q2, q3):
    """trig3(q1, q2, q3)."""
    return trig3(q1, q2, q3)


@fused_kernel
def rk4_arm3(p, jams, x, u, h):
    """Advance x = [q (rad), qd (rad/s)] of a 3-link arm by h (s) with input u (N m or V)
    held. Returns the smallest health figure of the four evaluations
    (serial_arm.accel3_scalar; <= 0: invalid).

    Stage k evaluates at q + c v, qd + c a (c = 0, h/2, h/2, h; v, a: stage k-1's rates);
    dq and dw sum k1 + 2 k2 + 2 k3 + k4 of qd and qdd. The stages are written out: a
    loop over them measured 7 % slower."""
    body = body3(p)
    drive = drive3(p, u, jams)
    jam = jams3(jams)
    q1, q2, q3, w1, w2, w3 = x[0], x[1], x[2], x[3], x[4], x[5]
    half = 0.5 * h
    trig = trig3(q1, q2, q3)
    a1, a2, a3, health = accel3_scalar(body, drive, jam, trig, w1, w2, w3)
    dq1, dq2, dq3, dw1, dw2, dw3 = w1, w2, w3, a1, a2, a3

    stage_trig = _stage_trig(trig, q1, q2, q3, half, w1, w2, w3)
    v1, v2, v3 = w1 + half * a1, w2 + half * a2, w3 + half * a3
    a1, a2, a3, stage_health = accel3_scalar(body, drive, jam, stage_trig, v1, v2, v3)
    health = health if health < stage_health else stage_health
    dq1, dq2, dq3 = dq1 + 2.0 * v1, dq2 + 2.0 * v2, dq3 + 2.0 * v3
    dw1, dw2, dw3 = dw1 + 2.0 * a1, dw2 + 2.0 * a2, dw3 + 2.0 * a3

    stage_trig = _stage_trig(trig, q1, q2, q3, half, v1, v2, v3)
    v1, v2, v3 = w1 + half * a1, w2 + half * a2, w3 + half * a3
    a1, a2, a3, stage_health = accel3_scalar(body, drive, jam, stage_trig, v1, v2, v3)
    health = health if health < stage_health else stage_health
    dq1, dq2, dq3 = dq1 + 2.0 * v1, dq2 + 2.0 * v2, dq3 + 2.0 * v3
    dw1, dw2, dw3 = dw1 + 2.0 * a1, dw2 + 2.0 * a2, dw3 + 2.0 * a3

    stage_trig = _stage_trig(trig, q1, q2, q3, h, v1, v2, v3)
    v1, v2, v3 = w1 + h * a1, w2 + h * a2, w3 + h * a3
    a1, a2, a3, stage_health = accel3_scalar(body, drive, jam, stage_trig, v1, v2, v3)
    health = health if health < stage_health else stage_health
    dq1, dq2, dq3 = dq1 + v1, dq2 + v2, dq3 + v3
    dw1, dw2, dw3 = dw1 + a1, dw2 + a2, dw3 + a3

    sixth = h / 6.0
    x[0] += sixth * dq1
    x[1] += sixth * dq2
    x[2] += sixth * dq3
    x[3] += sixth * dw1
    x[4] += sixth * dw2
    x[5] += sixth * dw3
    return health
