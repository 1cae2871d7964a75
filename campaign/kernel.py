"""Many scenarios of a campaign in one compiled call: each run as ``hil sim`` runs it
(rt.lockstep.run on the inputs of rt.sim.offline_run), then measured as
campaign.metrics.measure measures its rows (measure_rows), without Python between them.

Why one call: a run of the arm steps 10 s in about 3 ms, and the Python that would run
between two such calls (building the next plant, measuring the last rows) runs from
caches the compiled run has just emptied, two to five times slower than the same Python
run back to back; a batch builds all its scenarios' inputs first, then runs them all.

``Group``: scenarios whose arrays have the same shapes and that share the law, the chain's
mechanism, the integrator and the correction. Each of their arrays is stacked (one
leading index per scenario), so the kernel hands rt.lockstep.run each scenario's arrays
as views of the same types as rt.sim.simulate's. Every run records into the same rows,
zeroed where a law might read them (the command), as new arrays would be.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.controllers.interface import D_TIME
from hilrig.plant.faults import C_JOINT, C_KIND, C_STATE, C_T_ON, K_BRAKE, K_CLEAR, K_JAM, \
    S_PENDING
from hilrig.plant.layout import H_NQ
from hilrig.plant.stepping import ROW_SCRATCH
from hilrig.plant.family import for_plant
from hilrig.campaign.metrics import FOUND, measure_rows
from hilrig.rt.lockstep import law_of
from hilrig.rt.lockstep import run as lockstep_run
from hilrig.rt.tick import Imperfections, LawArrays, PlantArrays, Records, Stepping, TickIO
from hilrig.rt.sim import OfflineRun
from hilrig.timing.clock import now_ns, timespec

# per scenario: what a run_scenarios row holds
R_ROWS = 0             # rows the run wrote (n_steps + 1 unless its state became invalid)
R_STEPPING = 1         # wall time of the run, s
R_MEASURING = 2        # wall time of measure_rows, s
R_DETECTED = 3         # plant time of the law's first detected fault, s (NaN: none)
R_ONSET = 4            # plant time of the first fault's start, s (NaN: none started)
R_FOUND = 5            # measure_rows' FOUND entries, then the last row's q (nq)
MAX_STACK_BYTES = 64 << 20   # a group's stacked inputs (noise: 48 kB per 1000 rows of 3 joints)

# the stacked inputs, in run_scenarios' order
STACKED = ("params", "jams", "law_params", "law_state", "detection", "schedule", "x", "work",
           "stages", "limits", "noise", "pending", "target", "settings")


@dataclass
class Group:
    """Scenarios that run in one call (module docstring): their ids, the shared law,
    mechanism, integrator, correction and row count, how many it takes (group_capacity),
    and per scenario the arrays of its OfflineRun, its joint targets (zeros: none) and its
    [h (s), settle time (s), reach tolerance (rad)]."""

    law: object
    mechanism: object
    method: int
    correction: int
    n_steps: int
    capacity: int
    ids: list = field(default_factory=list)
    arrays: dict = field(default_factory=dict)

    def add(self, sid: int, run: OfflineRun, target: np.ndarray, settle_time: float,
            tolerance: float) -> None:
        """Scenario ``sid``: its inputs, joint targets (rad), settle time (s) and reach
        tolerance (rad)."""
        values = (*run_arrays(run), target,
                  np.array([run.h, settle_time - 1e-9 * run.h, tolerance]))
        self.ids.append(sid)
        for name, value in zip(STACKED, values):
            self.arrays.setdefault(name, []).append(value)

    def run(self) -> np.ndarray:
        """Run and measure every scenario; one row (R_*) per scenario, in ids' order."""
        stacked = {name: np.stack(self.arrays[name]) for name in STACKED}
        nq, nx = stacked["jams"].shape[1], stacked["x"].shape[1]
        nact = stacked["limits"].shape[2]
        rows = self.n_steps + 1
        out = np.zeros((len(self.ids), R_FOUND + FOUND + nq))
        run_scenarios(self.law, self.mechanism, self.method, self.correction, self.n_steps,
                      *stacked.values(), np.zeros(nact), np.zeros(rows), np.zeros((rows, nx)),
                      np.zeros((rows, nact)), np.zeros((rows, 2 * nact)), np.zeros(1 + 3 * nact),
                      np.zeros(nact),
                      np.zeros(ROW_SCRATCH), timespec(), out)
        return out


def run_arrays(run: OfflineRun) -> tuple:
    """The arrays of an OfflineRun that a Group stacks (the first STACKED)."""
    plant, c = run.plant, run.controller
    return (plant.params, plant.jams, c.params, c.state, c.detection, run.schedule, plant.x,
            plant.work, plant.stages, run.limits, run.noise, run.pending)


def group_key(run: OfflineRun) -> tuple:
    """What the scenarios of one Group share: law, mechanism, integrator, correction, row
    count and the shape of every stacked array."""
    return (_address(law_of(run.controller)), _address(for_plant(run.plant, run.method)),
            run.method,
            run.correction, run.n_steps, tuple(a.shape for a in run_arrays(run)))


def _address(function) -> int:
    """The compiled function's entry point (a law or mechanism built twice is one function),
    a plant family's id (plant.family), or the object's id (None)."""
    if isinstance(function, int):
        return int(function)
    return getattr(function, "address", id(function))


def group_capacity(run: OfflineRun) -> int:
    """How many scenarios like ``run`` one Group takes (its stacked inputs under
    MAX_STACK_BYTES)."""
    size = sum(a.nbytes for a in run_arrays(run))
    return max(1, MAX_STACK_BYTES // max(size, 1))


@kernel
def run_scenarios(law, mech, method, correction, n_steps, params, jams, law_params, law_state,
                  detection, schedule, x, work, stages, limits, noise, pending, target, settings,
                  healthy,
                  rec_t, rec_x, rec_u, rec_seen, meas, held, scratch, ts, out):
    """Run scenario s of the stacked inputs (Group.run) as rt.lockstep.run runs it from
    t = 0 for n_steps steps, measure its rows as campaign.metrics.measure does, and
    write out[s] (R_* entries: with the first detection's and the first fault's times, s).
    rec_t, rec_x, rec_u, rec_seen: the rows every run records into (no currents);
    meas, held: a measurement buffer and the held command (reset per scenario); healthy
    (nact) and scratch (3 x 6): measure_rows' scratch; ts: timing.clock's."""
    nact = held.shape[0]
    for s in range(params.shape[0]):
        p = params[s]
        for k in range(n_steps + 1):
            for j in range(nact):
                rec_u[k, j] = 0.0
        for j in range(nact):
            held[j] = 0.0
        for i in range(meas.shape[0]):
            meas[i] = np.nan
        started = now_ns(ts)
        rows = lockstep_run(law, PlantArrays(p, jams[s], x[s], work[s], stages[s]),
                            LawArrays(law_params[s], law_state[s], limits[s], detection[s]),
                            TickIO(meas, held, held),
                            Stepping(settings[s, 0], method, correction), schedule[s], 0.0,
                            n_steps, Records(rec_t, rec_x, rec_u, rec_seen, rec_seen[:0]),
                            Imperfections(noise[s], pending[s]), mech)
        stepped = now_ns(ts)
        for j in range(nact):
            healthy[j] = 1.0
        onset = np.nan
        for r in range(schedule.shape[1]):      # a joint jammed or braked is not healthy
            kind = schedule[s, r, C_KIND]
            if (kind == K_JAM or kind == K_BRAKE) and schedule[s, r, C_STATE] != S_PENDING:
                healthy[int(schedule[s, r, C_JOINT])] = 0.0
            if kind != 0.0 and kind != K_CLEAR and schedule[s, r, C_STATE] != S_PENDING \
                    and (np.isnan(onset) or schedule[s, r, C_T_ON] < onset):   # the first
                onset = schedule[s, r, C_T_ON]
        nq = int(p[H_NQ])
        row = out[s]
        measure_rows(rec_t[:rows], rec_x[:rows, :nq], rec_x[:rows, nq:2 * nq], rec_u[:rows],
                     target[s], healthy, settings[s, 1], settings[s, 2], p, scratch,
                     True, row[R_FOUND:R_FOUND + FOUND])
        measured = now_ns(ts)
        row[R_ROWS] = rows
        row[R_DETECTED] = np.nan if detection.shape[1] == 0 else detection[s, D_TIME]
        row[R_ONSET] = onset
        row[R_STEPPING] = (stepped - started) * 1e-9
        row[R_MEASURING] = (measured - stepped) * 1e-9
        for i in range(nq):
            row[R_FOUND + FOUND + i] = rec_x[rows - 1, i]
