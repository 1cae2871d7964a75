"""The 3RRR's per-step path in scalars: the fused RK4 step and the projection.

plant.integrators.step takes ``rk4`` for a 3RRR without current states,
plant.stepping's projection correction takes ``project``, and plant.stepping.advance
takes the two fused (``rk4(..., projected=1.0)``), where the projection starts
from the step's own sines and cosines. They compute what the generic kernels
compute (rrr3.constrained_accel through plant.dynamics.derivative,
rrr3.project), to rounding (tests/test_fast_paths.py), in scalars: constants
read once per call, no arrays or slices per evaluation, the sparsity of Phi_q
(each row: its own theta_i column and x_C, y_C, phi) written out, and sin and
cos evaluated once per call at the call's angles theta_1..3 and phi
(plant.trig.sincos); the stages (RK4) and updates (projection) move them by
their increments (plant.trig).
cos(phi + alpha_i), sin(phi + alpha_i) come from cos phi, sin phi and the
stored cos alpha_i, sin alpha_i.

Where S = Phi M^-1 Phi^T is numerically singular (Phi_q loses rank, a pivot
below rrr3.RANK_TOL of S's largest diagonal entry) the generic kernels take
over, which switch to the pseudo-inverse of S: ``rk4`` leaves x untouched and
returns -1 for its caller to take the generic step, and the projection runs
rrr3.project itself.
"""

from hilrig.plant import rrr3
from hilrig.jit.kernel import fused_helper, fused_kernel, kernel
from hilrig.plant.layout import H_BODY
from hilrig.plant.linalg import sym3_solve
from hilrig.plant.motor import drive3, reflected_inertia3
from hilrig.plant.rrr3 import (
    R_B,
    R_BAUMGARTE,
    R_COS_ALPHA,
    R_DAMP,
    R_DELTA,
    R_ITERATIONS,
    R_L1,
    R_L2,
    R_MASS,
    R_OMEGA0,
    R_OX,
    R_OY,
    R_SIN_ALPHA,
    R_TOLERANCE,
    RANK_TOL,
)
from hilrig.plant.trig import MAX_INCREMENT, moved, sincos


# -- constants ------------------------------------------------------------------------
@kernel
def _shape(p):
    """(l1, l2, b) in m and, per leg, (O_x, O_y (m), cos alpha, sin alpha)."""
    o = int(p[H_BODY])
    return ((p[o + R_L1], p[o + R_L2], p[o + R_B]),
            ((p[o + R_OX], p[o + R_OY], p[o + R_COS_ALPHA], p[o + R_SIN_ALPHA]),
             (p[o + R_OX + 1], p[o + R_OY + 1], p[o + R_COS_ALPHA + 1], p[o + R_SIN_ALPHA + 1]),
             (p[o + R_OX + 2], p[o + R_OY + 2], p[o + R_COS_ALPHA + 2], p[o + R_SIN_ALPHA + 2])))


@kernel
def _inverse_mass(p, inertia):
    """Diagonal of M_s^-1 (eq. 16: the mechanism's mass plus the reflected rotor
    inertias ``inertia`` of the three drives), 1/kg m^2 and 1/kg."""
    m = int(p[H_BODY]) + R_MASS
    return (1.0 / (p[m] + inertia[0]), 1.0 / (p[m + 1] + inertia[1]),
            1.0 / (p[m + 2] + inertia[2]), 1.0 / p[m + 3], 1.0 / p[m + 4], 1.0 / p[m + 5])


@kernel
def _step_constants(p, u, jams):
    """What an RK4 step holds constant for input u: shape, M_s^-1, damping D_s
    (mechanism plus drives, N m s/rad, N s/m), drive force (N m, first three
    coordinates; with ``jams``, the actuated joints' actuator faults:
    plant.actuator_faults) and the Baumgarte gains (2 delta omega_0 in 1/s,
    omega_0^2 in 1/s^2; zero when stabilisation is off)."""
    o = int(p[H_BODY])
    inertia, damping, force = drive3(p, u, jams)
    d = o + R_DAMP
    damp = (p[d] + damping[0], p[d + 1] + damping[1], p[d + 2] + damping[2],
            p[d + 3], p[d + 4], p[d + 5])
    gains = (0.0, 0.0)
    if p[o + R_BAUMGARTE] != 0.0:
        w0 = p[o + R_OMEGA0]
        gains = (2.0 * p[o + R_DELTA] * w0, w0 * w0)
    return _shape(p), _inverse_mass(p, inertia), damp, force, gains


# -- kinematics -----------------------------------------------------------------------
@fused_helper
def _trig(t1, t2, t3, phi):
    """(sin, cos) of theta_1, theta_2, theta_3 and phi (rad), flat."""
    s1, c1 = sincos(t1)
    s2, c2 = sincos(t2)
    s3, c3 = sincos(t3)
    sp, cp = sincos(phi)
    return s1, c1, s2, c2, s3, c3, sp, cp


@fused_helper
def _moved_trig(trig, t1, t2, t3, phi, d1, d2, d3, dphi):
    """_trig at the angles moved by d (rad); t, phi: the moved angles themselves,
    for increments beyond plant.trig.MAX_INCREMENT."""
    if max(abs(d1), abs(d2), abs(d3), abs(dphi)) > MAX_INCREMENT:
        return _trig(t1, t2, t3, phi)
    s1, c1 = moved(trig[0], trig[1], d1)
    s2, c2 = moved(trig[2], trig[3], d2)
    s3, c3 = moved(trig[4], trig[5], d3)
    sp, cp = moved(trig[6], trig[7], dphi)
    return s1, c1, s2, c2, s3, c3, sp, cp


@fused_helper
def _leg(shape, leg, st, ct, sphi, cphi, xc, yc):
    """Leg i at the pose: d = r_Bi - r_Ai (m), the constraint f_i (m^2) and its row of
    Phi_q, (df/dtheta_i, df/dx_C, df/dy_C, df/dphi); also cos, sin of phi + alpha_i."""
    l1, l2, b = shape
    ox, oy, ca, sa = leg
    cp = cphi * ca - sphi * sa
    sp = sphi * ca + cphi * sa
    dx = xc + b * cp - ox - l1 * ct
    dy = yc + b * sp - oy - l1 * st
    f = dx * dx + dy * dy - l2 * l2
    row = (2.0 * l1 * (dx * st - dy * ct), 2.0 * dx, 2.0 * dy, 2.0 * b * (dy * cp - dx * sp))
    return dx, dy, cp, sp, f, row


@fused_helper
def _convective(shape, dx, dy, cp, sp, st, ct, w, wp, vx, vy):
    """Phidot_q qd of one leg (m^2/s^2): w = thetadot_i, wp = phidot (rad/s), vx, vy (m/s)."""
    l1, _, b = shape
    ux = vx - b * sp * wp + l1 * st * w
    uy = vy + b * cp * wp - l1 * ct * w
    ax = -b * cp * wp * wp + l1 * ct * w * w
    ay = -b * sp * wp * wp + l1 * st * w * w
    return 2.0 * (ux * ux + uy * uy) + 2.0 * (dx * ax + dy * ay)


@fused_helper
def _solve_s(r1, r2, r3, minv, rhs):
    """Solve S lambda = rhs, S = Phi M^-1 Phi^T from the rows r_i of Phi_q
    (plant.linalg.sym3_solve).
    Returns (lambda_1, lambda_2, lambda_3, regular); not regular: a pivot below
    RANK_TOL of S's largest diagonal entry (lambda then invalid)."""
    m1, m2, m3, mx, my, mp = minv
    s11 = r1[0] * m1 * r1[0] + r1[1] * mx * r1[1] + r1[2] * my * r1[2] + r1[3] * mp * r1[3]
    s22 = r2[0] * m2 * r2[0] + r2[1] * mx * r2[1] + r2[2] * my * r2[2] + r2[3] * mp * r2[3]
    s33 = r3[0] * m3 * r3[0] + r3[1] * mx * r3[1] + r3[2] * my * r3[2] + r3[3] * mp * r3[3]
    s12 = r1[1] * mx * r2[1] + r1[2] * my * r2[2] + r1[3] * mp * r2[3]
    s13 = r1[1] * mx * r3[1] + r1[2] * my * r3[2] + r1[3] * mp * r3[3]
    s23 = r2[1] * mx * r3[1] + r2[2] * my * r3[2] + r2[3] * mp * r3[3]
    x1, x2, x3, m1, m2, m3 = sym3_solve(s11, s12, s13, s22, s23, s33, rhs[0], rhs[1], rhs[2])
    # the pivots m1, m2 / m1, m3 / m2 above the floor, without dividing
    floor = RANK_TOL * max(s11, s22, s33)
    return x1, x2, x3, (m1 > floor) & (m2 > floor * m1) & (m3 > floor * m2)


@fused_helper
def _along_normals(r1, r2, r3, minv, lam):
    """M^-1 Phi^T lambda: the mass-weighted move along the constraint normals (6)."""
    m1, m2, m3, mx, my, mp = minv
    l1, l2, l3 = lam
    return (m1 * (r1[0] * l1), m2 * (r2[0] * l2), m3 * (r3[0] * l3),
            mx * (r1[1] * l1 + r2[1] * l2 + r3[1] * l3),
            my * (r1[2] * l1 + r2[2] * l2 + r3[2] * l3),
            mp * (r1[3] * l1 + r2[3] * l2 + r3[3] * l3))


@fused_helper
def _row_dot(row, i, v):
    """Row i of Phi_q (``row``: its four nonzeros) times a 6-vector v."""
    return row[0] * v[i] + row[1] * v[3] + row[2] * v[4] + row[3] * v[5]


# -- accelerations and the RK4 step ---------------------------------------------------
@fused_helper
def _accel(const, trig, xc, yc, qd):
    """qdd (6) at a pose (trig: _trig of its angles; x_C, y_C in m) and rates qd (6):
    the multiplier form of rrr3.constrained_accel. Returns (qdd, regular)."""
    shape, minv, damp, force, gains = const
    legs = shape[1]
    st1, ct1, st2, ct2, st3, ct3, sphi, cphi = trig
    dx1, dy1, cp1, sp1, f1, r1 = _leg(shape[0], legs[0], st1, ct1, sphi, cphi, xc, yc)
    dx2, dy2, cp2, sp2, f2, r2 = _leg(shape[0], legs[1], st2, ct2, sphi, cphi, xc, yc)
    dx3, dy3, cp3, sp3, f3, r3 = _leg(shape[0], legs[2], st3, ct3, sphi, cphi, xc, yc)
    w1, w2, w3, vx, vy, wp = qd
    free = ((force[0] - damp[0] * w1) * minv[0], (force[1] - damp[1] * w2) * minv[1],
            (force[2] - damp[2] * w3) * minv[2], -damp[3] * vx * minv[3],
            -damp[4] * vy * minv[4], -damp[5] * wp * minv[5])
    # S lambda = Phi qdd_free - gamma, gamma = -Phidot qd - 2 delta w0 Phi qd - w0^2 f
    k1, k2 = gains
    g1 = -_convective(shape[0], dx1, dy1, cp1, sp1, st1, ct1, w1, wp, vx, vy) \
        - (k1 * _row_dot(r1, 0, qd) + k2 * f1)
    g2 = -_convective(shape[0], dx2, dy2, cp2, sp2, st2, ct2, w2, wp, vx, vy) \
        - (k1 * _row_dot(r2, 1, qd) + k2 * f2)
    g3 = -_convective(shape[0], dx3, dy3, cp3, sp3, st3, ct3, w3, wp, vx, vy) \
        - (k1 * _row_dot(r3, 2, qd) + k2 * f3)
    rhs = (_row_dot(r1, 0, free) - g1, _row_dot(r2, 1, free) - g2, _row_dot(r3, 2, free) - g3)
    lam1, lam2, lam3, regular = _solve_s(r1, r2, r3, minv, rhs)
    n = _along_normals(r1, r2, r3, minv, (lam1, lam2, lam3))
    return (free[0] - n[0], free[1] - n[1], free[2] - n[2], free[3] - n[3], free[4] - n[4],
            free[5] - n[5]), regular


@fused_kernel
def rk4(p, x, u, h, work, projected, jams=None):
    """Advance x = [q, qd] of the 3RRR by h (s) with input u (N m or V) held: the RK4
    step of plant.integrators over rrr3.constrained_accel (with ``jams``, the plant's
    rows, its actuator faults: the drive of plant.motor.apply_drive); if ``projected`` (1.0; 0.0:
    not), then the projection (``project``), started from the sines and cosines of the
    new angles moved from the step's own (plant.trig) instead of calling sin and cos
    again. ``work``: a plant's work array (``project``'s fallback). Returns the
    rank of S (3.0), or -1.0 with x untouched where S is singular at a stage.

    ``projected`` is a float: numba compiles a kernel once for each literal int or bool
    its callers pass (True and False: twice, 7 s each), a float is never a literal."""
    const = _step_constants(p, u, jams)
    q = (x[0], x[1], x[2], x[3], x[4], x[5])
    w = (x[6], x[7], x[8], x[9], x[10], x[11])
    trig = _trig(q[0], q[1], q[2], q[5])
    # stage k evaluates at q + c v, qd + c a (c = 0, h/2, h/2, h; v, a: stage k-1's
    # rates); dq and dw accumulate k1 + 2 k2 + 2 k3 + k4 of qd and qdd
    c = 0.0
    v = w
    a = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    dq = dw = a
    for stage in range(4):
        if stage == 0:
            stage_trig = trig
        else:
            stage_trig = _moved_trig(trig, q[0] + c * v[0], q[1] + c * v[1], q[2] + c * v[2],
                                     q[5] + c * v[5], c * v[0], c * v[1], c * v[2], c * v[5])
        xc = q[3] + c * v[3]
        yc = q[4] + c * v[4]
        v = (w[0] + c * a[0], w[1] + c * a[1], w[2] + c * a[2], w[3] + c * a[3],
             w[4] + c * a[4], w[5] + c * a[5])
        a, regular = _accel(const, stage_trig, xc, yc, v)
        if not regular:
            return -1.0
        k = 1.0 if stage == 0 or stage == 3 else 2.0
        dq = (dq[0] + k * v[0], dq[1] + k * v[1], dq[2] + k * v[2], dq[3] + k * v[3],
              dq[4] + k * v[4], dq[5] + k * v[5])
        dw = (dw[0] + k * a[0], dw[1] + k * a[1], dw[2] + k * a[2], dw[3] + k * a[3],
              dw[4] + k * a[4], dw[5] + k * a[5])
        c = h if stage == 2 else 0.5 * h
    sixth = h / 6.0
    for i in range(6):
        x[i] += sixth * dq[i]
        x[6 + i] += sixth * dw[i]
    if projected:
        _projected(p, x, work, _moved_trig(trig, x[0], x[1], x[2], x[5], x[0] - q[0],
                                           x[1] - q[1], x[2] - q[2], x[5] - q[5]),
                   const[0], const[1])
    return 3.0


# -- projection -----------------------------------------------------------------------
@fused_kernel
def project(p, x, work):
    """rrr3.project in scalars: Gauss-Newton q <- q - M^-1 Phi^T S^-1 f until
    max|f| < tolerance, then qd <- qd - M^-1 Phi^T S^-1 Phi qd. Where S is
    singular it runs rrr3.project itself (on work's scratch rows, see
    plant.layout). Returns the number of position iterations taken."""
    return _projected(p, x, work, _trig(x[0], x[1], x[2], x[5]), _shape(p),
                      _inverse_mass(p, reflected_inertia3(p)))


@fused_kernel   # compiled once, called by project and rk4 (inlining it in both took 8 s)
def _projected(p, x, work, trig, shape, minv):
    """``project`` given trig = _trig of x's angles, _shape(p) and M_s^-1 (_inverse_mass)."""
    o = int(p[H_BODY])
    iterations = int(p[o + R_ITERATIONS])
    tol = p[o + R_TOLERANCE]
    q = (x[0], x[1], x[2], x[3], x[4], x[5])
    taken = 0
    while True:
        st1, ct1, st2, ct2, st3, ct3, sphi, cphi = trig
        _, _, _, _, f1, r1 = _leg(shape[0], shape[1][0], st1, ct1, sphi, cphi, q[3], q[4])
        _, _, _, _, f2, r2 = _leg(shape[0], shape[1][1], st2, ct2, sphi, cphi, q[3], q[4])
        _, _, _, _, f3, r3 = _leg(shape[0], shape[1][2], st3, ct3, sphi, cphi, q[3], q[4])
        if taken == iterations or max(abs(f1), abs(f2), abs(f3)) < tol:
            break
        lam1, lam2, lam3, regular = _solve_s(r1, r2, r3, minv, (f1, f2, f3))
        if not regular:
            return rrr3.project(p, x, work[rrr3.NQ + 2:])
        n = _along_normals(r1, r2, r3, minv, (lam1, lam2, lam3))
        moved_q = (q[0] - n[0], q[1] - n[1], q[2] - n[2], q[3] - n[3], q[4] - n[4],
                   q[5] - n[5])
        trig = _moved_trig(trig, moved_q[0], moved_q[1], moved_q[2], moved_q[5],
                           moved_q[0] - q[0], moved_q[1] - q[1], moved_q[2] - q[2],
                           moved_q[5] - q[5])
        q = moved_q
        taken += 1
    qd = (x[6], x[7], x[8], x[9], x[10], x[11])
    rates = (_row_dot(r1, 0, qd), _row_dot(r2, 1, qd), _row_dot(r3, 2, qd))
    lam1, lam2, lam3, regular = _solve_s(r1, r2, r3, minv, rates)
    if not regular:
        return rrr3.project(p, x, work[rrr3.NQ + 2:])
    n = _along_normals(r1, r2, r3, minv, (lam1, lam2, lam3))
    for i in range(6):
        x[i] = q[i]
        x[6 + i] = qd[i] - n[i]
    return taken
