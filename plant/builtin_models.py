"""hilrig's own plant models as PlantModels (plant.interface): the planar serial arm of
paper 000 and the 3RRR parallel robot of paper 003, each with the ``[plant]`` keys it
owns and its traits (the 3RRR's diagnostics, campaign metrics, constraint correction and
stiffness analysis: paper 001's method, plant.stiffness). They are registered in the entry-point group ``hilrig.plants`` (pyproject.toml) as
a user's models are.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
from hilrig.errors import ConfigError
from hilrig.plant import frames, stiffness
from hilrig.plant.factory import CORRECTIONS, built_plant, model_viscous, motor_params
from hilrig.plant.interface import PlantModel, RowMetric
from hilrig.plant.model import Plant
from hilrig.plant.model_kernels import KIND_SERIAL_ARM
from hilrig.plant.rrr3 import Rrr3Params
from hilrig.plant.serial_arm import SerialArmParams
from hilrig.schema import Config, Key

PAPER_ARM = {"mass": [9.0, 7.0, 5.0], "inertia": [1.5, 1.0, 0.6],
             "length": [0.8, 0.7, 0.6], "com": [0.4, 0.35, 0.3]}

SERIAL_ARM_KEYS = {
    "mass": Key("floats", PAPER_ARM["mass"], positive=True, doc="link masses, kg"),
    "inertia": Key("floats", PAPER_ARM["inertia"], positive=True, doc="J_C, kg m^2"),
    "length": Key("floats", PAPER_ARM["length"], positive=True, doc="link lengths, m"),
    "com": Key("floats", PAPER_ARM["com"], minimum=0.0, doc="joint to centre of mass, m"),
    "damping": Key("floats", 0.0, length="nq", scalar_ok=True, minimum=0.0,
                   doc="viscous joint damping b_i, N m s/rad"),
    "gravity": Key("float", 9.81, minimum=0.0, doc="m/s^2 along +x (down)"),
}

RRR3_KEYS = {
    "l1": Key("float", 0.581, positive=True, doc="base link O_iA_i, m"),
    "l2": Key("float", 0.620, positive=True, doc="coupler A_iB_i, m"),
    "m1": Key("float", 2.072, positive=True, doc="base link mass, kg"),
    "m2": Key("float", 0.750, positive=True, doc="coupler mass, kg (two end particles)"),
    "inertia1": Key("float", 0.13, positive=True, doc="J_C1 of the base link, kg m^2"),
    "base_side": Key("float", 1.2, positive=True, doc="L0, edge of the base triangle, m"),
    "platform_side": Key("float", 0.2, positive=True, doc="L1, edge of the platform triangle, m"),
    "platform_mass": Key("float", 0.978, positive=True, doc="m7, kg"),
    "platform_inertia": Key("float", 0.007, positive=True, doc="J_C7, kg m^2"),
    "baumgarte": Key("bool", True),
    "baumgarte_delta": Key("float", 1.0, minimum=0.0),
    "baumgarte_omega0": Key("float", 100.0 * math.sqrt(2.0), minimum=0.0, doc="rad/s"),
    "correction": Key("str", "projection", choices=("none", "post_adjust", "projection"),
                      doc="applied after every step and to the initial state"),
    "post_adjust_weight": Key("float", 0.1, positive=True, doc="paper's M = w I"),
    "post_adjust_penalty": Key("float", 100.0, positive=True, doc="paper's A = a I"),
    "correction_iterations": Key("int", 10, minimum=1),
    "correction_tolerance": Key("float", 1e-14, positive=True),
}


def _arm_sizes(plant: dict) -> tuple[int, int]:
    """(nq, nact) of a serial arm: one joint per entry of plant.mass, all actuated."""
    mass = plant.get("mass", PAPER_ARM["mass"])
    if not isinstance(mass, list) or not mass:
        raise ConfigError("plant.mass: expected a non-empty list of link masses, kg")
    n = len(mass)
    for name in ("inertia", "length", "com"):
        if name not in plant:
            if n != len(PAPER_ARM[name]):
                raise ConfigError(f"plant.{name}: missing; the default is for the 3-link arm, "
                                  f"give {n} values (one per link, as plant.mass)")
            continue
        value = plant[name]
        if isinstance(value, list) and len(value) != n:
            raise ConfigError(f"plant.{name}: expected {n} values (one per link, as plant.mass), "
                              f"got {len(value)}")
    return n, n


def arm_params(cfg: Config) -> SerialArmParams:
    """The serial arm's parameters from cfg.plant."""
    p = cfg.plant
    return SerialArmParams(mass=np.array(p.mass), inertia=np.array(p.inertia),
                           length=np.array(p.length), com=np.array(p.com),
                           damping=np.array(p.damping), gravity=p.gravity)


def rrr3_params(cfg: Config) -> Rrr3Params:
    """The 3RRR's parameters from cfg.plant (platform, legs, stabilisation)."""
    p = cfg.plant
    l1, m1, m2 = p.l1, p.m1, p.m2
    b = p.platform_side / np.sqrt(3.0)
    side = p.base_side
    leg = p.inertia1 + 0.25 * m1 * l1 ** 2 + 0.5 * m2 * l1 ** 2
    platform = p.platform_mass + 1.5 * m2
    return Rrr3Params(
        l1=l1, l2=p.l2, platform_radius=b,
        base=np.array([[0.0, 0.0], [side, 0.0], [0.5 * side, 0.5 * np.sqrt(3.0) * side]]),
        alpha=np.array([7 * np.pi / 6, -np.pi / 6, np.pi / 2]),
        mass_diag=np.array([leg, leg, leg, platform, platform,
                            p.platform_inertia + 1.5 * m2 * b ** 2]),
        damping_diag=np.zeros(6),
        baumgarte=p.baumgarte, baumgarte_delta=p.baumgarte_delta,
        baumgarte_omega0=p.baumgarte_omega0,
        post_adjust_weight=p.post_adjust_weight, post_adjust_penalty=p.post_adjust_penalty,
        correction_iterations=p.correction_iterations,
        correction_tolerance=p.correction_tolerance)


def _rrr3_setup(cfg: Config):
    """Geometry, task mass (rotor inertias added when motor-driven), actuator stiffness
    (N m/rad) and q0 of a 3RRR config (its analyze table)."""
    geo = rrr3_params(cfg)
    mass = np.array(geo.mass_diag, dtype=float)
    if cfg.plant.drive != "torque":
        m = motor_params(cfg)
        mass[:3] += m.gear_ratio ** 2 * m.rotor_inertia
    a = cfg.analyze
    k_act = np.broadcast_to(np.asarray(a.actuator_stiffness, dtype=float), (3,)).copy()
    return geo, mass, k_act, np.array(cfg.plant.q0, dtype=float)


def rrr3_modes(cfg: Config) -> dict:
    """The 3RRR's stiffness, task-space mass and modes at q0 under analyze.wrench."""
    geo, mass, k_act, q0 = _rrr3_setup(cfg)
    wrench = np.array(cfg.analyze.wrench, dtype=float)
    q, lam = stiffness.equilibrium(geo, k_act, q0[:3], wrench, q0)
    s = stiffness.pose_stiffness(geo, k_act, mass, q, lam)
    return {"model": cfg.plant.model, "q": q.tolist(), "wrench": wrench.tolist(),
            "actuator_stiffness": k_act.tolist(), "multipliers": lam.tolist(),
            "jacobian": s.jacobian.tolist(), "stiffness": s.stiffness.tolist(),
            "compliance": s.compliance.tolist(), "task_mass": s.mass.tolist(),
            "omega": s.omega.tolist(), "hz": (s.omega / (2 * np.pi)).tolist(),
            "directions": s.modes.T.tolist()}


def rrr3_stiffness_map(cfg: Config) -> dict:
    """The workspace maps of the 3RRR (lowest frequency, translational stiffness) and the
    time they took (s)."""
    geo, mass, k_act, q0 = _rrr3_setup(cfg)
    n = cfg.analyze.grid
    xs = np.linspace(geo.base[:, 0].min(), geo.base[:, 0].max(), n)
    ys = np.linspace(geo.base[:, 1].min(), geo.base[:, 1].max(), n)
    elbows = stiffness.elbow_signs(geo, q0)
    started = time.perf_counter()
    omega, trans = stiffness.grid(geo, k_act, mass, xs, ys, q0[5], elbows)
    seconds = time.perf_counter() - started
    return {"x": xs, "y": ys, "omega": omega, "stiffness": trans, "seconds": seconds,
            "elbows": elbows, "phi": q0[5], "base": geo.base, "pose": q0[3:5]}


RRR3_DIAGNOSTICS = (("residual", 1), ("det_phi_theta", 1), ("det_phi_x", 1))
RRR3_COORDINATES = (("θ1", "rad"), ("θ2", "rad"), ("θ3", "rad"), ("x_C", "m"), ("y_C", "m"),
                    ("φ", "rad"))
RRR3_METRICS = (    # in the order plant.stepping.row_metrics fills them
    RowMetric("peak_residual", "m^2", "max constraint residual (3RRR)", "residual", "peak"),
    RowMetric("det_phi_x_sign_changes", "",
              "sign changes of det Phi_x: passes through a type-2 singularity (3RRR)",
              "det_phi_x", "sign_changes"),
    RowMetric("det_phi_theta_sign_changes", "",
              "sign changes of det Phi_theta: passes through a type-1 singularity (3RRR)",
              "det_phi_theta", "sign_changes"),
)


def arm_model_block(cfg: Config) -> np.ndarray:
    """The serial arm's model block for controllers (plant.model_kernels): its
    torque-driven params, the joints' viscous friction added to their damping."""
    arm = arm_params(cfg)
    arm = dataclasses.replace(arm, damping=arm.damping + model_viscous(cfg, SERIAL_ARM,
                                                                        len(arm.damping)))
    return np.concatenate([[KIND_SERIAL_ARM], Plant.build(arm, "torque").params])


SERIAL_ARM = PlantModel("serial_arm", SERIAL_ARM_KEYS, _arm_sizes,
                        lambda cfg: built_plant(cfg, arm_params(cfg)), jams=True,
                        dissipation=("damping",), model_block=arm_model_block,
                        frames=lambda cfg: frames.serial_arm(cfg.plant.length), friction=True,
                        provides=frozenset({"planar_arm_regressor"}))
RRR3 = PlantModel("rrr3", RRR3_KEYS, lambda plant: (6, 3),
                  lambda cfg: built_plant(cfg, rrr3_params(cfg)), default_drive="voltage",
                  actuator_faults=True,
                  diagnostics=RRR3_DIAGNOSTICS, coordinates=lambda nq: RRR3_COORDINATES,
                  metrics=RRR3_METRICS,
                  correction=lambda cfg: CORRECTIONS[cfg.plant.correction], stiff_step=False,
                  analyses={"stiffness": rrr3_modes, "stiffness_map": rrr3_stiffness_map},
                  frames=lambda cfg: frames.rrr3(rrr3_params(cfg)))
