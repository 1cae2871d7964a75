"""The flexible chain on the ground (paper 004) as a hilrig plant model, ``flex_chain``.

Registered in the entry-point group ``hilrig.plants`` (pyproject.toml) as a user's
model is. Its ``[plant]`` keys give the links (one Table 2 mode set such as
``modes = "ss-ss-ss"``, one link per name), the beams (Table 3's values by default), the
ground contact (eqs. 23 and 24, Table 3) and the integrators' substeps. Coordinates
(plant.flex_chain.chain): q = [q_2 .. q_n, q_1, X_1, X_2, delta_1 .. delta_n]; nact = n - 1
joint torques (N m) on q_2 .. q_n; the paper's drop has none (a zero-torque controller).

``hil sim`` runs it with contact (plant.flex_chain.offline): ``sim.integrator = "accurate"``
locates every contact onset and separation (plant.flex_chain.integrators.run_events,
tolerances sim.rtol, sim.atol, plant.event_tolerance); ``"rk4"`` takes fixed ticks of
sim.dt in RK4 substeps (plant.substep_fine in or near contact, plant.substep_coarse in
flight). The Plant that ``build`` returns carries, with ``plant.contact = true``, the
contact ticks' state after its body (plant.flex_chain.tick): ``hil run`` steps it with
``METHOD_CONTACT`` (the same fixed-step ticks, at sim.dt, in real time); stepped with
'rk4' or 'euler' (the emulators, ``plant.contact = false``) it is the chain *without* the
ground.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from hilrig.errors import ConfigError
from hilrig.plant.flex_chain.tick import METHOD_CONTACT, contact_block
from hilrig.plant.factory import motor_params
from hilrig.plant.flex_chain.chain import (
    FlexChainParams,
    end_points,
    mechanism,
    n_coordinates,
    scratch_size,
)
from hilrig.plant.interface import PlantModel, compile_mechanism
from hilrig.plant.flex_chain.mode_shapes import MODE_NAMES
from hilrig.plant.frames import flex_chain
from hilrig.plant.model import Plant
from hilrig.schema import Config, Key

# Table 3 of paper 004
TABLE_3 = {
    "length": 1.0, "mass_per_length": 1.0, "area": 3.75e-4, "second_moment": 4.883e-9,
    "rotary_inertia": 2.9473e-5, "youngs_modulus": 2e11, "shear_modulus": 7.7e10,
    "shear_factor": 5.0 / 6.0, "kelvin_voigt": 125.0, "air_damping": 0.025, "gravity": 9.81,
    "restitution": 0.8, "contact_stiffness": 140e6, "friction": 0.1, "friction_v0": 1e-4,
    "friction_v1": 1e-3,
}

FLEX_CHAIN_KEYS = {
    "modes": Key("str", "ss-ss-ss", doc="Table 2 mode of each link, e.g. 'sc-cc-cs'"),
    "length": Key("float", TABLE_3["length"], positive=True, doc="link length l, m"),
    "mass_per_length": Key("float", TABLE_3["mass_per_length"], positive=True, doc="mu, kg/m"),
    "area": Key("float", TABLE_3["area"], positive=True, doc="A, m^2"),
    "second_moment": Key("float", TABLE_3["second_moment"], positive=True, doc="I, m^4"),
    "rotary_inertia": Key("float", TABLE_3["rotary_inertia"], minimum=0.0,
                          doc="rho I of the cross-section per length, kg m (Table 3's J3)"),
    "youngs_modulus": Key("float", TABLE_3["youngs_modulus"], positive=True, doc="E, N/m^2"),
    "shear_modulus": Key("float", TABLE_3["shear_modulus"], positive=True, doc="G, N/m^2"),
    "shear_factor": Key("float", TABLE_3["shear_factor"], positive=True, doc="k"),
    "beam": Key("str", "timoshenko", choices=("timoshenko", "euler_bernoulli"),
                doc="bending energy E I Theta'^2 + k A G Gamma^2, or E I W''^2"),
    "kelvin_voigt": Key("float", TABLE_3["kelvin_voigt"], minimum=0.0, doc="K_v, kg/(m s)"),
    "air_damping": Key("float", TABLE_3["air_damping"], minimum=0.0, doc="gamma, kg/(m s)"),
    "gravity": Key("float", TABLE_3["gravity"], minimum=0.0, doc="g, m/s^2, along -X_2"),
    "contact": Key("bool", True, doc="ground contact of the link end points"),
    "contact_stiffness": Key("float", TABLE_3["contact_stiffness"], positive=True,
                             doc="K, N/m^1.5"),
    "contact_exponent": Key("float", 1.5, positive=True, doc="n"),
    "restitution": Key("float", TABLE_3["restitution"], positive=True, doc="c_r (0, 1]"),
    "friction": Key("float", TABLE_3["friction"], minimum=0.0, doc="mu_k"),
    "friction_v0": Key("float", TABLE_3["friction_v0"], positive=True, doc="m/s"),
    "friction_v1": Key("float", TABLE_3["friction_v1"], positive=True, doc="m/s"),
    "min_impact_speed": Key("float", 1e-3, positive=True,
                            doc="floor of the onset rate in the Hu-Guo damping, m/s"),
    "gauss_points": Key("int", 12, minimum=2, doc="quadrature points per link"),
    "event_tolerance": Key("float", 1e-10, positive=True, doc="onset/separation time, s"),
    "max_step": Key("float", 1e-3, positive=True, doc="largest adaptive step, s"),
    "substep_fine": Key("float", 1e-5, positive=True, doc="fixed-step substep near contact, s"),
    "substep_coarse": Key("float", 1e-4, positive=True, doc="fixed-step substep in flight, s"),
}


def link_modes(plant: dict) -> list[str]:
    """The mode names of ``plant.modes`` (raw or typed table); ConfigError when bad."""
    text = plant.get("modes", "ss-ss-ss") if isinstance(plant, dict) else plant.modes
    names = str(text).lower().split("-")
    bad = [name for name in names if name not in MODE_NAMES]
    if bad or len(names) < 2:
        raise ConfigError(f"plant.modes: expected at least 2 of {', '.join(MODE_NAMES)} joined "
                          f"by '-' (one per link, e.g. 'sc-cc-cs'), got {text!r}")
    return names


def _sizes(plant: dict) -> tuple[int, int]:
    n = len(link_modes(plant))
    return n_coordinates(n), n - 1


def chain_params(plant) -> FlexChainParams:
    """The chain's parameters from the resolved ``[plant]`` table (cfg.plant)."""
    if plant.restitution > 1.0:
        raise ConfigError(f"plant.restitution: expected 0 < c_r <= 1, got {plant.restitution}")
    if plant.friction_v1 <= plant.friction_v0:
        raise ConfigError("plant.friction_v1 must exceed plant.friction_v0")
    modes = link_modes(plant)
    n = len(modes)
    shear = plant.shear_factor * plant.area * plant.shear_modulus
    return FlexChainParams(
        length=(plant.length,) * n, mu=(plant.mass_per_length,) * n,
        rho_i=(plant.rotary_inertia,) * n, ei=(plant.youngs_modulus * plant.second_moment,) * n,
        shear=(shear if plant.beam == "timoshenko" else math.inf,) * n,
        kv_i=(plant.kelvin_voigt * plant.second_moment,) * n, gamma=(plant.air_damping,) * n,
        modes=tuple(modes), gravity=plant.gravity, stiffness=plant.contact_stiffness,
        exponent=plant.contact_exponent, restitution=plant.restitution,
        friction=plant.friction, v0=plant.friction_v0, v1=plant.friction_v1,
        contact=plant.contact, min_impact_speed=plant.min_impact_speed,
        gauss_points=plant.gauss_points)


def paper_chain(modes: str = "ss-ss-ss", **overrides) -> FlexChainParams:
    """Paper 004's 3-link chain (Table 3) with a mode set, for tests and benches."""
    values = {name: key.default for name, key in FLEX_CHAIN_KEYS.items()}
    values.update(modes=modes, **overrides)
    return chain_params(_Plain(values))


def paper_initial_state(n: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 30: q_1 = pi/6, q_2 = q_3 = -pi/6, O_1 at (-0.5 - sin 60 deg, 0.9) m, at rest,
    undeformed, in this model's coordinate order."""
    if n != 3:
        raise ValueError("eq. 30 is the 3-link drop")
    z = np.array([-math.pi / 6, -math.pi / 6, math.pi / 6, -0.5 - math.sin(math.pi / 3), 0.9,
                  0.0, 0.0, 0.0])
    return z, np.zeros(8)


class _Plain:
    """Attribute access to a dict of [plant] values (the typed table's interface)."""

    def __init__(self, values: dict):
        self.__dict__.update(values)


def _build(cfg: Config) -> Plant:
    chain = chain_params(cfg.plant)
    n = chain.n
    body = np.concatenate([chain.block(), np.zeros(scratch_size(n))])
    if chain.contact:       # the state of the contact ticks (plant.flex_chain.tick), last
        body = np.concatenate([body, contact_block(n, len(body), cfg.plant.substep_fine,
                                                   cfg.plant.substep_coarse)])
    drive = cfg.plant.drive
    plant = Plant.chain(_compiled_mechanism(), n_coordinates(n), n - 1, body, drive,
                        motor_params(cfg) if drive != "torque" else None)
    plant.set_state(cfg.plant.q0, cfg.plant.qd0)
    return plant


@lru_cache(maxsize=1)
def _compiled_mechanism():
    """flex_chain.mechanism as the cfunc the loops call (compiled once per process)."""
    return compile_mechanism(mechanism)


def _tick(cfg: Config) -> int | None:
    """On the ground the loops step the chain with the contact tick (its own state, no
    rehearsal); without contact, with ``sim.integrator``'s step."""
    if not cfg.plant.contact:
        return None
    if cfg.sim.integrator != "rk4":
        raise ConfigError(f"sim.integrator: {cfg.plant.model} on the ground runs fixed ticks in "
                          f"RK4 substeps ('rk4') in real time, not {cfg.sim.integrator!r}")
    if cfg.plant.drive != "torque":
        raise ConfigError(f"plant.drive: {cfg.plant.model} on the ground is torque-driven "
                          "(joint torques, N m)")
    return METHOD_CONTACT


def _offline(cfg: Config):
    """``hil sim`` of the chain: the contact integrators (plant.flex_chain.offline)."""
    from hilrig.plant.flex_chain.offline import simulate   # it builds on chain_params above
    return simulate(cfg)


def _frames(cfg: Config):
    """The chain in 3D (plant.frames.flex_chain): its links and end points."""
    chain = chain_params(cfg.plant)
    return flex_chain(chain.block(), chain.n, cfg.plant.length, end_points)


FLEX_CHAIN = PlantModel("flex_chain", FLEX_CHAIN_KEYS, _sizes, _build, tick=_tick,
                        offline=_offline, frames=_frames, actuator_faults=True)
