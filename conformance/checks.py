"""Conformance checks for a controller, a plant and a link, in the spirit of Gymnasium's
``check_env``: run a part briefly against its interface's contract and fail with a
message that names the part and the property it breaks.

- ``check_controller``: the law fills all of u with finite values, leaves its inputs
  alone, repeats itself from the same state, survives NaN currents, has 1-D float64
  arrays and (compiled) does not allocate per call (controllers.interface).
- ``check_plant``: array shapes and dtypes, a finite step under zero input, a NaN state
  detected, bit-identical repeated runs, and energy: conserved by the undamped,
  torque-driven mechanism, never gained by a torque-driven serial arm (plant.model).
- ``check_link``: attributes set, the lifecycle order enforced (also after ``close``),
  a finite measurement after ``configure``, zeros accepted after ``activate``,
  ``safe_stop`` and ``close`` idempotent (also on a link never configured), and a link
  that cannot configure raising LinkError, refusing the calls of a configured link and
  closing quietly (drivers.link).

Each function returns None when the part conforms and raises ``ConformanceError`` at
the first property it breaks. They run in a few seconds, on copies: the controller's
state and the plant passed in are left as they were.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np
from hilrig.controllers.interface import Controller
from hilrig.drivers.link import Link, LinkError, Measurement
from hilrig.plant.factory import plant_from_config, plant_model
from hilrig.plant.layout import (
    DRIVE_TORQUE,
    DRIVE_VOLTAGE_FULL,
    H_DRIVE,
    JAM_COLUMNS,
)
from hilrig.plant.model import DRIVES, METHODS, Plant, PlantError
from hilrig.plant.stepping import diagnostics
from hilrig.rt.sim import SimulationError, simulate
from hilrig.schema import Config

ENERGY_STEP = 1e-3          # s: RK4 step of the energy checks
ENERGY_STEPS = 500          # 0.5 s of motion
ENERGY_TOLERANCE = 1e-6     # drift allowed, relative to the peak kinetic energy
ENERGY_FLOOR = 1e-9         # J: drift allowed whatever the motion (round-off)
ENERGY_RATE = 1.0           # rad/s: initial joint rates of the conservation run
PROBE_INPUT = 0.1           # N m or V: the constant input of the plant's determinism run
SEED = 0                    # of the seeded states both checks sample
PLANT_SAMPLES = 12          # seeded states of the plant's energy and mass-matrix checks
SAMPLE_ANGLE = 1.0          # rad (m): sampled q within q0 +- this
SAMPLE_RATE = 2.0           # rad/s (m/s): sampled qd within +- this
SYMMETRY_TOLERANCE = 1e-9   # |M - M^T| allowed, relative to the largest |M_ij|
CONTROLLER_SAMPLES = 64     # seeded measurements of the controller check
SAMPLE_TIME = 10.0          # s: sampled t within [0, this)
SAMPLE_POSITION = math.pi   # rad: sampled pos within +- this
SAMPLE_VELOCITY = 5.0       # rad/s: sampled vel within +- this
SAMPLE_CURRENT = 5.0        # A: sampled currents within +- this
GUARD = -9.87654321e123     # the value around u that a law writing past its end overwrites
DRIVE_NAMES = {value: name for name, value in DRIVES.items()}


class ConformanceError(AssertionError):
    """A part breaks its interface's contract; the message names the part and the property.

    An AssertionError, not a ConfigError: a failed check is a defect in the part's code,
    found as a test finds one (pytest reports it as a failed assertion, and the traceback
    stays visible), not a mistake in what the user asked for, which ``hil`` would print as
    one line. It is raised explicitly, so ``python -O`` does not remove the checks.
    """


# -- controllers ----------------------------------------------------------------------

def check_controller(controller: Controller, n_axes: int, *, ticks: int = 5,
                     dt: float = 1e-3, samples: int = CONTROLLER_SAMPLES,
                     seed: int = SEED) -> None:
    """Check a controller (compiled or Python law) for a link of ``n_axes`` axes.

    The law is called on a fixed, finite measurement (t = 0.25 s, pos = 0.1 k rad,
    vel = -0.05 k rad/s, currents 0.2 A for axis k = 1..n_axes) with copies of the
    controller's params and state, and must:

    - have params and state that are 1-D, C-contiguous float64 arrays;
    - write n_axes finite values into u (u starts as NaN) and nothing past its end;
    - leave pos, vel, cur and params as they were;
    - give bit-identical u and state over ``ticks`` calls (t advancing by ``dt`` s)
      from two fresh copies of its initial state: its memory lives in ``state``;
    - not raise when the currents are NaN (links that cannot measure them);
    - write n_axes finite values for each of ``samples`` measurements drawn from a
      generator seeded by ``seed`` (t in [0, 10) s, pos within +-pi rad, vel within
      +-5 rad/s, currents within +-5 A), and for each again with NaN currents, every call
      from a fresh copy of its initial state;
    - (compiled laws) not allocate on numba's heap per call, when numba can count it.

    Raises ConformanceError naming the controller (``controller.name``).
    """
    name = f"controller {controller.name or getattr(controller.law, '__name__', '?')!r}"
    for label in ("params", "state"):
        array = getattr(controller, label)
        if not (isinstance(array, np.ndarray) and array.ndim == 1
                and array.dtype == np.float64 and array.flags.c_contiguous):
            raise ConformanceError(f"{name}: {label} must be a 1-D C-contiguous float64 "
                                   f"array, got {_describe_array(array)}")
    t, pos, vel, cur = _probe_measurement(n_axes)
    first, first_state = _run_law(controller, name, n_axes, t, pos, vel, cur, ticks, dt)
    for u in first:
        if not np.all(np.isfinite(u)):
            raise ConformanceError(f"{name}: u = {u} has non-finite entries for a finite "
                                   f"measurement (NaN where the law wrote nothing, or wrote "
                                   f"NaN/inf): it must write {n_axes} finite values")
    second, second_state = _run_law(controller, name, n_axes, t, pos, vel, cur, ticks, dt)
    if not (_identical(first, second) and _identical(first_state, second_state)):
        raise ConformanceError(
            f"{name}: not deterministic: {ticks} calls from two fresh copies of its state "
            f"gave u {first[-1]} and {second[-1]}, state {first_state} and {second_state} "
            "(a random number, or memory kept outside state?)")
    _run_law(controller, name, n_axes, t, pos, vel, np.full(n_axes, np.nan), ticks=1, dt=dt,
             measurement="a measurement with NaN currents")
    _check_sampled_measurements(controller, name, n_axes, samples, seed)
    if controller.compiled:
        _check_no_allocation(controller, name, n_axes, t, pos, vel, cur)


def _check_sampled_measurements(controller, name, n_axes, samples, seed) -> None:
    """One call per seeded measurement, with its currents and with NaN currents, each from
    a fresh copy of the initial state: u must be finite."""
    rng = np.random.default_rng(seed)
    nan = np.full(n_axes, np.nan)
    for k in range(samples):
        t = float(rng.uniform(0.0, SAMPLE_TIME))
        pos, vel, cur = (rng.uniform(-1.0, 1.0, n_axes) * scale
                         for scale in (SAMPLE_POSITION, SAMPLE_VELOCITY, SAMPLE_CURRENT))
        for currents in (cur, nan):
            where = (f"t = {t!r} s, pos = {_show(pos)}, vel = {_show(vel)}, "
                     f"cur = {_show(currents)} (seeded measurement {k + 1} of {samples}, "
                     f"seed {seed})")
            u = _run_law(controller, name, n_axes, t, pos, vel, currents, ticks=1, dt=0.0,
                         measurement=where)[0][0]
            if not np.all(np.isfinite(u)):
                raise ConformanceError(f"{name}: u = {_show(u)} has non-finite entries for "
                                       f"{where}: it must write {n_axes} finite values "
                                       "wherever it is measured, also without currents")


def _probe_measurement(n_axes: int):
    """The finite measurement the controller checks use: t (s), pos, vel, cur."""
    k = np.arange(1.0, n_axes + 1.0)
    return 0.25, 0.1 * k, -0.05 * k, np.full(n_axes, 0.2)


def _run_law(controller, name, n_axes, t, pos, vel, cur, ticks, dt,
             measurement="a finite measurement"):
    """``ticks`` calls of the law on copies of its params and initial state and of the
    measurement; the u of each call (rows) and the final state. Checks that the law
    raises nothing, writes nothing past u and leaves its inputs unchanged."""
    probe = dataclasses.replace(controller, params=controller.params.copy(),
                                state=controller.state.copy())
    inputs = {"pos": pos.copy(), "vel": vel.copy(), "cur": cur.copy()}
    rows = np.zeros((ticks, n_axes))
    guarded = np.full(n_axes + 2, GUARD)
    u = guarded[1:-1]
    for k in range(ticks):
        u[:] = np.nan
        try:
            probe(t + k * dt, inputs["pos"], inputs["vel"], inputs["cur"], u)
        except Exception as exc:
            raise ConformanceError(f"{name}: raised {type(exc).__name__}: {exc} on "
                                   f"{measurement}") from exc
        if guarded[0] != GUARD or guarded[-1] != GUARD:
            raise ConformanceError(f"{name}: wrote outside u (more than {n_axes} values)")
        rows[k] = u
    changed = [label for label, given in (("pos", pos), ("vel", vel), ("cur", cur))
               if not _identical(inputs[label], given)]
    if not _identical(probe.params, controller.params):
        changed.append("params")
    if changed:
        raise ConformanceError(f"{name}: wrote its input {', '.join(changed)} (a law reads "
                               "pos, vel, cur and params, and writes only u and state)")
    return rows, probe.state


def _check_no_allocation(controller, name, n_axes, t, pos, vel, cur, calls: int = 3) -> None:
    """Fail if every one of ``calls`` calls of a compiled law allocated on numba's heap.

    Numba counts its allocations only while its (process-wide) statistics are on; they
    are switched on for the calls and restored after. Another thread allocating at the
    same time could add to a count, so one call without allocation suffices. Skipped
    when this numba has no statistics switch (a private module of numba's runtime).
    """
    try:
        from numba.core.runtime import _nrt_python as nrt
        from numba.core.runtime import rtsys
        was_on = nrt.memsys_stats_enabled()
    except (ImportError, AttributeError):
        return
    probe = dataclasses.replace(controller, params=controller.params.copy(),
                                state=controller.state.copy())
    u = np.zeros(n_axes)
    nrt.memsys_enable_stats()
    try:
        counts = []
        for _ in range(calls):
            before = rtsys.get_allocation_stats().alloc
            probe(t, pos.copy(), vel.copy(), cur.copy(), u)
            counts.append(rtsys.get_allocation_stats().alloc - before)
    finally:
        if not was_on:
            nrt.memsys_disable_stats()
    if min(counts) > 0:
        raise ConformanceError(f"{name}: allocates per call ({min(counts)} arrays on numba's "
                               "heap): a real-time law preallocates in state")


# -- plants ---------------------------------------------------------------------------

def check_plant(plant_or_cfg: Plant | Config, *, steps: int = 200, h: float | None = None,
                seed: int = SEED) -> None:
    """Check a plant, given as a ``Plant`` or as a resolved config (settings.config) to build one.

    - params 1-D float64; x 1-D float64 of 2 nq values (+ nact currents for drive
      "voltage_full"); jams (nq, JAM_COLUMNS) float64; stages (5, len(x)); nact <= nq;
    - one step of h s under zero input from its state keeps x finite;
    - a NaN in x makes ``Plant.step`` raise PlantError;
    - ``steps`` steps of h s (default: the config's sim.dt, else 1 ms) under a constant
      input of 0.1 N m or V from two copies of the state give bit-identical states;
    - with a config: two ``simulate`` runs of ``steps`` steps of the config (its
      controller included, so it must run under ``hil sim``) give identical arrays;
    - chains (serial arms and a user's chains, which report their energy,
      plant.stepping.diagnostics), before any step: the mass matrix M(q) is finite, symmetric (to 1e-9 of
      its largest entry) and positive definite at the plant's q and at 12 states drawn
      from a generator seeded by ``seed`` (q within q0 +- 1 rad, qd within +- 2 rad/s);
      after the steps above, torque-driven, the plant does not gain energy over 0.5 s of RK4 at 1 ms under zero
      input (damping only takes energy away); with a config whose model declares the keys
      that dissipate (PlantModel.dissipation; a user's chain always does, none by
      default), the same plant driven by torque with those keys zero conserves its energy
      (drift within 1e-6 of its peak kinetic energy over 0.5 s of RK4 at 1 ms) from q0 at
      1 rad/s per coordinate and from each of the seeded states: a damping term that is
      not among the declared keys, or a wrong Coriolis term, breaks it.

    The plant passed in is not changed. Raises ConformanceError naming the plant.
    """
    cfg = plant_or_cfg if isinstance(plant_or_cfg, Config) else None
    plant = plant_from_config(cfg) if cfg is not None else plant_or_cfg
    if h is None:
        h = cfg.sim.dt if cfg is not None else 1e-3
    # the config's fixed step where it names one (a stiff plant needs its "rosenbrock")
    method = cfg.sim.integrator if cfg is not None and cfg.sim.integrator in METHODS else "rk4"
    name = _plant_name(plant)
    _check_plant_arrays(plant, name)
    if plant.reports_energy:      # first: a step with a bad M fails with a vaguer message
        states = _sampled_states(plant, seed)
        _check_mass_matrix(plant, name, states)
    _step(plant.copy(), name, np.zeros(plant.nact), h, "one step under zero input", method)
    nan_state = plant.copy()
    nan_state.x[0] = np.nan
    try:
        nan_state.step(np.zeros(plant.nact), h, method)
    except PlantError:
        pass
    else:
        raise ConformanceError(f"{name}: a NaN in the state was not detected (Plant.step "
                               "did not raise PlantError)")
    first, second = plant.copy(), plant.copy()
    u = np.full(plant.nact, PROBE_INPUT)
    for probe in (first, second):
        for _ in range(steps):
            _step(probe, name, u, h, f"{steps} steps under a constant input", method)
    if not _identical(first.x, second.x):
        raise ConformanceError(f"{name}: not deterministic: {steps} steps from copies of one "
                               f"state gave x = {first.x} and {second.x}")
    if cfg is not None:
        _check_simulation_determinism(cfg, name, steps)
    if plant.reports_energy:
        if int(plant.params[H_DRIVE]) == DRIVE_TORQUE and not plant.jammed_joints():
            drift = _energy_drift(plant.copy(), name, method)
            if drift.gain > drift.tolerance:
                raise ConformanceError(
                    f"{name}: gained {drift.gain:.3g} J in {ENERGY_STEPS * ENERGY_STEP} s under "
                    f"zero torque (allowed {drift.tolerance:.3g} J): damping only takes "
                    "energy away")
        dissipation = plant_model(cfg.plant.model).dissipation if cfg is not None else None
        if dissipation is not None:
            _check_conservation(_conservative_plant(cfg, dissipation), name, dissipation,
                                states)


def _plant_name(plant: Plant) -> str:
    model = plant.kind
    drive = DRIVE_NAMES.get(int(plant.params[H_DRIVE]), "?")
    return f"plant {model} ({drive}, nq = {plant.nq}, nact = {plant.nact})"


def _check_plant_arrays(plant: Plant, name: str) -> None:
    nq, nact = plant.nq, plant.nact
    if not 0 < nact <= nq:
        raise ConformanceError(f"{name}: needs 0 < nact <= nq")
    nx = 2 * nq + (nact if int(plant.params[H_DRIVE]) == DRIVE_VOLTAGE_FULL else 0)
    for label, shape in (("params", None), ("x", (nx,)), ("jams", (nq, JAM_COLUMNS)),
                         ("stages", (5, nx))):
        array = getattr(plant, label)
        if not (isinstance(array, np.ndarray) and array.dtype == np.float64
                and (array.ndim == 1 if shape is None else array.shape == shape)):
            wanted = "1-D" if shape is None else f"shape {shape}"
            raise ConformanceError(f"{name}: {label} must be a float64 array of {wanted}, "
                                   f"got {_describe_array(array)}")


def _step(plant: Plant, name: str, u: np.ndarray, h: float, what: str,
          method: str = "rk4") -> None:
    """One ``Plant.step``; PlantError (a non-finite state) becomes a ConformanceError."""
    try:
        plant.step(u, h, method)
    except PlantError as exc:
        raise ConformanceError(f"{name}: {what}: {exc}") from exc


def _check_simulation_determinism(cfg: Config, name: str, steps: int) -> None:
    short = cfg.replace(sim=dataclasses.replace(cfg.sim, duration=steps * cfg.sim.dt))
    try:
        runs = [simulate(short).arrays for _ in range(2)]
    except SimulationError as exc:
        raise ConformanceError(f"{name}: simulate over {steps} steps: {exc}") from exc
    differ = [key for key in runs[0] if not _identical(runs[0][key], runs[1][key])]
    if differ:
        raise ConformanceError(f"{name}: not deterministic: two simulate runs of {steps} "
                               f"steps differ in {', '.join(differ)}")


def _sampled_states(plant: Plant, seed: int) -> np.ndarray:
    """PLANT_SAMPLES states [q, qd] (rows of 2 nq) around the plant's q: q within
    +- SAMPLE_ANGLE of it, qd within +- SAMPLE_RATE, from a generator seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    nq = plant.nq
    states = rng.uniform(-1.0, 1.0, (PLANT_SAMPLES, 2 * nq))
    states[:, :nq] = plant.q + SAMPLE_ANGLE * states[:, :nq]
    states[:, nq:] *= SAMPLE_RATE
    return states


def _check_mass_matrix(plant: Plant, name: str, states: np.ndarray) -> None:
    """M(q) (plant.stepping.diagnostics leaves it in the work array; NaN first, so an entry
    the mechanism does not write shows) must be finite, symmetric and positive definite at
    the plant's q and at each sampled state."""
    nq = plant.nq
    probe = plant.copy()
    out = np.zeros(3)
    for label, q in [("the plant's q", plant.q)] + [
            (f"seeded state {k + 1} of {len(states)}", row[:nq]) for k, row in enumerate(states)]:
        x = probe.x.copy()
        x[:nq] = q
        x[nq:2 * nq] = 0.0
        probe.work[:nq, :nq] = np.nan
        diagnostics(probe.params, x, out, probe.work, probe.mechanism)
        mass = probe.work[:nq, :nq].copy()
        where = f"at q = {_show(q)} ({label})"
        if not np.all(np.isfinite(mass)):
            raise ConformanceError(f"{name}: M(q) has non-finite entries {where} (non-finite "
                                   "params, or entries the mechanism does not write, which "
                                   f"stay NaN here): M = {_show(mass)}")
        asymmetry = np.abs(mass - mass.T)
        i, j = np.unravel_index(int(np.argmax(asymmetry)), mass.shape)
        if asymmetry[i, j] > SYMMETRY_TOLERANCE * np.abs(mass).max():
            raise ConformanceError(f"{name}: M(q) is not symmetric {where}: M[{i},{j}] = "
                                   f"{float(mass[i, j])!r} but M[{j},{i}] = {float(mass[j, i])!r}")
        eigenvalues = np.linalg.eigvalsh(mass)
        if eigenvalues[0] <= 0.0:
            raise ConformanceError(f"{name}: M(q) is not positive definite {where}: its "
                                   f"smallest eigenvalue is {eigenvalues[0]:.6g} "
                                   f"(eigenvalues {_show(eigenvalues)})")


def _check_conservation(plant: Plant, name: str, dissipation: tuple,
                        states: np.ndarray) -> None:
    """The conservative variant (``_conservative_plant``) keeps its energy from its own
    state and from each sampled state."""
    nq = plant.nq
    zeroed = ", ".join(dissipation) if dissipation else "no keys declared"
    for label, state in [("q0 at 1 rad/s per coordinate", plant.x[:2 * nq])] + [
            (f"seeded state {k + 1} of {len(states)}", row) for k, row in enumerate(states)]:
        probe = plant.copy()
        probe.x[:2 * nq] = state
        drift = _energy_drift(probe, name)
        if drift.largest > drift.tolerance:
            raise ConformanceError(
                f"{name}: with torque drives and its dissipation zero ({zeroed}), energy "
                f"drifted by {drift.largest:.3g} J in {ENERGY_STEPS * ENERGY_STEP} s under zero "
                f"torque (allowed {drift.tolerance:.3g} J, peak kinetic energy "
                f"{drift.peak_kinetic:.3g} J) from q = {_show(state[:nq])}, qd = "
                f"{_show(state[nq:])} ({label}): a damping term not among the keys its model "
                "declares as dissipation, or a wrong Coriolis or centrifugal term")


def _conservative_plant(cfg: Config, dissipation: tuple) -> Plant:
    """The config's plant driven by torque, its ``dissipation`` keys and its joint friction
    ([friction], plant.friction) zero (PlantModel), at 1 rad/s per coordinate."""
    zeros = {key: tuple(0.0 for _ in value) if isinstance(value, tuple) else 0.0
             for key, value in ((key, getattr(cfg.plant, key)) for key in dissipation)}
    nq = len(cfg.plant.q0)
    plant = dataclasses.replace(cfg.plant, drive="torque", qd0=(ENERGY_RATE,) * nq, **zeros)
    none = (0.0,) * nq
    friction = dataclasses.replace(cfg.friction, viscous=none, coulomb=none, static=none)
    return plant_from_config(cfg.replace(plant=plant, friction=friction))


@dataclasses.dataclass
class _Drift:
    """Energy over an energy run: largest |E - E0|, largest E - E0 (J), peak kinetic
    energy (J), and the drift allowed for that motion (J)."""

    largest: float
    gain: float
    peak_kinetic: float

    @property
    def tolerance(self) -> float:
        return ENERGY_TOLERANCE * self.peak_kinetic + ENERGY_FLOOR


def _energy_drift(plant: Plant, name: str, method: str = "rk4") -> _Drift:
    """Step a chain (a serial arm, a user's chain) ENERGY_STEPS steps of ENERGY_STEP s
    (RK4, or the config's fixed step) under zero input and follow its total energy
    (plant.stepping.diagnostics, column 0)."""
    nq = plant.nq
    out, rest = np.zeros(3), np.zeros(len(plant.x))
    u = np.zeros(plant.nact)
    total = np.zeros(ENERGY_STEPS + 1)
    kinetic = np.zeros(ENERGY_STEPS + 1)
    for k in range(ENERGY_STEPS + 1):
        if k:
            _step(plant, name, u, ENERGY_STEP, "energy run under zero input", method)
        diagnostics(plant.params, plant.x, out, plant.work, plant.mechanism)
        total[k] = out[0]
        rest[:nq] = plant.x[:nq]              # the same pose at rest: potential energy only
        diagnostics(plant.params, rest, out, plant.work, plant.mechanism)
        kinetic[k] = total[k] - out[0]
    change = total - total[0]
    return _Drift(float(np.abs(change).max()), float(change.max()), float(kinetic.max()))


# -- links ----------------------------------------------------------------------------

def check_link(link_factory: Callable[[], Link], *,
               failing_factory: Callable[[], Link] | None = None,
               first_read_timeout: float = 0.5) -> None:
    """Check a link through its lifecycle; ``link_factory()`` returns a fresh, unopened Link.

    On one link: ``n_axes`` (a positive int) and ``command_unit`` ("V" or "N m") set;
    ``write`` and ``activate`` before ``configure`` raise LinkError; after ``configure``
    ``write`` still raises LinkError and ``read`` gives a measurement with finite t, pos
    and vel within ``first_read_timeout`` s; ``activate`` sets ``enabled_at_ns`` and a
    write of zeros is accepted; ``safe_stop`` twice, a write after it, and ``close``
    twice raise nothing; after ``close``, ``read``, ``write`` and ``activate`` raise
    LinkError (a closed link touches nothing). Then a second link from the factory opens
    (the first released what it held), reads and closes as a context manager; a third,
    never configured, takes ``safe_stop`` and ``close`` twice each without raising.

    ``failing_factory`` (optional) returns a link pointed at nothing (an endpoint nobody
    serves, a port that does not exist): its ``configure`` must raise LinkError; then
    ``read``, ``write`` and ``activate`` raise LinkError (nothing is left half-configured),
    and ``safe_stop`` and ``close``, twice each, raise nothing.

    Raises ConformanceError naming the link's class and the step that failed.
    """
    link = link_factory()
    name = f"link {type(link).__name__}"
    try:
        _check_link_lifecycle(link, name, first_read_timeout)
    except BaseException:
        _release_quietly(link)
        raise
    second = link_factory()
    try:
        with second:
            _first_measurement(second, f"{name} (a second one)", first_read_timeout)
    except LinkError as exc:
        raise ConformanceError(f"{name}: a second link from the factory did not open after "
                               f"the first closed: {exc}") from exc
    _quiet_calls(link_factory(), f"{name} (never configured)",
                 ("safe_stop", "second safe_stop", "close", "second close"), "")
    if failing_factory is not None:
        failing = failing_factory()
        _check_failed_configure(failing, f"link {type(failing).__name__}")


def _check_link_lifecycle(link: Link, name: str, first_read_timeout: float) -> None:
    n = getattr(link, "n_axes", None)
    if not (isinstance(n, (int, np.integer)) and n > 0):
        raise ConformanceError(f"{name}: n_axes must be a positive int, got {n!r}")
    unit = getattr(link, "command_unit", None)
    if unit not in ("V", "N m"):
        raise ConformanceError(f"{name}: command_unit must be 'V' or 'N m', got {unit!r}")
    zeros = np.zeros(n)
    _expect_link_error(lambda: link.write(zeros), name, "write before configure")
    _expect_link_error(link.activate, name, "activate before configure")
    _lifecycle_call(link.configure, name, "configure")
    _expect_link_error(lambda: link.write(zeros), name, "write after configure, before activate")
    _first_measurement(link, name, first_read_timeout)
    _lifecycle_call(link.activate, name, "activate")
    if not isinstance(link.enabled_at_ns, int):
        raise ConformanceError(f"{name}: activate did not set enabled_at_ns "
                               f"(got {link.enabled_at_ns!r})")
    _lifecycle_call(lambda: link.write(zeros), name, "write of zeros after activate")
    for what, call in (("safe_stop", link.safe_stop), ("second safe_stop", link.safe_stop),
                       ("write after safe_stop", lambda: link.write(zeros)),
                       ("close", link.close), ("second close", link.close)):
        _lifecycle_call(call, name, what)
    _refuses_the_configured_calls(link, name, "close")


def _first_measurement(link: Link, name: str, timeout: float) -> None:
    """Read until a fresh measurement (at most ``timeout`` s); t, pos, vel must be finite."""
    meas = Measurement(link.n_axes)
    deadline = time.monotonic() + timeout
    while not _lifecycle_call(lambda: link.read(meas), name, "read after configure"):
        if time.monotonic() > deadline:
            raise ConformanceError(f"{name}: no fresh measurement within {timeout} s "
                                   "after configure")
        time.sleep(0.001)
    if not (math.isfinite(meas.t) and np.all(np.isfinite(meas.pos))
            and np.all(np.isfinite(meas.vel))):
        raise ConformanceError(f"{name}: read gave a non-finite measurement: t = {meas.t}, "
                               f"pos = {meas.pos}, vel = {meas.vel}")


def _check_failed_configure(link: Link, name: str) -> None:
    try:
        link.configure()
    except LinkError:
        pass
    except Exception as exc:
        _release_quietly(link)
        raise ConformanceError(f"{name}: configure of a link pointed at nothing raised "
                               f"{type(exc).__name__}: {exc}, not LinkError") from exc
    else:
        _release_quietly(link)
        raise ConformanceError(f"{name}: configure of a link pointed at nothing did not raise")
    try:
        _refuses_the_configured_calls(link, name, "a failed configure")
    except ConformanceError:
        _release_quietly(link)
        raise
    _quiet_calls(link, name, ("safe_stop", "second safe_stop", "close", "second close"),
                 " after a failed configure")


def _refuses_the_configured_calls(link: Link, name: str, after: str) -> None:
    """``read``, ``write`` and ``activate`` must raise LinkError (the link holds nothing)."""
    zeros = np.zeros(link.n_axes)
    for what, call in (("read", lambda: link.read(Measurement(link.n_axes))),
                       ("write", lambda: link.write(zeros)), ("activate", link.activate)):
        _expect_link_error(call, name, f"{what} after {after}")


def _quiet_calls(link: Link, name: str, calls, suffix: str) -> None:
    """Each of ``calls`` ("safe_stop", "second close", ...: the method is the last word)
    must raise nothing."""
    for what in calls:
        _lifecycle_call(getattr(link, what.split()[-1]), name, what + suffix)


def _lifecycle_call(call: Callable, name: str, what: str):
    """``call()``; any exception becomes a ConformanceError naming ``what``."""
    try:
        return call()
    except Exception as exc:
        raise ConformanceError(f"{name}: {what} raised {type(exc).__name__}: {exc}") from exc


def _expect_link_error(call: Callable, name: str, what: str) -> None:
    try:
        call()
    except LinkError:
        return
    except Exception as exc:
        raise ConformanceError(f"{name}: {what} raised {type(exc).__name__}: {exc}, "
                               "not LinkError") from exc
    raise ConformanceError(f"{name}: {what} did not raise LinkError")


def _release_quietly(link: Link) -> None:
    """safe_stop and close a link whose check already failed: the failure is the report,
    so what these raise is dropped."""
    for call in (link.safe_stop, link.close):
        with contextlib.suppress(Exception):
            call()


# -- helpers --------------------------------------------------------------------------

def _identical(a, b) -> bool:
    """Bit for bit equal arrays (NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _show(array) -> str:
    """An array in a message: 6 significant digits, one line."""
    return np.array2string(np.asarray(array), precision=6, separator=", ",
                           max_line_width=10_000).replace("\n", "")


def _describe_array(array) -> str:
    if not isinstance(array, np.ndarray):
        return type(array).__name__
    layout = "" if array.flags.c_contiguous else ", not C-contiguous"
    return f"{array.dtype} of shape {array.shape}{layout}"
