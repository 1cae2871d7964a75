"""Paper 002's inverse-dynamics algorithm against a continuous-time reference written here
from the paper, independently of plant.flex_rp and controllers.flex_feedforward: its own
element integrals (Gauss quadrature of the Hermite shapes, not the closed forms), its own
Lagrange equations and rigid inverse kinematics, the rigid force and torque as continuous
functions of t, and scipy's Radau for the flexible forward run. The flexible feed-forward
is then rows d, q of M(Q) Q'' + bias with Q = [d_r, q_r, e] and e'' the continuous robot's
elastic accelerations (the paper's Fig. 6).

Kinetic energy of the robot (link 1 a mass m1 at (L1, d); a point s of link 2 at
(L1, d) + R(q) (s, w(s)), the tip mass m_t at s = L2):

    2T = m_d d'^2 + (J0 + e^T Me e) q'^2 + 2 d' q' (S cos q - sin q b.e)
         + 2 d' cos q b.e' + 2 q' c.e' + e'^T Me e'

with Me = int mu N^T N, b = int mu N, c = int mu s N (plus the tip mass), m_d = m1 +
mu L2 + m_t, S = mu L2^2 / 2 + m_t L2, J0 = mu L2^3 / 3 + m_t L2^2. Lagrange's equations
give the velocity terms
    d: -q'^2 (S sin q + cos q b.e) - 2 q' sin q b.e'
    q: 2 q' e^T Me e'
    e: -q'^2 Me e + K e + (alpha Me + beta K) e'
"""
import math

import numpy as np
import pytest
from conftest import config
from hilrig.controllers import flex_feedforward as ff
from scipy.integrate import solve_ivp

# Table 1 of the paper (E printed "2.1010": 2e10 Pa); the desired path
# x_E = 0.25 - 0.1 sin(t - pi/2), y_E = 0.1 sin t over T = 2 s
L1, M1, L2, WIDTH, THICK, RHO, E = 0.05, 1.4, 0.3, 0.02, 0.001, 7850.0, 2e10
ALPHA, BETA, MT, T_END = 0.005, 0.007, 0.01, 2.0
MU, EI = RHO * WIDTH * THICK, E * WIDTH * THICK ** 3 / 12


def beam(n: int):
    """Me, K, b, c of link 2 clamped at its hub (2n elastic coordinates), by 6-point Gauss
    quadrature of the cubic Hermite shapes over each of n elements."""
    le = L2 / n
    nodes, weights = np.polynomial.legendre.leggauss(6)
    size = 2 * (n + 1)
    mass, stiff, first, rotary = (np.zeros((size, size)), np.zeros((size, size)),
                                  np.zeros(size), np.zeros(size))
    for j in range(n):
        dofs = slice(2 * j, 2 * j + 4)
        for g, wg in zip(nodes, weights):
            x, w = 0.5 * le * (g + 1.0), 0.5 * le * wg
            xi = x / le
            shape = np.array([1 - 3 * xi ** 2 + 2 * xi ** 3, le * (xi - 2 * xi ** 2 + xi ** 3),
                              3 * xi ** 2 - 2 * xi ** 3, le * (xi ** 3 - xi ** 2)])
            curve = np.array([-6 + 12 * xi, le * (-4 + 6 * xi), 6 - 12 * xi,
                              le * (6 * xi - 2)]) / le ** 2
            mass[dofs, dofs] += w * MU * np.outer(shape, shape)
            stiff[dofs, dofs] += w * EI * np.outer(curve, curve)
            first[dofs] += w * MU * shape
            rotary[dofs] += w * MU * (j * le + x) * shape
    mass[-2, -2] += MT
    first[-2] += MT
    rotary[-2] += MT * L2
    free = slice(2, size)
    return mass[free, free], stiff[free, free], first[free], rotary[free]


def rigid_path(t: float, sign: float):
    """d, q, d', q', d'', q'' of the rigid robot with its tip on the path, on the branch
    sign q >= 0. On this path 1 - cos q = (2/3) sin^2(t/2); at t = 0 (stretched) the
    limits q' = sign / sqrt(3), q'' = 0."""
    x, y = 0.25 + 0.1 * math.cos(t), 0.1 * math.sin(t)
    xd, yd, xdd, ydd = -0.1 * math.sin(t), 0.1 * math.cos(t), -0.1 * math.cos(t), -y
    q = sign * 2.0 * math.asin(math.sqrt(math.sin(0.5 * t) ** 2 / 3.0))
    sq, cq = math.sin(q), (x - L1) / L2
    if abs(sq) < 1e-12:
        qd, qdd = sign / math.sqrt(3.0), 0.0
    else:
        qd = -xd / (L2 * sq)
        qdd = -(xdd / L2 + cq * qd ** 2) / sq
    return (y - L2 * sq, q, yd - L2 * cq * qd, qd,
            ydd + L2 * sq * qd ** 2 - L2 * cq * qdd, qdd)


class Robot:
    """The flexible P-R robot of n elements (module docstring), damping on e only."""

    def __init__(self, n: int):
        self.me, self.k, self.b, self.c = beam(n)
        self.nq = 2 + 2 * n
        self.md = M1 + MU * L2 + MT
        self.s = MU * L2 ** 2 / 2 + MT * L2
        self.j0 = MU * L2 ** 3 / 3 + MT * L2 ** 2
        self.damping = ALPHA * self.me + BETA * self.k

    def mass_bias(self, Q, V):
        q, e, qv, ev = Q[1], Q[2:], V[1], V[2:]
        s, c = math.sin(q), math.cos(q)
        m = np.zeros((self.nq, self.nq))
        m[0, 0] = self.md
        m[0, 1] = m[1, 0] = self.s * c - s * self.b @ e
        m[1, 1] = self.j0 + e @ self.me @ e
        m[0, 2:] = m[2:, 0] = c * self.b
        m[1, 2:] = m[2:, 1] = self.c
        m[2:, 2:] = self.me
        bias = np.zeros(self.nq)
        bias[0] = -qv ** 2 * (self.s * s + c * self.b @ e) - 2 * qv * s * self.b @ ev
        bias[1] = 2 * qv * e @ self.me @ ev
        bias[2:] = -qv ** 2 * self.me @ e + self.k @ e + self.damping @ ev
        return m, bias

    def rigid_force(self, t: float, sign: float) -> np.ndarray:
        """[F, tau] of the rigid robot (e = 0) along the path at t, N and N m."""
        _, q, _, qd, ddd, qdd = rigid_path(t, sign)
        return np.array([self.md * ddd + self.s * math.cos(q) * qdd
                         - self.s * math.sin(q) * qd ** 2,
                         self.s * math.cos(q) * ddd + self.j0 * qdd])

    def rhs(self, t, y, sign):
        m, bias = self.mass_bias(y[:self.nq], y[self.nq:])
        force = np.zeros(self.nq)
        force[:2] = self.rigid_force(t, sign)
        return np.concatenate([y[self.nq:], np.linalg.solve(m, force - bias)])

    def jacobian(self, t, y, sign):
        """The linear elastic part at y's mass matrix (enough for Radau's iteration)."""
        m, _ = self.mass_bias(y[:self.nq], y[self.nq:])
        inverse = np.linalg.inv(m)[:, 2:]
        jac = np.zeros((2 * self.nq, 2 * self.nq))
        jac[:self.nq, self.nq:] = np.eye(self.nq)
        jac[self.nq:, 2:self.nq] = -inverse @ self.k
        jac[self.nq:, self.nq + 2:] = -inverse @ self.damping
        return jac


def continuous_feedforward(n: int, sign: float, t: np.ndarray):
    """(rigid, flexible): [F, tau] at the times t of the paper's algorithm on the
    continuous robot (N, N m)."""
    robot, nq = Robot(n), 2 + 2 * n
    y0 = np.zeros(2 * nq)
    d, q, dd, qd, _, _ = rigid_path(0.0, sign)
    y0[[0, 1, nq, nq + 1]] = d, q, dd, qd
    sol = solve_ivp(robot.rhs, (0.0, t[-1]), y0, method="Radau", t_eval=t, rtol=1e-8,
                    atol=1e-11, jac=robot.jacobian, args=(sign,))
    assert sol.success
    rigid, flexible = np.zeros((len(t), 2)), np.zeros((len(t), 2))
    for k, tk in enumerate(t):
        y = sol.y[:, k]
        elastic_acc = robot.rhs(tk, y, sign)[nq + 2:]
        d, q, dd, qd, ddd, qdd = rigid_path(tk, sign)
        m, bias = robot.mass_bias(np.concatenate([[d, q], y[2:nq]]),
                                  np.concatenate([[dd, qd], y[nq + 2:]]))
        flexible[k] = (m @ np.concatenate([[ddd, qdd], elastic_acc]) + bias)[:2]
        rigid[k] = robot.rigid_force(tk, sign)
    return rigid, flexible


def branch_config(n: int, branch: str, *overrides: str):
    """configs/flex_rp.toml with n elements on a branch, started on it."""
    sign = 1.0 if branch == "positive" else -1.0
    rates = [0.1 - sign * 0.3 / math.sqrt(3), sign / math.sqrt(3)]
    return config("flex_rp", f"plant.elements={n}", f'controller.branch="{branch}"',
                  f"plant.start_rates={rates}", *overrides)


def test_the_config_is_table_1():
    p = config("flex_rp").plant
    assert (p.link1_length, p.link1_mass, p.link2_length, p.width, p.thickness) \
        == (L1, M1, L2, WIDTH, THICK)
    assert (p.density, p.youngs_modulus, p.rayleigh_alpha, p.rayleigh_beta, p.payload_mass) \
        == (RHO, E, ALPHA, BETA, MT)
    assert p.hub_inertia == 0.0 and p.damping_on == "elastic"      # the massless hub


@pytest.mark.slow
@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize("branch", ["positive", "negative"])
def test_flexible_feedforward_equals_the_continuous_robots(n, branch):
    """The maximum force and torque agree to 5 %; so does the flexible correction
    (flexible minus rigid) after the start's 20 ms transient, at both element counts:
    the error does not grow with n (before the fix: the torque 7 times the reference's at
    n = 5, 55 times at n = 10). Over the transient (the fast modes' answer to the start,
    a few ticks) the 1 ms grid gets the correction to 35 % of its largest value."""
    result = ff.compute(branch_config(n, branch))
    rigid, flexible = continuous_feedforward(n, 1.0 if branch == "positive" else -1.0,
                                             result.t)
    np.testing.assert_allclose(result.force_rigid, rigid, rtol=0, atol=1e-12)
    ours, theirs = np.max(np.abs(result.force_flexible), axis=0), np.max(np.abs(flexible), axis=0)
    assert ours == pytest.approx(theirs, rel=0.05)
    correction, reference = result.force_flexible - result.force_rigid, flexible - rigid
    scale = np.max(np.abs(reference), axis=0)
    assert np.all(scale > 1e-6)     # a correction that the comparison can see
    settled = result.t >= 0.02
    assert np.all(np.max(np.abs(correction - reference)[settled], axis=0) < 0.05 * scale)
    assert np.all(np.max(np.abs(correction - reference), axis=0) < 0.35 * scale)


def test_hil_analyze_flex_reports_the_continuous_robots_flexible_feedforward(tmp_path):
    """`hil analyze flex`'s figures (analysis.flex_report) on configs/flex_rp.toml carry
    the fixed algorithm: the flexible feed-forward's maxima are the continuous robot's
    (0.0325 N, 6.68e-4 N m: test_flexible_feedforward_equals_the_continuous_robots), not
    the 0.0245 N and 4.67e-3 N m of the sample taken after each force step."""
    from hilrig.analysis import flex_report
    figures, _ = flex_report.report(config("flex_rp"))
    force, torque = figures["feedforward_flexible_max"]
    assert force == pytest.approx(0.0325, rel=0.01) and torque == pytest.approx(6.68e-4, rel=0.01)
    assert figures["joint_deviation_max"][1] == pytest.approx(1.6e-3, rel=0.1)   # the robot's
