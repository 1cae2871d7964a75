"""The flexible P-R robot of paper 002 (plant.flex_rp.robot, plant.flex_rp.fem_beam): element matrices and
the assembled equations derived again with sympy from the kinetic and elastic energy, FEM
convergence against the analytic cantilever with a tip mass, energy and power balances,
the rigid limit, and its registration through the hilrig.plants entry points."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import sympy as sp
from hilrig.plant.flex_rp import fem_beam
from hilrig.plant.flex_rp import robot as flex_rp
from hilrig.plant.factory import plant_from_config
from hilrig.settings.config import resolve
from hilrig.rt.sim import simulate
from scipy.integrate import solve_ivp


def table(**changes) -> SimpleNamespace:
    """Table 1 of paper 002 as a [plant] table, with changes."""
    return SimpleNamespace(**{**flex_rp.PAPER, "damping_on": "elastic", "hub_inertia": 0.0,
                              **changes})


def flex_config(sim=None, input_torque=(0.0, 0.0), **plant):
    return resolve({"plant": {"model": "flex_rp", "drive": "torque", **plant},
                    "sim": {"integrator": "rosenbrock", **(sim or {})},
                    "input": {"torque": list(input_torque)}})


# -- element matrices and the assembled equations, derived with sympy ------------------

X, LE, MU, EI, START = sp.symbols("x l_e mu EI s_0", positive=True)
XI = X / LE
HERMITE = sp.Matrix([[1 - 3 * XI ** 2 + 2 * XI ** 3, LE * (XI - 2 * XI ** 2 + XI ** 3),
                      3 * XI ** 2 - 2 * XI ** 3, LE * (XI ** 3 - XI ** 2)]])


def test_element_matrices_equal_the_integrals_of_the_hermite_shapes():
    """Consistent mass, stiffness and both first moments against sympy's integrals."""
    mass = sp.integrate(MU * HERMITE.T * HERMITE, (X, 0, LE))
    curvature = sp.diff(HERMITE, X, 2)
    stiffness = sp.integrate(EI * curvature.T * curvature, (X, 0, LE))
    first = sp.integrate(MU * HERMITE, (X, 0, LE))
    rotary = sp.integrate(MU * (START + X) * HERMITE, (X, 0, LE))
    values = {MU: 0.157, LE: 0.06, EI: 1.0 / 30.0, START: 0.12}
    num = lambda m: np.array(m.subs(values), dtype=float)
    np.testing.assert_allclose(fem_beam.element_mass(0.157, 0.06), num(mass), rtol=1e-14)
    np.testing.assert_allclose(fem_beam.element_stiffness(1 / 30, 0.06), num(stiffness),
                               rtol=1e-13)
    np.testing.assert_allclose(fem_beam.element_first_moment(0.157, 0.06), num(first)[0],
                               rtol=1e-14)
    np.testing.assert_allclose(fem_beam.element_rotary_moment(0.157, 0.06, 0.12),
                               num(rotary)[0], rtol=1e-14)
    # the paper's eq. (16) is the consistent mass matrix: 13/35, 11/210 le, 9/70, -13/420 le
    printed = np.array([13 / 35, 11 / 210 * 0.06, 9 / 70, -13 / 420 * 0.06]) * 0.157 * 0.06
    np.testing.assert_allclose(fem_beam.element_mass(0.157, 0.06)[0], printed, rtol=1e-14)


@pytest.mark.slow
def test_mechanism_matches_lagrange_equations_derived_with_sympy(rng):
    """M(Q), the velocity terms and V of two elements with the tip mass and a hub inertia,
    from the kinetic energy of the points of link 2 (r = (L1, d) + R(q) (s, w)) and
    1/2 int EI w''^2."""
    p = table(elements=2, rayleigh_alpha=0.0, rayleigh_beta=0.0, hub_inertia=2e-4)
    mu = p.density * p.width * p.thickness
    ei = p.youngs_modulus * p.width * p.thickness ** 3 / 12
    le = p.link2_length / 2
    coords = sp.symbols("d q e1 e2 e3 e4", real=True)
    rates = sp.symbols("dd qd ed1 ed2 ed3 ed4", real=True)
    d, q = coords[:2]
    nodal = [[0, 0, coords[2], coords[3]], list(coords[2:6])]
    values = {LE: le}
    kinetic = sp.Rational(1, 2) * (p.link1_mass * rates[0] ** 2 + p.hub_inertia * rates[1] ** 2)
    potential = 0
    rot = sp.Matrix([[sp.cos(q), -sp.sin(q)], [sp.sin(q), sp.cos(q)]])

    def velocity(point):
        return sum((sp.diff(point, c) * r for c, r in zip(coords, rates)), sp.zeros(2, 1))

    for j in range(2):
        w = (HERMITE * sp.Matrix(nodal[j])).subs(values)[0]
        point = sp.Matrix([p.link1_length, d]) + rot * sp.Matrix([j * le + X, w])
        v = velocity(point)
        density = sp.expand(v.dot(v))
        kinetic += sp.Rational(1, 2) * mu * sp.integrate(density, (X, 0, le))
        potential += sp.Rational(1, 2) * ei * sp.integrate(sp.diff(w, X, 2) ** 2, (X, 0, le))
        if j == 1:
            tip = point.subs(X, le)
            vt = velocity(tip)
            kinetic += sp.Rational(1, 2) * p.payload_mass * vt.dot(vt)
    mass = sp.hessian(kinetic, rates)
    bias = sp.Matrix([sum(sp.diff(mass[i, :] * sp.Matrix(rates), c)[0] * r
                          for c, r in zip(coords, rates)) - sp.diff(kinetic, coords[i])
                      for i in range(6)]) + sp.Matrix([sp.diff(potential, c) for c in coords])
    f_mass = sp.lambdify([coords, rates], mass, "numpy")
    f_bias = sp.lambdify([coords, rates], bias, "numpy")
    f_pot = sp.lambdify([coords], potential, "numpy")
    params = flex_rp.params(p)
    for _ in range(3):
        Q = rng.normal(size=6) * [0.1, 1.0, 0.01, 0.05, 0.02, 0.1]
        Qd = rng.normal(size=6)
        m, b = np.zeros((6, 6)), np.zeros(6)
        v = flex_rp.mechanism(Q, Qd, params, m, b)
        np.testing.assert_allclose(m, np.array(f_mass(Q, Qd), dtype=float), rtol=1e-12,
                                   atol=1e-15)
        np.testing.assert_allclose(b, np.array(f_bias(Q, Qd), dtype=float).ravel(),
                                   rtol=1e-10, atol=1e-12)
        assert v == pytest.approx(float(f_pot(Q)), rel=1e-12)


def test_both_readings_of_the_rayleigh_damping(rng):
    """damping_on = "elastic": D = alpha M_e + beta K on e only; "all": alpha M(Q) + beta K on
    every coordinate (the bias's part linear in the rates, taken by differences)."""
    Q = rng.normal(size=12) * 0.01
    Qd = rng.normal(size=12)
    for reading in ("elastic", "all"):
        p = table(damping_on=reading)
        undamped = table(rayleigh_alpha=0.0, rayleigh_beta=0.0)
        m, b, b0 = np.zeros((12, 12)), np.zeros(12), np.zeros(12)
        flex_rp.mechanism(Q, Qd, flex_rp.params(p), m, b)
        flex_rp.mechanism(Q, Qd, flex_rp.params(undamped), np.zeros((12, 12)), b0)
        beam = flex_rp.beam(p)
        stiffness = np.zeros((12, 12))
        stiffness[2:, 2:] = beam.stiffness
        if reading == "all":
            damping = p.rayleigh_alpha * m + p.rayleigh_beta * stiffness
        else:
            damping = np.zeros((12, 12))
            damping[2:, 2:] = p.rayleigh_alpha * beam.mass + p.rayleigh_beta * beam.stiffness
        np.testing.assert_allclose(b - b0, damping @ Qd, rtol=1e-12, atol=1e-15)


# -- FEM convergence --------------------------------------------------------------------

def clamped_frequencies(p, count=3):
    beam = flex_rp.beam(p)
    from scipy.linalg import eigh
    return np.sqrt(eigh(beam.stiffness, beam.mass, eigvals_only=True)[:count])


def test_clamped_frequencies_converge_to_the_analytic_cantilever_with_tip_mass():
    """First three clamped frequencies of link 2 with its 10 g payload against the roots
    of the frequency equation; n = 10: first within 1e-5, third within 1e-3."""
    p = table()
    mu = p.density * p.width * p.thickness
    ei = p.youngs_modulus * p.width * p.thickness ** 3 / 12
    exact = fem_beam.cantilever_tip_mass_frequencies(p.link2_length, mu, ei,
                                                     p.payload_mass, 3)
    assert exact[0] == pytest.approx(13.19, abs=0.01)   # docs: 13.19 rad/s
    errors = {n: np.abs(clamped_frequencies(table(elements=n)) / exact - 1)
              for n in (5, 10, 20)}
    assert errors[10][0] < 1e-5 and errors[10][2] < 1e-3
    for coarse, fine in ((5, 10), (10, 20)):
        assert np.all(errors[fine] < errors[coarse] / 8)    # h^4 convergence: about 16x
    # without the tip mass the roots are the textbook 1.8751, 4.6941, 7.8548
    bare = fem_beam.cantilever_tip_mass_frequencies(1.0, 1.0, 1.0, 0.0, 3)
    np.testing.assert_allclose(np.sqrt(bare), [1.8751041, 4.6940911, 7.8547574], rtol=1e-7)


# -- energy, power, the rigid limit -------------------------------------------------------

def energy_run(sim, input_torque=(0.0, 0.0), **plant):
    cfg = flex_config(sim={"duration": 0.2, "dt": 1e-4, "integrator": "accurate",
                           "accurate_method": "DOP853", "rtol": 1e-11, "atol": 1e-13, **sim},
                      input_torque=input_torque, elements=3,
                      q0=[0.0, 0.1, 0.002, 0.01, 0.004, 0.015, 0.006, 0.02],
                      qd0=[0.05, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], **plant)
    return cfg, simulate(cfg).arrays


@pytest.mark.slow
def test_energy_is_conserved_without_damping_and_input():
    _, a = energy_run({}, rayleigh_alpha=0.0, rayleigh_beta=0.0)
    e = a["energy"]
    assert np.ptp(e) < 1e-8 * e[0]
    assert np.ptp(a["q"][:, 2]) > 1e-3    # it did vibrate


@pytest.mark.parametrize("reading", ["elastic", "all"])
def test_power_balance_closes_with_damping_and_input(reading):
    """E(T) - E(0) = int (F d' + tau q' - Q'^T D Q') dt along the accurate solution (the
    residual is Simpson's quadrature error on the 20 us grid: it falls as dt^4)."""
    cfg, a = energy_run({"dt": 2e-5}, input_torque=(0.2, 0.002), damping_on=reading,
                        rayleigh_alpha=2.0, rayleigh_beta=0.002)
    p = cfg.plant
    beam = flex_rp.beam(p)
    Qd = a["qd"]
    if reading == "elastic":
        dissipation = np.einsum("ti,ij,tj->t", Qd[:, 2:],
                                p.rayleigh_alpha * beam.mass + p.rayleigh_beta * beam.stiffness,
                                Qd[:, 2:])
    else:
        params = flex_rp.params(p)
        dissipation = np.empty(len(Qd))
        for k, (Q, v) in enumerate(zip(a["q"], Qd)):
            m = np.zeros((8, 8))
            flex_rp.mechanism(Q, v, params, m, np.zeros(8))
            d = p.rayleigh_alpha * m
            d[2:, 2:] += p.rayleigh_beta * beam.stiffness
            dissipation[k] = v @ d @ v
    power = a["u"][:, 0] * Qd[:, 0] + a["u"][:, 1] * Qd[:, 1] - dissipation
    from scipy.integrate import simpson
    supplied = simpson(power, x=a["t"])
    change = a["energy"][-1] - a["energy"][0]
    dissipated = simpson(dissipation, x=a["t"])
    assert dissipated > 0.05 * abs(change)
    assert change == pytest.approx(supplied, abs=1e-5 * dissipated)


def rigid_rp(p, force, torque, t_end, Q0=(0.0, 0.0)):
    """The rigid P-R robot (link 2 rigid with its tip mass), written out independently:
    M = [[m_d, S cos q], [S cos q, J0]], c = [-S sin q q'^2, 0]."""
    mu = p.density * p.width * p.thickness
    md = p.link1_mass + mu * p.link2_length + p.payload_mass
    s = mu * p.link2_length ** 2 / 2 + p.payload_mass * p.link2_length
    j0 = mu * p.link2_length ** 3 / 3 + p.payload_mass * p.link2_length ** 2

    def rhs(t, y):
        q, dd, qd = y[1], y[2], y[3]
        m = np.array([[md, s * math.cos(q)], [s * math.cos(q), j0]])
        acc = np.linalg.solve(m, [force + s * math.sin(q) * qd ** 2, torque])
        return [dd, qd, acc[0], acc[1]]
    return solve_ivp(rhs, (0, t_end), [*Q0, 0.0, 0.0], method="DOP853", rtol=1e-12,
                     atol=1e-14, dense_output=True)


def test_rigid_limit_moves_the_joints_as_the_rigid_model():
    """EI x 1e6: the 1 ms Rosenbrock run of the flexible plant follows the rigid P-R robot
    under the same force and torque (1e-6 of the motion)."""
    force, torque = 0.3, 0.004
    cfg = flex_config(sim={"duration": 1.0, "dt": 1e-3}, input_torque=(force, torque),
                      youngs_modulus=2e16)
    a = simulate(cfg).arrays
    rigid = rigid_rp(cfg.plant, force, torque, 1.0).sol(a["t"])
    for k in range(2):
        motion = np.ptp(rigid[k])
        assert motion > 0.05
        assert np.max(np.abs(a["q"][:, k] - rigid[k])) < 1e-6 * motion
    flexible = simulate(flex_config(sim={"duration": 1.0, "dt": 1e-3},
                                    input_torque=(force, torque))).arrays
    assert np.max(np.abs(flexible["q"][:, 1] - rigid[1])) > 1e-4   # a visible difference


def test_registered_as_a_plant_model_through_the_entry_points():
    from importlib.metadata import entry_points
    (ep,) = [e for e in entry_points(group="hilrig.plants") if e.name == "flex_rp"]
    assert ep.load() is flex_rp.FLEX_RP
    cfg = flex_config(elements=4)
    plant = plant_from_config(cfg)
    assert (plant.nq, plant.nact) == (10, 2)
    with pytest.raises(Exception, match="plant.elements"):
        flex_config(elements=0)
