"""The plant in the controller's own process: the embedded default link.

``read`` samples the plant (joint positions and velocities of the actuated
joints, motor currents); ``write`` holds the command over one step h and
advances the plant (plant.packed: one compiled call with a single argument, the
cheapest from Python). Neither allocates: both call compiled kernels on the
plant's preallocated arrays. The same class is the plant behind the emulator
and behind the emulated drives.

A controlled stop (``controlled_stop``, IEC 60204-1 categories 1 and 2) is the stop servo
of drivers.controlled_stop acting on this plant, within ``emulator.supply_voltage`` or
``emulator.max_torque`` (``drive_range``).

Lifecycle (the base, drivers.link, keeps the order): ``configure`` makes the plant
readable (and loads the current kernel ``read`` calls); ``activate`` lets ``write``
step it. The plant does not advance before ``activate``: its clock is ``write``, which
after ``safe_stop`` steps it under zero input, with the holding brakes of ``safety.brake``
engaged (``engage_brakes``: the jam law of plant.jam).
"""
from __future__ import annotations

import numpy as np
from hilrig.drivers.controlled_stop import ControlledStop
from hilrig.drivers.link import Link, LinkError, Measurement
from hilrig.errors import ConfigError
from hilrig.plant.factory import initial_plant
from hilrig.plant.integrators import METHOD_RK4
from hilrig.plant.jam import clear_jam, start_jam
from hilrig.plant.layout import DRIVE_TORQUE, H_DRIVE, HEALTHY, JAM_PHASE
from hilrig.plant.model import METHODS, Plant
from hilrig.plant.motor import currents
from hilrig.plant.packed import PackedStep
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
        self.stopping: ControlledStop | None = None    # a controlled stop (categories 1, 2)
        self.drive_range = np.inf    # +-V or N m the stop servo may apply (from_config: the config's)
        self.brakes = np.zeros(self.n_axes, dtype=bool)   # joints with a holding brake
        self.brake_time = 0.1        # s, the brakes' jam-law deceleration phase
        self.braked = np.zeros(self.n_axes, dtype=bool)   # the brakes holding now

    @classmethod
    def from_config(cls, cfg: Config) -> "PlantLink":
        """The config's plant in its initial state (constraint correction applied)."""
        plant, correction = initial_plant(cfg)
        integrator = cfg.sim.integrator
        if integrator not in METHODS:
            raise ConfigError(f"sim.integrator: {integrator!r} cannot step in real time "
                              f"(one of {sorted(METHODS)})")
        link = cls(plant, cfg.sim.dt, METHODS[integrator], correction)
        link.drive_range = cfg.emulator.drive_range(link.command_unit)
        link.brakes[:] = cfg.safety.brake
        link.brake_time = cfg.safety.brake_time
        return link

    def engage_brakes(self, joints: np.ndarray | None = None) -> np.ndarray:
        """Power removed (from ``joints``, a mask; None: all): every such joint with a
        holding brake (``safety.brake``) that moves freely stops by the jam law (plant.jam,
        as the fault ``brake``) over ``brake_time`` s and stays blocked; a joint already
        jammed is left as it is. Returns the joints braked now (a mask)."""
        p = self.plant
        now = self.brakes & ~self.braked & (p.jams[:self.n_axes, JAM_PHASE] == HEALTHY)
        if joints is not None:
            now &= joints
        for joint in np.flatnonzero(now):
            start_jam(p.jams, p.x, p.nq, int(joint), p.t, self.brake_time)
        self.braked |= now
        return now

    def release_brakes(self, joints: np.ndarray | None = None) -> np.ndarray:
        """Power back (to ``joints``, a mask; None: all): the brakes this link engaged on
        them let go. Returns the joints released (a mask)."""
        which = self.braked.copy() if joints is None else self.braked & joints
        for joint in np.flatnonzero(which):
            clear_jam(self.plant.jams, int(joint))
        self.braked &= ~which
        return which

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
        """Hold ``command`` over one step h and advance the plant; during a controlled stop
        the stop servo's input instead (``command`` is not used)."""
        if self.stopping is not None:
            self.stopping.command(self.held)
        else:
            self.held[:] = command
        if not self.stepper.step():
            raise LinkError(f"plant state invalid at t = {self.plant.t:.6f} s (NaN or singular "
                            f"mass matrix) after command {self.held}")

    def _write_stopped(self) -> None:
        """Advance the plant under the zero command ``safe_stop`` left held."""
        self._write(self.held)

    def _controlled_stop(self, category: int, stop_time: float) -> None:
        """The drives of the in-process plant stop it (drivers.controlled_stop): every
        ``write`` from now on applies the stop servo's input; category 1 ends in
        ``safe_stop``, called by the loop after ``stop_time``."""
        servo = ControlledStop(self.plant, self.h, self.method, self.correction,
                               self.drive_range)
        servo.start(category, stop_time)
        self.stopping = servo

    def _safe_stop(self) -> None:
        """Zero the held command (zero volts: the motors brake through their back-EMF) and
        engage the holding brakes (``engage_brakes``)."""
        self.stopping = None
        self.held[:] = 0.0
        self.engage_brakes()
