"""The Python face of a plant: builds the flat arrays once, owns the state, steps it.

Kernels stay plain functions over arrays (plant.integrators, plant.dynamics);
this class is for construction, validation, fault events and inspection. The
real-time loop packs its arrays into one block (plant.packed) and calls the
kernels directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hilrig.plant import jam, rrr3
from hilrig.plant.actuator_faults import healthy_actuators
from hilrig.plant.dynamics import derivative
from hilrig.plant.family import for_plant
from hilrig.plant.integrators import METHOD_EULER, METHOD_RK4, METHOD_ROSENBROCK, step
from hilrig.plant.layout import (
    DRIVE_TORQUE,
    DRIVE_VOLTAGE,
    DRIVE_VOLTAGE_FULL,
    H_BODY,
    H_DRIVE,
    H_MODEL,
    H_MOTOR,
    H_NACT,
    H_NQ,
    HEADER_SIZE,
    BLOCKED,
    JAM_COLUMNS,
    JAM_PHASE,
    JAMMING,
    MODEL_CHAIN,
    MODEL_RRR3,
    MODEL_SERIAL_ARM,
    STUCK,
    work_shape,
)
from hilrig.plant.motor import MotorParams
from hilrig.plant.rrr3 import Rrr3Params
from hilrig.plant.serial_arm import SerialArmParams

DRIVES = {"torque": DRIVE_TORQUE, "voltage": DRIVE_VOLTAGE, "voltage_full": DRIVE_VOLTAGE_FULL}
METHODS = {"rk4": METHOD_RK4, "euler": METHOD_EULER, "rosenbrock": METHOD_ROSENBROCK}


class PlantError(RuntimeError):
    """The plant reached an invalid state (NaN, singular mass matrix, ...)."""


@dataclass
class Plant:
    """A plant model: params, state x = [q, qd, (i)], jam state, and scratch space.

    Attributes:
        params: flat float64 parameter array (plant.layout).
        jams: (nq, JAM_COLUMNS) jam state and actuator faults of each coordinate.
        x: state vector; q in rad/m, qd in rad/s or m/s, i in A.
        work, stages: scratch of the kernels (plant.layout).
        t: plant time, s.
    """

    params: np.ndarray
    jams: np.ndarray
    x: np.ndarray
    work: np.ndarray
    stages: np.ndarray
    t: float = 0.0
    mechanism: Any = None

    @staticmethod
    def build(body: SerialArmParams | Rrr3Params, drive: str = "torque",
              motors: MotorParams | None = None) -> "Plant":
        """Assemble the arrays for a built-in mechanism and its drives."""
        if isinstance(body, SerialArmParams):
            return Plant.assemble(MODEL_SERIAL_ARM, body.n, body.n, body.block(), drive, motors)
        if isinstance(body, Rrr3Params):
            return Plant.assemble(MODEL_RRR3, rrr3.NQ, rrr3.NACT, body.block(), drive, motors)
        raise TypeError(f"unknown mechanism {type(body).__name__}")

    @staticmethod
    def chain(mechanism: Any, nq: int, nact: int, body: np.ndarray, drive: str = "torque",
              motors: MotorParams | None = None) -> "Plant":
        """A user's chain (plant.interface): ``mechanism`` a compiled function of
        MECHANISM_SIGNATURE, ``body`` the params array it reads."""
        if not 1 <= nact <= nq:
            raise ValueError(f"a chain needs 1 <= nact <= nq, got nact {nact}, nq {nq}")
        return Plant.assemble(MODEL_CHAIN, nq, nact, np.asarray(body, dtype=float), drive,
                              motors, mechanism)

    @staticmethod
    def assemble(model: int, nq: int, nact: int, body: np.ndarray, drive: str,
                 motors: MotorParams | None, mechanism: Any = None) -> "Plant":
        """The arrays of plant.layout for a model id, its sizes, its params block and its
        drives; ``mechanism`` for a chain."""
        if drive not in DRIVES:
            raise ValueError(f"drive must be one of {sorted(DRIVES)}, got {drive!r}")
        if drive != "torque" and motors is None:
            raise ValueError(f"drive {drive!r} needs motor parameters")
        motor_block = motors.block() if motors is not None else np.zeros(0)
        header = np.zeros(HEADER_SIZE)
        header[H_MODEL], header[H_NQ], header[H_NACT] = model, nq, nact
        header[H_DRIVE] = DRIVES[drive]
        header[H_MOTOR] = HEADER_SIZE
        header[H_BODY] = HEADER_SIZE + len(motor_block)
        params = np.concatenate([header, motor_block, body])
        jams = np.zeros((nq, JAM_COLUMNS))
        jams[:, 1] = np.inf
        healthy_actuators(jams)
        nx = 2 * nq + (nact if drive == "voltage_full" else 0)
        return Plant(params=params, jams=jams, x=np.zeros(nx), work=np.zeros(work_shape(nq)),
                     stages=np.zeros((5, nx)), mechanism=mechanism)

    def copy(self) -> "Plant":
        """An independent plant in the same state: its arrays copied, the same mechanism
        (a compiled function, shared)."""
        return Plant(self.params.copy(), self.jams.copy(), self.x.copy(), self.work.copy(),
                     self.stages.copy(), self.t, self.mechanism)

    def __deepcopy__(self, memo) -> "Plant":
        return self.copy()     # a compiled mechanism is shared, not copied

    # -- sizes -------------------------------------------------------------------
    @property
    def nq(self) -> int:
        return int(self.params[H_NQ])

    @property
    def nact(self) -> int:
        return int(self.params[H_NACT])

    @property
    def model(self) -> int:
        return int(self.params[H_MODEL])

    @property
    def kind(self) -> str:
        """What its kernels step: ``serial_arm``, ``rrr3`` or ``chain`` (a chain model's
        mechanism, a user's or a flexible robot's)."""
        return {MODEL_SERIAL_ARM: "serial_arm", MODEL_RRR3: "rrr3"}.get(self.model, "chain")

    @property
    def reports_energy(self) -> bool:
        """Whether its first diagnostic (plant.stepping.diagnostics) is its mechanical
        energy T + V (J): serial arms and chains."""
        return self.model in (MODEL_SERIAL_ARM, MODEL_CHAIN)

    @property
    def q(self) -> np.ndarray:
        return self.x[:self.nq]

    @property
    def qd(self) -> np.ndarray:
        return self.x[self.nq:2 * self.nq]

    def set_state(self, q, qd=None, current=None, t: float = 0.0) -> None:
        """Set q (rad/m), qd and, for the full motor model, the currents (A)."""
        nq = self.nq
        self.x[:nq] = q
        self.x[nq:2 * nq] = 0.0 if qd is None else qd
        if len(self.x) > 2 * nq:
            self.x[2 * nq:] = 0.0 if current is None else current
        self.t = t

    # -- dynamics ----------------------------------------------------------------
    def derivative(self, x=None, u=None, t=None) -> np.ndarray:
        """dx/dt at a state (default: the current one)."""
        x = self.x if x is None else np.asarray(x, dtype=float)
        u = np.zeros(self.nact) if u is None else np.asarray(u, dtype=float)
        dx = np.zeros(len(x))
        derivative(self.params, self.jams, self.t if t is None else t, x, u, dx, self.work,
                   for_plant(self))
        return dx

    def step(self, u, h: float, method: str = "rk4") -> None:
        """Advance by h seconds with input u held (N m or V); raises PlantError on NaN."""
        health = step(self.params, self.jams, self.t, self.x, np.asarray(u, dtype=float), h,
                      self.work, self.stages, METHODS[method], for_plant(self))
        self.t += h
        if not (health > 0.0) or not np.all(np.isfinite(self.x)):
            raise PlantError(f"plant state invalid at t = {self.t:.6f} s "
                             f"(health {health:.3g}, x = {self.x})")

    # -- faults ------------------------------------------------------------------
    def start_jam(self, joint: int, duration: float) -> None:
        """Jam ``joint`` (1-based, as in the papers) now, over ``duration`` seconds
        (ValueError when plant.jam.jam_duration_error refuses it)."""
        jam.start_jam(self.jams, self.x, self.nq, self.jam_index(joint, duration), self.t,
                      duration)

    def clear_jam(self, joint: int) -> None:
        """Make ``joint`` (1-based) healthy again from its current state."""
        jam.clear_jam(self.jams, self.jam_index(joint))

    def jammed_joints(self) -> list[int]:
        """1-based joints that are jamming or blocked (not those friction holds: stuck_joints)."""
        return [k + 1 for k in range(self.nq) if self.jams[k, JAM_PHASE] in (JAMMING, BLOCKED)]

    def stuck_joints(self) -> list[int]:
        """1-based joints that joint friction holds still now (plant.stick_slip)."""
        return [k + 1 for k in range(self.nq) if self.jams[k, JAM_PHASE] == STUCK]

    @property
    def jammable_joints(self) -> int:
        """How many joints a jam may name (1 .. this); 0 for a plant that cannot jam (a
        3RRR: jams are modelled for chains only)."""
        return 0 if self.model == MODEL_RRR3 else self.nact

    def jam_index(self, joint: int, duration: float = 0.0) -> int:
        """The 0-based index of ``joint`` (1-based) for a jam of ``duration`` s; ValueError
        naming the reason when this plant cannot jam it (a 3RRR, a joint out of range, a
        duration plant.jam.jam_duration_error refuses)."""
        error = jam.jam_duration_error(duration)
        if error is not None:
            raise ValueError(error)
        if self.jammable_joints == 0:
            raise ValueError("jams are modelled for chains only (serial arms, a user's chain)")
        if not 1 <= joint <= self.nact:
            raise ValueError(f"joint must be 1..{self.nact}, got {joint}")
        return joint - 1

