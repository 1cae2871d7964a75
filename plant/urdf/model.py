"""``plant.model = "urdf"``: a serial chain cut out of a URDF (docs/URDF.md) as a
PlantModel, registered in the entry-point group ``hilrig.plants`` like hilrig's other
models. The file is read once (plant.urdf.parse); the plant is a chain (plant.interface)
whose mechanism is plant.urdf.dynamics.mechanism over the flat params block, so drives,
gears, jams, both integrators and every loop take it as they take any chain.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from hilrig.errors import ConfigError
from hilrig.plant.factory import model_viscous, motor_params
from hilrig.plant.interface import PlantModel, compile_mechanism
from hilrig.plant.model import Plant
from hilrig.plant.model_kernels import KIND_URDF
from hilrig.plant.urdf import dynamics, frames, parse
from hilrig.plant.urdf.regressor import UrdfRegressor
from hilrig.schema import Config, Key

KEYS = {
    "urdf": Key("str", None, required=True,
                doc="the robot's URDF: a path (relative to the current folder), or a "
                    "shipped robot: panda, ur5, kinova"),
    "base_link": Key("str", None, doc="the link fixed to the world; unset: the URDF's root"),
    "tip_link": Key("str", None, doc="the chain's last link; unset: the end of the URDF's "
                                     "only line of moving joints"),
    "gravity": Key("floats", [0.0, 0.0, -9.81], length=3,
                   doc="gravity in base_link's frame, m/s^2 (ROS: z up)"),
    "payload": Key("floats", None,
                   doc="a payload fixed to tip_link: [mass kg, cx, cy, cz m] (its centre of "
                       "mass in tip_link's frame), optionally then its inertia about it "
                       "[Ixx, Iyy, Izz, Ixy, Ixz, Iyz] kg m^2; merged into the last body"),
}


def chain(plant) -> parse.UrdfChain:
    """The URDF chain of a [plant] table (resolved and typed, or raw: a dict)."""
    get = plant.get if isinstance(plant, dict) else lambda key: getattr(plant, key)
    urdf = get("urdf")
    if not isinstance(urdf, str) or not urdf:
        raise ConfigError("plant.urdf: required with plant.model = \"urdf\": a URDF file or a "
                          f"shipped robot ({', '.join(parse.shipped_robots())})")
    payload = get("payload")
    chain = _with_payload(parse.load(urdf, get("base_link"), get("tip_link")),
                          None if payload is None else tuple(payload))
    if chain.n > dynamics.MAX_JOINTS:
        raise ConfigError(f"plant.tip_link: the chain to {chain.tip_link!r} has {chain.n} "
                          f"moving joints; the URDF plant takes at most {dynamics.MAX_JOINTS}")
    return chain


@lru_cache(maxsize=64)
def _with_payload(robot: parse.UrdfChain, payload: tuple | None) -> parse.UrdfChain:
    """parse.with_payload, once per chain (parse.load's, one per file version) and payload:
    a campaign builds each scenario's plant and controller from the same few."""
    return parse.with_payload(robot, payload)


def sizes(plant: dict) -> tuple[int, int]:
    """(nq, nact): one coordinate per moving joint of the chain, all actuated."""
    n = chain(plant).n
    return n, n


_compiled = []


def compiled_mechanism():
    """The mechanism as a compiled function pointer (plant.interface), made once."""
    if not _compiled:
        _compiled.append(compile_mechanism(dynamics.mechanism))
    return _compiled[0]


def params(plant) -> np.ndarray:
    """The mechanism's params block of a resolved [plant] table. The joints' damping and
    friction are the [friction] table's (plant.friction, friction_defaults), not the
    mechanism's: its damping column stays zero."""
    robot = chain(plant)
    return dynamics.block(robot, plant.gravity, np.zeros(robot.n))


def friction_defaults(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """(viscous, coulomb) per joint from the URDF's <dynamics damping friction>: what
    [friction] leaves unset."""
    robot = chain(cfg.plant)
    return robot.damping, robot.friction


def build(cfg: Config) -> Plant:
    """The URDF chain of a resolved config in its initial state (q0, qd0)."""
    p = cfg.plant
    body = params(p)
    n = int(body[dynamics.P_N])
    plant = Plant.chain(compiled_mechanism(), n, n, body, p.drive,
                        motor_params(cfg) if p.drive != "torque" else None)
    plant.set_state(p.q0, p.qd0)
    return plant


def model_block(cfg: Config) -> np.ndarray:
    """The chain's model block for controllers (plant.model_kernels): the mechanism with
    the joints' viscous friction as its damping."""
    robot = chain(cfg.plant)
    viscous = model_viscous(cfg, URDF, robot.n)
    return np.concatenate([[KIND_URDF], dynamics.block(robot, cfg.plant.gravity, viscous)])


def limits(cfg: Config) -> tuple:
    """The joints' <limit effort velocity lower upper> (N m or N, rad/s or m/s, rad or m;
    inf where the URDF gives none): the defaults of the safety limits."""
    robot = chain(cfg.plant)
    return robot.effort, robot.velocity, robot.lower, robot.upper


URDF = PlantModel("urdf", KEYS, sizes, build, jams=True, dissipation=(), friction=True,
                  friction_defaults=friction_defaults, limits=limits, model_block=model_block,
                  frames=lambda cfg: frames.skeleton(chain(cfg.plant)), regressor=UrdfRegressor)
