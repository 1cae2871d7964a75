"""Build a Plant from a resolved config (rt.config)."""
from __future__ import annotations

import numpy as np
from hilrig.plant.model import Plant
from hilrig.plant.motor import MotorParams
from hilrig.plant.rrr3 import Rrr3Params
from hilrig.plant.serial_arm import SerialArmParams
from hilrig.plant.stepping import SCHEDULE_COLUMNS

CORRECTIONS = {"none": 0, "post_adjust": 1, "projection": 2}


def motor_params(cfg: dict) -> MotorParams:
    m = cfg["plant"]["motor"]
    return MotorParams(**{k: np.asarray(v, dtype=float) for k, v in m.items()})


def mechanism(cfg: dict) -> SerialArmParams | Rrr3Params:
    """The mechanism's parameters from ``cfg['plant']``."""
    p = cfg["plant"]
    if p["model"] == "serial_arm":
        return SerialArmParams(mass=np.array(p["mass"]), inertia=np.array(p["inertia"]),
                               length=np.array(p["length"]), com=np.array(p["com"]),
                               damping=np.array(p["damping"]), gravity=p["gravity"])
    l1, m1, m2 = p["l1"], p["m1"], p["m2"]
    b = p["platform_side"] / np.sqrt(3.0)
    side = p["base_side"]
    leg = p["inertia1"] + 0.25 * m1 * l1 ** 2 + 0.5 * m2 * l1 ** 2
    platform = p["platform_mass"] + 1.5 * m2
    return Rrr3Params(
        l1=l1, l2=p["l2"], platform_radius=b,
        base=np.array([[0.0, 0.0], [side, 0.0], [0.5 * side, 0.5 * np.sqrt(3.0) * side]]),
        alpha=np.array([7 * np.pi / 6, -np.pi / 6, np.pi / 2]),
        mass_diag=np.array([leg, leg, leg, platform, platform,
                            p["platform_inertia"] + 1.5 * m2 * b ** 2]),
        damping_diag=np.zeros(6),
        baumgarte=p["baumgarte"], baumgarte_delta=p["baumgarte_delta"],
        baumgarte_omega0=p["baumgarte_omega0"],
        post_adjust_weight=p["post_adjust_weight"], post_adjust_penalty=p["post_adjust_penalty"],
        correction_iterations=p["correction_iterations"],
        correction_tolerance=p["correction_tolerance"])


def plant_from_config(cfg: dict) -> Plant:
    """A Plant in its initial state (q0, qd0, zero currents) at t = 0."""
    drive = cfg["plant"]["drive"]
    motors = motor_params(cfg) if drive != "torque" else None
    plant = Plant.build(mechanism(cfg), drive, motors)
    plant.set_state(cfg["plant"]["q0"], cfg["plant"]["qd0"])
    return plant


def actuated_joints(cfg: dict) -> int:
    """Number of actuated joints of a config's plant: the 3RRR's three base joints, or
    every joint of a serial arm (one per entry of plant.mass)."""
    plant = cfg["plant"]
    return 3 if plant["model"] == "rrr3" else len(plant["mass"])


def jam_schedule(cfg: dict) -> np.ndarray:
    """The config's jams (faults.jam) as rows [joint (0-based), t1 (s), duration (s), applied=0]
    for plant.stepping.apply_schedule."""
    rows = [[j["joint"] - 1, j["t1"], j["duration"], 0.0] for j in cfg["faults"]["jam"]]
    return np.array(rows, dtype=float).reshape(-1, SCHEDULE_COLUMNS)


def correction_id(cfg: dict) -> int:
    """Which constraint correction runs after each step (0 for chains)."""
    if cfg["plant"]["model"] != "rrr3":
        return 0
    return CORRECTIONS[cfg["plant"]["correction"]]

