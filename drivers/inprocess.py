"""The plant in the controller's own process: the embedded default link.

``read`` samples the plant (joint positions and velocities of the actuated
joints, motor currents); ``write`` holds the command over one step h and
advances the plant (plant.packed: one compiled call with a single argument, the
cheapest from Python). Neither allocates: both call compiled kernels on the
plant's preallocated arrays. The same class is the plant behind the emulator
and behind the emulated drives.

Lifecycle (the base, drivers.link, keeps the order): ``configure`` makes the plant
readable (and loads the current kernel ``read`` calls); ``activate`` lets ``write``
step it. The plant does not advance before ``activate``: its clock is ``write``, which
after ``safe_stop`` steps it under zero input.
"""
from __future__ import annotations

import numpy as np
from hilrig.drivers.link import Link, LinkError, Measurement
from hilrig.errors import ConfigError
from hilrig.plant.factory import correction_id, plant_from_config
from hilrig.plant.integrators import METHOD_RK4
from hilrig.plant.layout import DRIVE_TORQUE, H_DRIVE
from hilrig.plant.model import METHODS, Plant
from hilrig.plant.motor import currents
from hilrig.plant.packed import PackedStep
from hilrig.plant.stepping import correct
from hilrig.schema import Config


class PlantLink(Link):
    """A Plant stepped by h per ``write``.

    Args:
        plant: the plant, in its initial state (its ``t`` is the plant time, s).
        h: step and control period, s.
        method: integrator id (plant.integrators), RK4 by default.
        correction: constraint correction id after each step (rt.lockstep).
    """

    def __init__(self, plant: Plant, h: float, method: int = METHOD_RK4, correction: int = 0):
        self.plant = plant
        self.h = float(h)
        self.n_axes = plant.nact
        self.command_unit = "N m" if int(plant.params[H_DRIVE]) == DRIVE_TORQUE else "V"
        self.method, self.correction = int(method), int(correction)
        self.stepper = PackedStep(plant, h, method, correction)
        self.held = self.stepper.u
        # the actuated joints' angles and rates: views into the packed state, which stays
        # in place (the packed kernel steps it), so read copies without slicing per tick
        self._q, self._dq = plant.x[:self.n_axes], plant.x[plant.nq:plant.nq + self.n_axes]

    @classmethod
    def from_config(cls, cfg: Config) -> "PlantLink":
        """The config's plant in its initial state (constraint correction applied)."""
        plant = plant_from_config(cfg)
        correction = correction_id(cfg)
        correct(plant.params, plant.x, correction, plant.work)
        integrator = cfg.sim.integrator
        if integrator not in METHODS:
            raise ConfigError(f"sim.integrator: {integrator!r} cannot step in real time "
                              f"(one of {sorted(METHODS)})")
        return cls(plant, cfg.sim.dt, METHODS[integrator], correction)

    def describe(self) -> str:
        return "in-process plant"

    def _configure(self) -> None:
        """Zero the held command and load the current kernel (one read into scratch)."""
        self.held[:] = 0.0
        self._read(Measurement(self.n_axes))

    def _read(self, meas: Measurement) -> bool:
        p = self.plant
        meas.buffer[0] = p.t
        meas.pos[:] = self._q
        meas.vel[:] = self._dq
        currents(p.params, p.x, self.held, meas.current, p.jams)
        return True

    def _write(self, command: np.ndarray) -> None:
        """Hold ``command`` over one step h and advance the plant."""
        self.held[:] = command
        if not self.stepper.step():
            raise LinkError(f"plant state invalid at t = {self.plant.t:.6f} s (NaN or singular "
                            f"mass matrix) after command {self.held}")

    def _write_stopped(self) -> None:
        """Advance the plant under the zero command ``safe_stop`` left held."""
        self._write(self.held)

    def _safe_stop(self) -> None:
        """Zero the held command (zero volts: the motors brake through their back-EMF)."""
        self.held[:] = 0.0
