"""Per-tick plant cost with no fault and with three active, side by side in one run.

    python bench/bench_faults.py [--steps 20000] [--rounds 7]

What a tick does to its plant (rt.tick.tick and the loops around it): the fault table at
the boundary (plant.stepping.apply_schedule), the sensor pass over the measurement
(plant.faults.hold_previous, sense), the plant step (plant.stepping.advance), in one
compiled loop of ``--steps`` steps under a constant command. Per plant, rounds alternate
between four tables: none (no rows), a real-time run's table without faults (64 spare
rows: hil run's), and three active faults (effectiveness on joint 1, friction on joint 2,
a sensor bias on joint 1's position). Printed: the median over rounds of ns per step.
The 3-link arm's unrolled RK4 step does not model actuator faults, so while one is
active its step takes the generic path; a 6-joint chain (the UR5) takes the generic path
either way.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.plant.factory import plant_from_config
from hilrig.plant.family import for_plant
from hilrig.plant.faults import FAULT_COLUMNS, LIVE_ROWS, fault_row, hold_previous, sense
from hilrig.plant.model import METHODS
from hilrig.plant.stepping import advance, apply_schedule
from hilrig.settings.config import load


@kernel
def steps(p, jams, x, u, work, stages, table, meas, h, n, method, mech):
    """n ticks' worth of plant work from t = 0; returns False on an invalid state."""
    nact = u.shape[0]
    nq = x.shape[0] // 2
    for k in range(n):
        t = k * h
        apply_schedule(p, jams, table, t, x, 1e-9 * h)
        hold_previous(table, meas, nact)
        for j in range(nact):
            meas[1 + j] = x[j]
            meas[1 + nact + j] = x[nq + j]
        sense(table, t, k, meas, nact)
        if not advance(p, jams, t, x, u, h, method, 0, work, stages, mech):
            return False
    return True


def tables() -> dict:
    three = np.array([fault_row("effectiveness", 0, 0.0, np.inf, {"factor": 0.7}),
                      fault_row("friction", 1, 0.0, np.inf, {"viscous": 0.5}),
                      fault_row("sensor_bias", 0, 0.0, np.inf, {"bias": 0.01})])
    return {"none": np.zeros((0, FAULT_COLUMNS)),
            "spare rows": np.zeros((LIVE_ROWS, FAULT_COLUMNS)),
            "three active": three}


def bench(name: str, sets: list, n: int, rounds: int) -> None:
    cfg = load(name, sets)
    base = plant_from_config(cfg)
    method = METHODS[cfg.sim.integrator]
    mech = for_plant(base, method)
    u = np.full(base.nact, 0.5)
    times: dict = {label: [] for label in tables()}
    for r in range(rounds + 1):                 # round 0 compiles and warms up
        for label, table in tables().items():
            plant = base.copy()
            meas = np.zeros(1 + 3 * base.nact)
            started = time.perf_counter_ns()
            ok = steps(plant.params, plant.jams, plant.x, u, plant.work, plant.stages, table,
                       meas, cfg.sim.dt, n, method, mech)
            elapsed = time.perf_counter_ns() - started
            assert ok, (name, label)
            if r:
                times[label].append(elapsed / n)
    none = statistics.median(times["none"])
    line = ", ".join(f"{label} {statistics.median(v):7.1f} ns "
                     f"({100 * (statistics.median(v) / none - 1):+5.1f} %)"
                     for label, v in times.items())
    print(f"{name:14s} {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    bench("serial3_free", [], args.steps, args.rounds)
    bench("ur5_pd", [], args.steps, args.rounds)


if __name__ == "__main__":
    main()
