"""3RRR planar parallel robot in redundant coordinates (paper 003 §3-5).

Coordinates q = [theta_1, theta_2, theta_3, x_C, y_C, phi] (rad, m, m, rad);
the three motor-driven base joints theta_i are the independent ones, the
platform pose (x_C, y_C, phi) the dependent ones. Constraints (eq. 36):

    f_i = |r_Bi - r_Ai|^2 - l2^2 = 0   (m^2),
    r_Ai = O_i + l1 [cos theta_i, sin theta_i],
    r_Bi = [x_C, y_C] + b [cos(phi + alpha_i), sin(phi + alpha_i)].

The mass matrix is constant and diagonal (eq. 35), there is no gravity
(horizontal plane) and no Coriolis term. Accelerations solve the stacked system
[R^T M_s; Phi_q] qdd = [R^T Q; gamma] (eqs. 21-23) with the Baumgarte right-hand
side gamma = -Phidot qd - 2 delta w0 Phi qd - w0^2 f (eq. 25). Where Phi_q has
full row rank that system is consistent and its unique solution is the
Lagrange-multiplier one,

    qdd = M^-1 Q - M^-1 Phi^T S^-1 (Phi M^-1 Q - gamma),   S = Phi M^-1 Phi^T (3 x 3),

which is what the kernel computes (a 3 x 3 Cholesky instead of an SVD per
evaluation). Where S is numerically singular (Phi_q itself loses rank) the
kernel switches to the pseudo-inverse of S. Passing the type-I/II singularities
(det Phi_theta = 0, det Phi_x = 0) needs no detection: Phi_q keeps full rank there.
"""
from dataclasses import dataclass

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.plant.layout import (
    DRIVE_TORQUE,
    H_BODY,
    H_DRIVE,
    H_MOTOR,
    MOT_JM,
    MOT_RATIO,
    MOTOR_STRIDE,
)
from hilrig.plant.linalg import cholesky_solve, nan_max, nan_sign, spd_solve_robust

NQ = 6
NACT = 3
NC = 3  # constraints

# offsets inside the model block
R_L1 = 0
R_L2 = 1
R_B = 2
R_OX = 3
R_OY = 6
R_ALPHA = 9
R_MASS = 12        # diagonal of the mechanism's mass matrix (6)
R_DAMP = 18        # diagonal of the mechanism's damping matrix (6)
R_BAUMGARTE = 24   # 1.0 on, 0.0 off
R_DELTA = 25
R_OMEGA0 = 26      # rad/s
R_PA_WEIGHT = 27   # post-adjustment weight M = w I
R_PA_PENALTY = 28  # post-adjustment penalty A = a I
R_ITERATIONS = 29  # Newton iterations of the corrections
R_TOLERANCE = 30   # stop tolerance of the corrections
R_COS_ALPHA = 31   # cos alpha_i (3), for the scalar kernels (plant.rrr3_scalar)
R_SIN_ALPHA = 34   # sin alpha_i (3)
BLOCK_SIZE = 37

RANK_TOL = 1e-12   # relative pivot below which S counts as singular


@dataclass(frozen=True)
class Rrr3Params:
    """Geometry, inertia and stabilisation settings of the 3RRR (SI units)."""

    l1: float                   # base link length O_i A_i, m
    l2: float                   # coupler length A_i B_i, m
    platform_radius: float      # b = |C B_i|, m
    base: np.ndarray            # O_i, shape (3, 2), m
    alpha: np.ndarray           # angles of C B_i in the platform frame, rad
    mass_diag: np.ndarray       # mechanism mass matrix diagonal (6): kg m^2 x3, kg x2, kg m^2
    damping_diag: np.ndarray    # mechanism damping diagonal (6), N m s/rad or N s/m
    baumgarte: bool = True
    baumgarte_delta: float = 1.0
    baumgarte_omega0: float = 100.0 * np.sqrt(2.0)
    post_adjust_weight: float = 0.1
    post_adjust_penalty: float = 100.0
    correction_iterations: int = 10
    correction_tolerance: float = 1e-14

    @staticmethod
    def paper(**overrides) -> "Rrr3Params":
        """The robot of paper 003 §5.2 (mechanism only; motors are added separately)."""
        l1, l2, m1, m2, jc1 = 0.581, 0.620, 2.072, 0.750, 0.13
        side, m7, jc7 = 0.2, 0.978, 0.007
        b = side / np.sqrt(3.0)
        leg = jc1 + 0.25 * m1 * l1 ** 2 + 0.5 * m2 * l1 ** 2
        values = dict(
            l1=l1, l2=l2, platform_radius=b,
            base=np.array([[0.0, 0.0], [1.2, 0.0], [0.6, 0.6 * np.sqrt(3.0)]]),
            alpha=np.array([7 * np.pi / 6, -np.pi / 6, np.pi / 2]),
            mass_diag=np.array([leg, leg, leg, m7 + 1.5 * m2, m7 + 1.5 * m2,
                                jc7 + 1.5 * m2 * b ** 2]),
            damping_diag=np.zeros(6))
        values.update(overrides)
        return Rrr3Params(**values)

    def block(self) -> np.ndarray:
        out = np.zeros(BLOCK_SIZE)
        out[R_L1], out[R_L2], out[R_B] = self.l1, self.l2, self.platform_radius
        out[R_OX:R_OX + 3] = self.base[:, 0]
        out[R_OY:R_OY + 3] = self.base[:, 1]
        out[R_ALPHA:R_ALPHA + 3] = self.alpha
        out[R_COS_ALPHA:R_COS_ALPHA + 3] = np.cos(self.alpha)
        out[R_SIN_ALPHA:R_SIN_ALPHA + 3] = np.sin(self.alpha)
        out[R_MASS:R_MASS + 6] = self.mass_diag
        out[R_DAMP:R_DAMP + 6] = self.damping_diag
        out[R_BAUMGARTE] = 1.0 if self.baumgarte else 0.0
        out[R_DELTA] = self.baumgarte_delta
        out[R_OMEGA0] = self.baumgarte_omega0
        out[R_PA_WEIGHT] = self.post_adjust_weight
        out[R_PA_PENALTY] = self.post_adjust_penalty
        out[R_ITERATIONS] = self.correction_iterations
        out[R_TOLERANCE] = self.correction_tolerance
        return out


@kernel
def _leg(p, q, i):
    """Leg i: d = r_Bi - r_Ai (m) and the unit directions of O_iA_i and C B_i."""
    o = int(p[H_BODY])
    l1 = p[o + R_L1]
    b = p[o + R_B]
    ct = np.cos(q[i])
    st = np.sin(q[i])
    cp = np.cos(q[5] + p[o + R_ALPHA + i])
    sp = np.sin(q[5] + p[o + R_ALPHA + i])
    dx = q[3] + b * cp - p[o + R_OX + i] - l1 * ct
    dy = q[4] + b * sp - p[o + R_OY + i] - l1 * st
    return dx, dy, ct, st, cp, sp


@kernel
def constraints(p, q, f):
    """f_i(q) of eq. (36), m^2."""
    l2 = p[int(p[H_BODY]) + R_L2]
    for i in range(NC):
        dx, dy, _, _, _, _ = _leg(p, q, i)
        f[i] = dx * dx + dy * dy - l2 * l2


@kernel
def _jacobian_row(jac, i, l1, b, dx, dy, ct, st, cp, sp):
    for k in range(NACT):
        jac[i, k] = 0.0
    jac[i, i] = 2.0 * l1 * (dx * st - dy * ct)
    jac[i, 3] = 2.0 * dx
    jac[i, 4] = 2.0 * dy
    jac[i, 5] = 2.0 * b * (dy * cp - dx * sp)


@kernel
def jacobian(p, q, jac):
    """Phi_q = df/dq (3 x 6): m per rad in the theta and phi columns, m in x_C, y_C."""
    o = int(p[H_BODY])
    for i in range(NC):
        dx, dy, ct, st, cp, sp = _leg(p, q, i)
        _jacobian_row(jac, i, p[o + R_L1], p[o + R_B], dx, dy, ct, st, cp, sp)


@kernel
def kinematics(p, q, qd, jac, f, conv):
    """Phi_q (3 x 6), f (m^2) and Phidot_q qd (m^2/s^2: the part of d^2 f/dt^2 without
    qdd) in one pass over the legs, so the trigonometry runs once per leg."""
    o = int(p[H_BODY])
    l1 = p[o + R_L1]
    l2 = p[o + R_L2]
    b = p[o + R_B]
    for i in range(NC):
        dx, dy, ct, st, cp, sp = _leg(p, q, i)
        f[i] = dx * dx + dy * dy - l2 * l2
        _jacobian_row(jac, i, l1, b, dx, dy, ct, st, cp, sp)
        w = qd[i]
        wp = qd[5]
        vx = qd[3] - b * sp * wp + l1 * st * w
        vy = qd[4] + b * cp * wp - l1 * ct * w
        ax = -b * cp * wp * wp + l1 * ct * w * w
        ay = -b * sp * wp * wp + l1 * st * w * w
        conv[i] = 2.0 * (vx * vx + vy * vy) + 2.0 * (dx * ax + dy * ay)


@kernel
def mass_and_bias(p, q, qd, mass, bias):
    """Constant diagonal mass matrix (eq. 35) and bias = D qd (no gravity, no Coriolis)."""
    o = int(p[H_BODY])
    for i in range(NQ):
        for j in range(NQ):
            mass[i, j] = 0.0
        mass[i, i] = p[o + R_MASS + i]
        bias[i] = p[o + R_DAMP + i] * qd[i]


@kernel
def coupled_mass_diag(p, out):
    """Diagonal of M_s = M + B r^2 J_m Z (eq. 16): the mass the corrections weigh with."""
    o = int(p[H_BODY])
    for i in range(NQ):
        out[i] = p[o + R_MASS + i]
    if int(p[H_DRIVE]) != DRIVE_TORQUE:
        mo = int(p[H_MOTOR])
        for j in range(NACT):
            ratio = p[mo + j * MOTOR_STRIDE + MOT_RATIO]
            out[j] += ratio * ratio * p[mo + j * MOTOR_STRIDE + MOT_JM]


@kernel
def _weighted_gram(jac, minv, s):
    """S = Phi M^-1 Phi^T (3 x 3)."""
    for i in range(NC):
        for j in range(NC):
            acc = 0.0
            for k in range(NQ):
                acc += jac[i, k] * minv[k] * jac[j, k]
            s[i, j] = acc


@kernel
def constrained_accel(p, q, qd, mass, bias, force, qdd, scratch):
    """qdd (eq. 23 with the Baumgarte rows of eq. 25) by the multiplier form.

    ``mass`` is the coupled (diagonal) M_s, ``bias`` D_s qd, ``force`` B_s u.
    ``scratch`` is 2-D, at least 18 x 6. Returns the rank of S used (3 = regular).
    """
    o = int(p[H_BODY])
    jac = scratch[0:3, :NQ]
    s = scratch[3:6, :NC]
    solve_tmp = scratch[6:14, :NC]
    f = scratch[14, :NC]
    conv = scratch[15, :NC]
    rhs = scratch[16, :NC]
    minv = scratch[17, :NQ]
    kinematics(p, q, qd, jac, f, conv)
    for k in range(NQ):
        minv[k] = 1.0 / mass[k, k]
        qdd[k] = (force[k] - bias[k]) * minv[k]
    baumgarte = p[o + R_BAUMGARTE] != 0.0
    if baumgarte:
        two_delta_w0 = 2.0 * p[o + R_DELTA] * p[o + R_OMEGA0]
        w0_sq = p[o + R_OMEGA0] * p[o + R_OMEGA0]
    for i in range(NC):
        gamma = -conv[i]
        if baumgarte:
            fdot = 0.0
            for k in range(NQ):
                fdot += jac[i, k] * qd[k]
            gamma -= two_delta_w0 * fdot + w0_sq * f[i]
        acc = 0.0
        for k in range(NQ):
            acc += jac[i, k] * qdd[k]
        rhs[i] = acc - gamma
    _weighted_gram(jac, minv, s)
    rank = spd_solve_robust(s, rhs, NC, solve_tmp, RANK_TOL)
    for k in range(NQ):
        acc = 0.0
        for i in range(NC):
            acc += jac[i, k] * rhs[i]
        qdd[k] -= minv[k] * acc
    return rank


@kernel
def det_phi_theta(p, q):
    """det(df/dtheta): Phi_theta is diagonal. Zero at type-I (serial) singularities."""
    o = int(p[H_BODY])
    l1 = p[o + R_L1]
    det = 1.0
    for i in range(NC):
        dx, dy, ct, st, _, _ = _leg(p, q, i)
        det *= 2.0 * l1 * (dx * st - dy * ct)
    return det


@kernel
def _det3(a):
    return (a[0, 0] * (a[1, 1] * a[2, 2] - a[1, 2] * a[2, 1])
            - a[0, 1] * (a[1, 0] * a[2, 2] - a[1, 2] * a[2, 0])
            + a[0, 2] * (a[1, 0] * a[2, 1] - a[1, 1] * a[2, 0]))


@kernel
def det_phi_x(p, q, scratch):
    """det(df/d[x_C, y_C, phi]). Zero at type-II (parallel) singularities.

    ``scratch`` is 2-D, at least 3 x 6.
    """
    jac = scratch[0:3, :NQ]
    jacobian(p, q, jac)
    return _det3(jac[:, 3:6])


@kernel
def residual(p, q, scratch):
    """max_i |f_i(q)|, m^2. ``scratch`` is 2-D, at least 1 x 3."""
    f = scratch[0, :NC]
    constraints(p, q, f)
    return max(abs(f[0]), abs(f[1]), abs(f[2]))


@kernel
def row_diagnostics(p, q, jac):
    """residual, det_phi_theta and det_phi_x of one row q in one pass over the legs, so
    the trigonometry runs once per leg: the same values, bit for bit, as the three
    functions give (the same expressions in the same order). ``jac`` is 3 x 6 scratch."""
    o = int(p[H_BODY])
    l1 = p[o + R_L1]
    l2 = p[o + R_L2]
    b = p[o + R_B]
    f0, f1, f2 = 0.0, 0.0, 0.0
    det = 1.0
    for i in range(NC):
        dx, dy, ct, st, cp, sp = _leg(p, q, i)
        f = dx * dx + dy * dy - l2 * l2
        if i == 0:
            f0 = f
        elif i == 1:
            f1 = f
        else:
            f2 = f
        det *= 2.0 * l1 * (dx * st - dy * ct)
        _jacobian_row(jac, i, l1, b, dx, dy, ct, st, cp, sp)
    return max(abs(f0), abs(f1), abs(f2)), det, _det3(jac[:, 3:6])


@kernel
def post_adjust(p, x, scratch):
    """The paper's post-adjustment (§4, eqs. 26-34): move only x_C, y_C, phi and their rates.

    Positions: Newton on h = W (q_d - q_d*) + Phi_d^T A f = 0 with
    H ~ W + Phi_d^T A Phi_d (eqs. 28-29); velocities: eq. (34). W = w I and
    A = a I from the params. Phi_d = Phi_x is singular at type-II singularities,
    where this cannot remove the residual. ``scratch`` is 2-D, at least 9 x 6.
    Returns the number of position iterations taken.
    """
    o = int(p[H_BODY])
    weight = p[o + R_PA_WEIGHT]
    penalty = p[o + R_PA_PENALTY]
    iterations = int(p[o + R_ITERATIONS])
    tol = p[o + R_TOLERANCE]
    jac = scratch[0:3, :NQ]
    f = scratch[3, :NC]
    target = scratch[4, :3]
    h = scratch[5, :3]
    hess = scratch[6:9, :3]
    for k in range(3):
        target[k] = x[3 + k]
    taken = 0
    for _ in range(iterations):
        constraints(p, x, f)
        jacobian(p, x, jac)
        norm = 0.0
        for k in range(3):
            acc = weight * (x[3 + k] - target[k])
            for i in range(NC):
                acc += jac[i, 3 + k] * penalty * f[i]
            h[k] = -acc
            norm += acc * acc
        if np.sqrt(norm) < tol:
            break
        _penalised_hessian(jac, weight, penalty, hess)
        cholesky_solve(hess, h, 3)
        for k in range(3):
            x[3 + k] += h[k]
        taken += 1
    # velocities, eq. (34): [W + Phi_d^T A Phi_d] qd_d = W qd_d* - Phi_d^T A Phi_i qd_i
    jacobian(p, x, jac)
    for k in range(3):
        acc = weight * x[NQ + 3 + k]
        for i in range(NC):
            acc -= jac[i, 3 + k] * penalty * jac[i, i] * x[NQ + i]
        h[k] = acc
    _penalised_hessian(jac, weight, penalty, hess)
    cholesky_solve(hess, h, 3)
    for k in range(3):
        x[NQ + 3 + k] = h[k]
    return taken


@kernel
def _penalised_hessian(jac, weight, penalty, hess):
    """W + Phi_d^T A Phi_d (3 x 3) with W = weight I, A = penalty I."""
    for a in range(3):
        for b in range(3):
            acc = weight if a == b else 0.0
            for i in range(NC):
                acc += penalty * jac[i, 3 + a] * jac[i, 3 + b]
            hess[a, b] = acc


@kernel
def project(p, x, scratch):
    """Mass-orthogonal projection of all coordinates and rates onto the constraint manifolds.

    Positions: Gauss-Newton q <- q - M^-1 Phi^T S^-1 f until max|f| < tolerance;
    velocities: qd <- qd - M^-1 Phi^T S^-1 Phi qd. Uses the full Phi_q, so it
    keeps working where Phi_x is singular (after Bayo and Ledesma). ``scratch``
    is 2-D, at least 16 x 6. Returns the number of position iterations taken.
    """
    o = int(p[H_BODY])
    iterations = int(p[o + R_ITERATIONS])
    tol = p[o + R_TOLERANCE]
    jac = scratch[0:3, :NQ]
    f = scratch[3, :NC]
    minv = scratch[4, :NQ]
    s = scratch[5:8, :NC]
    solve_tmp = scratch[8:16, :NC]
    coupled_mass_diag(p, minv)
    for k in range(NQ):
        minv[k] = 1.0 / minv[k]
    taken = 0
    for _ in range(iterations):
        constraints(p, x, f)
        if max(abs(f[0]), abs(f[1]), abs(f[2])) < tol:
            break
        jacobian(p, x, jac)
        _remove_along_constraint_normals(jac, minv, s, f, solve_tmp, x, 0)
        taken += 1
    jacobian(p, x, jac)
    for i in range(NC):
        acc = 0.0
        for k in range(NQ):
            acc += jac[i, k] * x[NQ + k]
        f[i] = acc
    _remove_along_constraint_normals(jac, minv, s, f, solve_tmp, x, NQ)
    return taken


@kernel
def _remove_along_constraint_normals(jac, minv, s, violation, solve_tmp, x, offset):
    """x[offset:offset+6] -= M^-1 Phi^T S^-1 violation: the mass-orthogonal correction
    that removes a constraint violation to first order (S = Phi M^-1 Phi^T)."""
    _weighted_gram(jac, minv, s)
    spd_solve_robust(s, violation, NC, solve_tmp, RANK_TOL)
    for k in range(NQ):
        acc = 0.0
        for i in range(NC):
            acc += jac[i, k] * violation[i]
        x[offset + k] -= minv[k] * acc


@kernel
def row_metrics(p, q, scratch, out):
    """The 3RRR's metrics of a run's rows q (one row of coordinates per step) in one pass,
    without storing the per-row diagnostics: out[0] the max constraint residual (m^2;
    rrr3.residual), out[1] and out[2] the sign changes of det Phi_x and det Phi_theta
    (rrr3.det_phi_x, det_phi_theta; all three from row_diagnostics, which shares
    the legs' trigonometry), as measure gives them from the stored diagnostics
    (a NaN residual makes out[0] NaN; a NaN determinant counts as a change of sign
    either side, zeros are skipped). ``scratch`` is 3 x 6."""
    peak, changes_x, changes_theta = 0.0, 0.0, 0.0
    last_x, last_theta = 0.0, 0.0          # the last nonzero sign (0: none yet)
    for k in range(q.shape[0]):
        residual, det_theta, det_x = row_diagnostics(p, q[k], scratch)
        peak = nan_max(peak, residual)
        sign = nan_sign(det_x)
        if sign != 0.0:
            if last_x != 0.0 and sign != last_x:
                changes_x += 1.0
            last_x = sign
        sign = nan_sign(det_theta)
        if sign != 0.0:
            if last_theta != 0.0 and sign != last_theta:
                changes_theta += 1.0
            last_theta = sign
    out[0], out[1], out[2] = peak, changes_x, changes_theta
