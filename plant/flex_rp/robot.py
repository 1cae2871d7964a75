"""The flexible P-R robot of paper 002 as a chain (plant.interface): a rigid link 1 on a
prismatic joint, a flexible link 2 of Euler-Bernoulli finite elements on a revolute joint.

Frame (the paper's eqs. 1, 9): the robot moves in the horizontal plane XOY, so gravity
does no work (the paper's choice, kept: there is no gravity key). The prismatic joint
moves link 1's end O1 along Y: r_O1 = (L1, d). Link 2 is hinged at O1 and turned by q
from the X axis; a point at the axial coordinate s of link 2 deflects by w(s) across it:

    r(s) = (L1, d) + R(q) (s, w(s)),      tip: r_E = r(L2)

Coordinates Q = [d (m), q (rad), e], e = [w_1, w'_1, ..., w_n, w'_n] the deflections (m)
and slopes (rad) at the nodes 1..n of link 2 (node 0, the hub, clamped: plant.flex_rp.fem_beam).
Inputs: the force F on d (N) and the torque tau on q (N m), or the voltages of DC motors
through hilrig's drive model.

Kinetic energy, with the beam's integrals (plant.flex_rp.fem_beam.ClampedBeam: M_e, b, c, m_2,
S, J0; they include the tip mass m_t; plant.hub_inertia adds to J0) and m_d = m1 + m_2
the mass that d carries:

    2T = m_d d'^2 + (J0 + e^T M_e e) q'^2 + 2 d' q' (S cos q - sin q b.e)
         + 2 d' cos q b.e' + 2 q' c.e' + e'^T M_e e'

so M(Q) is constant but for M_dq = S cos q - sin q b.e, M_de = cos q b^T and
M_qq = J0 + e^T M_e e. Lagrange's equations give the velocity terms

    c_d = -q'^2 (S sin q + cos q b.e) - 2 q' sin q b.e'
    c_q = 2 q' e^T M_e e'
    c_e = -q'^2 M_e e

(tests/test_flex_rp.py derives M and c again with sympy from the kinetic energy of the
elements). Elastic energy V = 1/2 e^T K e. Rayleigh damping D = alpha M + beta K (eq. 29)
has two readings, plant.damping_on: "elastic" (the structural damping of the beam:
D = alpha M_e + beta K on the elastic block only) or "all" (literally D = alpha M(Q) +
beta K over all coordinates, so alpha M also damps d and q).

The model is stiff (its damped bending modes reach about -3e5 1/s at 5 elements): step it
with sim.integrator = "rosenbrock" (plant.rosenbrock), or "accurate" offline.
"""
from __future__ import annotations

import math

import numpy as np
from hilrig.errors import ConfigError
from hilrig.plant.factory import motor_params
from hilrig.plant.flex_rp.fem_beam import ClampedBeam
from hilrig.plant.interface import PlantModel, compile_mechanism
from hilrig.plant.model import Plant
from hilrig.schema import Config, Key
from numba import njit

# Table 1 of paper 002 (Young's modulus printed "2.1010": 2e10 Pa)
PAPER = {"link1_length": 0.05, "link1_mass": 1.4, "link2_length": 0.3, "width": 0.02,
         "thickness": 0.001, "elements": 5, "density": 7850.0, "youngs_modulus": 2e10,
         "rayleigh_alpha": 0.005, "rayleigh_beta": 0.007, "payload_mass": 0.01}

KEYS = {
    "link1_length": Key("float", PAPER["link1_length"], positive=True, doc="L1, m"),
    "link1_mass": Key("float", PAPER["link1_mass"], positive=True,
                      doc="m1, mass of link 1 and the base that d carries, kg"),
    "link2_length": Key("float", PAPER["link2_length"], positive=True, doc="L2, m"),
    "width": Key("float", PAPER["width"], positive=True, doc="b, section width of link 2, m"),
    "thickness": Key("float", PAPER["thickness"], positive=True,
                     doc="h, section thickness of link 2 (bending across it), m"),
    "elements": Key("int", PAPER["elements"], minimum=1, doc="n, finite elements of link 2"),
    "density": Key("float", PAPER["density"], positive=True, doc="rho, kg/m^3"),
    "youngs_modulus": Key("float", PAPER["youngs_modulus"], positive=True, doc="E, Pa"),
    "rayleigh_alpha": Key("float", PAPER["rayleigh_alpha"], minimum=0.0,
                          doc="alpha of D = alpha M + beta K, 1/s"),
    "rayleigh_beta": Key("float", PAPER["rayleigh_beta"], minimum=0.0,
                         doc="beta of D = alpha M + beta K, s"),
    "damping_on": Key("str", "elastic", choices=("elastic", "all"),
                      doc="elastic: D on the elastic coordinates only; all: D = alpha M(Q) "
                          "+ beta K on every coordinate (eq. 29 read literally)"),
    "payload_mass": Key("float", PAPER["payload_mass"], minimum=0.0,
                        doc="m_t, point mass at the tip of link 2, kg"),
    "hub_inertia": Key("float", 0.0, minimum=0.0,
                       doc="J_h, inertia turning with q besides link 2 (a motor's rotor, a "
                           "hub), kg m^2; the paper has none"),
    "start_joints": Key("floats", None, length=2,
                        doc="[d (m), q (rad)] at t = 0, in place of q0's first two (q0's "
                            "length follows plant.elements)"),
    "start_rates": Key("floats", None, length=2,
                       doc="[d' (m/s), q' (rad/s)] at t = 0, in place of qd0's first two"),
}

MAX_ELEMENTS = 40

# params layout (the mechanism's own block)
P_NE, P_MD, P_J0, P_S, P_ALPHA, P_BETA, P_ALL = range(7)
P_ARRAYS = 7     # then b (ne), c (ne), M_e (ne x ne), K (ne x ne), row-major


@njit(cache=True, error_model="numpy")
def mechanism(Q, Qd, p, mass, bias):
    """M(Q) and bias = c(Q, Q') + D Q' + K Q of the flexible P-R robot (module docstring);
    returns the elastic energy V (J)."""
    ne = int(p[P_NE])
    ob = P_ARRAYS
    oc = ob + ne
    om = oc + ne
    ok = om + ne * ne
    alpha, beta = p[P_ALPHA], p[P_BETA]
    damp_all = p[P_ALL] != 0.0
    s, c = math.sin(Q[1]), math.cos(Q[1])
    dd, qd = Qd[0], Qd[1]
    be = 0.0
    bed = 0.0
    for i in range(ne):
        be += p[ob + i] * Q[2 + i]
        bed += p[ob + i] * Qd[2 + i]
    eme = 0.0
    emed = 0.0
    energy = 0.0
    for i in range(ne):
        me_i = 0.0      # (M_e e)_i
        med_i = 0.0     # (M_e e')_i
        ke_i = 0.0      # (K e)_i
        ked_i = 0.0     # (K e')_i
        for j in range(ne):
            mij = p[om + i * ne + j]
            kij = p[ok + i * ne + j]
            mass[2 + i, 2 + j] = mij
            me_i += mij * Q[2 + j]
            med_i += mij * Qd[2 + j]
            ke_i += kij * Q[2 + j]
            ked_i += kij * Qd[2 + j]
        eme += Q[2 + i] * me_i
        emed += Qd[2 + i] * me_i
        energy += 0.5 * Q[2 + i] * ke_i
        mass[0, 2 + i] = c * p[ob + i]
        mass[2 + i, 0] = c * p[ob + i]
        mass[1, 2 + i] = p[oc + i]
        mass[2 + i, 1] = p[oc + i]
        bias[2 + i] = -qd * qd * me_i + ke_i + beta * ked_i + alpha * med_i
    mass[0, 0] = p[P_MD]
    mass[1, 1] = p[P_J0] + eme
    mass[0, 1] = p[P_S] * c - s * be
    mass[1, 0] = mass[0, 1]
    bias[0] = -qd * qd * (p[P_S] * s + c * be) - 2.0 * qd * s * bed
    bias[1] = 2.0 * qd * emed
    if damp_all:    # alpha M(Q) on the rigid rows and columns too (the elastic block has it)
        for i in range(2):
            for j in range(ne + 2):
                bias[i] += alpha * mass[i, j] * Qd[j]
        for i in range(ne):
            bias[2 + i] += alpha * (mass[2 + i, 0] * dd + mass[2 + i, 1] * qd)
    return energy


def beam(plant) -> ClampedBeam:
    """Link 2 of a [plant] table (typed, or a SimpleNamespace with its keys) as elements."""
    mu = plant.density * plant.width * plant.thickness
    ei = plant.youngs_modulus * plant.width * plant.thickness ** 3 / 12.0
    return ClampedBeam.assemble(plant.link2_length, mu, ei, plant.elements, plant.payload_mass)


def params(plant) -> np.ndarray:
    """The mechanism's params block from the resolved [plant] table (layout above)."""
    b = beam(plant)
    head = np.zeros(P_ARRAYS)
    head[P_NE] = 2 * plant.elements
    head[P_MD] = plant.link1_mass + b.total_mass
    head[P_J0] = b.hub_inertia + plant.hub_inertia
    head[P_S] = b.static_moment
    head[P_ALPHA] = plant.rayleigh_alpha
    head[P_BETA] = plant.rayleigh_beta
    head[P_ALL] = 1.0 if plant.damping_on == "all" else 0.0
    return np.concatenate([head, b.first_moment, b.rotary_moment, b.mass.ravel(),
                           b.stiffness.ravel()])


def sizes(plant: dict) -> tuple[int, int]:
    """(nq, nact) = (2 + 2 n, 2) for n = plant.elements (1..MAX_ELEMENTS)."""
    n = plant.get("elements", PAPER["elements"])
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ELEMENTS:
        raise ConfigError(f"plant.elements: expected an integer 1..{MAX_ELEMENTS} "
                          f"(finite elements of link 2), got {n!r}")
    return 2 + 2 * n, 2


_compiled = []


def compiled_mechanism():
    """The mechanism as a compiled function pointer (plant.interface), made once."""
    if not _compiled:
        _compiled.append(compile_mechanism(mechanism))
    return _compiled[0]


def build(cfg: Config) -> Plant:
    """The flexible P-R robot of a resolved config in its initial state (q0, qd0)."""
    p = cfg.plant
    nq, nact = 2 + 2 * p.elements, 2
    plant = Plant.chain(compiled_mechanism(), nq, nact, params(p), p.drive,
                        motor_params(cfg) if p.drive != "torque" else None)
    q0, qd0 = np.array(p.q0, dtype=float), np.array(p.qd0, dtype=float)
    if p.start_joints is not None:
        q0[:2] = p.start_joints
    if p.start_rates is not None:
        qd0[:2] = p.start_rates
    plant.set_state(q0, qd0)
    return plant


def tip(plant, Q: np.ndarray) -> np.ndarray:
    """[x_E, y_E, w_E, w'_E]: the tip's position in XOY (m, eq. 9) and its flexural
    displacement (m) and slope (rad) in link 2's frame, at coordinates Q (any leading
    shape: Q[..., k])."""
    Q = np.asarray(Q, dtype=float)
    d, q = Q[..., 0], Q[..., 1]
    w, slope = Q[..., -2], Q[..., -1]
    x = plant.link1_length + plant.link2_length * np.cos(q) - w * np.sin(q)
    y = d + plant.link2_length * np.sin(q) + w * np.cos(q)
    return np.stack([x, y, w, slope], axis=-1)


FLEX_RP = PlantModel("flex_rp", KEYS, sizes, build, jams=True,
                     provides=frozenset({"beam_feedforward"}))
