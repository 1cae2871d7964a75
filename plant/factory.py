"""Plants from a resolved config (settings.config): the model registry, the Plant in its initial
state, the config's motors and fault table."""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
from hilrig.errors import ConfigError
from hilrig.plant import friction
from hilrig.plant.friction import FrictionParams
from hilrig.plant.faults import fault_table
from hilrig.plant.interface import ChainModel, PlantModel, compile_mechanism
from hilrig.plant.model import Plant
from hilrig.plant.motor import MotorParams
from hilrig.plant.rrr3 import Rrr3Params
from hilrig.plant.serial_arm import SerialArmParams
from hilrig.plant.stepping import correct_initial_state
from hilrig.plugins import lookup
from hilrig.schema import Config, plain

GROUP = "hilrig.plants"
CORRECTIONS = {"none": 0, "post_adjust": 1, "projection": 2}


def motor_params(cfg: Config) -> MotorParams:
    m = cfg.plant.motor
    return MotorParams(**{f.name: np.asarray(getattr(m, f.name), dtype=float)
                          for f in dataclasses.fields(m)})


@lru_cache(maxsize=None)
def plant_model(name: str) -> PlantModel:
    """The model ``plant.model`` names: registered in the entry-point group hilrig.plants,
    or "package.module:attribute" (a PlantModel or a ChainModel). ConfigError otherwise."""
    target = lookup(GROUP, name, "plant.model", (PlantModel, ChainModel), references=True)
    if isinstance(target, ChainModel):
        mechanism = compile_mechanism(target.mechanism)
        return PlantModel(target.name, target.keys, lambda plant: (target.nq, target.nact),
                          lambda cfg: _chain(cfg, target, mechanism), jams=True,
                          dissipation=tuple(target.dissipation), friction=True)
    return target


def plant_from_config(cfg: Config) -> Plant:
    """A Plant of the model ``plant.model`` names, in its initial state (q0, qd0, zero
    currents) at t = 0, with the config's joint friction (``[friction]``)."""
    model = plant_model(cfg.plant.model)
    plant = model.build(cfg)
    joint_friction = friction_params(cfg, model, plant.nq)
    if joint_friction is not None:
        plant.params = friction.attach(plant.params, joint_friction)
    return plant


def initial_plant(cfg: Config, corrected: bool = True) -> tuple[Plant, int]:
    """The config's plant (``plant_from_config``) and its constraint correction
    (``correction_id``), its initial state corrected onto the constraints
    (plant.stepping.correct_initial_state) unless not ``corrected`` (a caller that
    corrects it later, or runs no plant: rt.session's, which compiles parts of the loop
    first, or only compiles the loop for rt.loop_ahead)."""
    plant = plant_from_config(cfg)
    correction = correction_id(cfg)
    if corrected:
        correct_initial_state(plant, correction)
    return plant, correction


# integrators that step joint friction: RK4 and semi-implicit Euler (plant.stick_slip runs
# between their steps); the accurate path and Rosenbrock's Jacobian do not
FRICTION_INTEGRATORS = ("rk4", "euler")


def friction_params(cfg: Config, model: PlantModel, nq: int) -> FrictionParams | None:
    """The joint friction of a resolved config (``[friction]``, unset keys from the model's
    friction_defaults or 0), or None where it has none. ConfigError, one line, for a
    breakaway below the Coulomb level, friction on a model that does not take it, or an
    integrator that cannot step it."""
    f = cfg.friction
    defaults = model.friction_defaults(cfg) if model.friction_defaults is not None \
        else (np.zeros(nq), np.zeros(nq))

    def given(value, default) -> np.ndarray:
        if value is None:
            return np.array(default, dtype=float)
        return np.broadcast_to(np.asarray(value, dtype=float), (nq,)).copy()

    viscous = given(f.viscous, defaults[0])
    coulomb = given(f.coulomb, defaults[1])
    static = coulomb.copy() if f.static is None else given(f.static, coulomb)
    low = np.flatnonzero(static < coulomb)
    if len(low):
        k = int(low[0])
        raise ConfigError(f"friction.static: joint {k + 1}'s breakaway {static[k]:g} is below "
                          f"its Coulomb level friction.coulomb = {coulomb[k]:g}; static must "
                          "be >= coulomb")
    params = FrictionParams(viscous, coulomb, static, given(f.stribeck_velocity, None),
                            float(f.stick_velocity))
    if not params.any():
        return None
    if not model.friction:
        raise ConfigError(f"friction: plant.model {cfg.plant.model!r} does not model joint "
                          "friction (serial chains do: serial_arm, a user's chain, urdf); "
                          "remove the [friction] table")
    if cfg.sim.integrator not in FRICTION_INTEGRATORS and \
            (cfg.sim.integrator != "accurate" or params.sticks()):
        raise ConfigError(f"friction: sim.integrator = {cfg.sim.integrator!r} cannot step "
                          f"{'Coulomb ' if params.sticks() else ''}joint friction; use "
                          "\"rk4\" or \"euler\"")
    return params


def model_viscous(cfg: Config, model: PlantModel, nq: int) -> np.ndarray:
    """The joints' viscous friction of a resolved config (N m s/rad or N s/m, nq): what a
    model block for controllers (plant.model_kernels) adds to its mechanism's damping, so
    that the controllers' model has the plant's viscous joint friction."""
    params = friction_params(cfg, model, nq)
    return np.zeros(nq) if params is None else params.viscous


def built_plant(cfg: Config, body: SerialArmParams | Rrr3Params) -> Plant:
    """A built-in mechanism with the config's drives, in its initial state."""
    drive = cfg.plant.drive
    plant = Plant.build(body, drive, motor_params(cfg) if drive != "torque" else None)
    plant.set_state(cfg.plant.q0, cfg.plant.qd0)
    return plant


def _chain(cfg: Config, chain: ChainModel, mechanism) -> Plant:
    """A user's chain with the config's drives, in its initial state."""
    drive = cfg.plant.drive
    plant = Plant.chain(mechanism, chain.nq, chain.nact, chain.params(cfg.plant), drive,
                        motor_params(cfg) if drive != "torque" else None)
    plant.set_state(cfg.plant.q0, cfg.plant.qd0)
    return plant


def joint_limits(cfg: Config, unit: str) -> np.ndarray | None:
    """The plant's own limits (PlantModel.limits) as the rows controllers.limits.J_* take:
    max |command| in ``unit`` ("N m": the effort; "V": none, inf, since a voltage clamp
    would cap the speed as well, through the back-EMF r K_e qd, not only the torque),
    max |rate| (rad/s), lower and upper position (rad); None where the model has none."""
    model = plant_model(cfg.plant.model)
    if model.limits is None:
        return None
    effort, velocity, lower, upper = (np.asarray(a, dtype=float) for a in model.limits(cfg))
    command = effort if unit == "N m" else np.full(len(effort), np.inf)
    return np.vstack([command, velocity, lower, upper])


def actuated_joints(cfg: Config) -> int:
    """Number of actuated joints of a config's plant (its model's sizes)."""
    return plant_model(cfg.plant.model).sizes(plain(cfg.plant))[1]


def fault_schedule(cfg: Config, spare: int = 0) -> np.ndarray:
    """The config's fault table (plant.faults: faults.jam and every [[faults.KIND]]) for
    plant.stepping.apply_schedule, with ``spare`` empty rows for live faults."""
    return fault_table(cfg, spare)


def correction_id(cfg: Config) -> int:
    """Which constraint correction runs after each step (PlantModel.correction; 0: none)."""
    return plant_model(cfg.plant.model).correction_id(cfg)

