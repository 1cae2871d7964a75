"""Plants from a resolved config (settings.config): the model registry, the Plant in its initial
state, the config's motors and fault table."""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
from hilrig.plant.faults import fault_table
from hilrig.plant.interface import ChainModel, PlantModel, compile_mechanism
from hilrig.plant.model import Plant
from hilrig.plant.motor import MotorParams
from hilrig.plant.rrr3 import Rrr3Params
from hilrig.plant.serial_arm import SerialArmParams
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
                          dissipation=tuple(target.dissipation))
    return target


def plant_from_config(cfg: Config) -> Plant:
    """A Plant of the model ``plant.model`` names, in its initial state (q0, qd0, zero
    currents) at t = 0."""
    return plant_model(cfg.plant.model).build(cfg)


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

