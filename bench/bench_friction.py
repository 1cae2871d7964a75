"""Per-step cost of joint friction (plant.friction, docs/FRICTION.md).
Run: python bench/bench_friction.py [--no-friction]

One RK4 step (1 ms) inside numba (batches of 1000 steps, median and p99 of the per-step
time of 200 batches) of paper 000's 3-DOF arm and of the Panda (torque drives, the URDF
plant), without friction, with viscous friction only and with viscous + Coulomb +
Stribeck friction (the stick-slip decision at every step). ``--no-friction`` times the
frictionless cases alone, which also run on a tree without [friction] (to compare the
no-friction path before and after: run it on each tree's PYTHONPATH).
Timings on a shared 2-core VM vary by tens of percent between runs.
"""
from __future__ import annotations

import sys
import time

import numpy as np
from hilrig.plant.factory import plant_from_config
from hilrig.plant.family import for_plant
from hilrig.plant.integrators import METHOD_RK4, step
from hilrig.settings.config import resolve
from numba import njit

ARM = {"model": "serial_arm", "drive": "torque", "q0": [0.4, -0.3, 0.5]}
PANDA = {"model": "urdf", "urdf": "panda", "tip_link": "panda_hand", "drive": "torque",
         "q0": [0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398]}
CASES = {"none": None, "viscous": {"viscous": 0.5},
         "coulomb": {"viscous": 0.5, "coulomb": 2.0, "static": 3.0}}


@njit   # not cached: one file timed on two trees (numba keys its cache by this file alone)
def steps(p, jams, x, u, work, stages, n, mech):
    """n RK4 steps of 1 ms from t = 0."""
    for k in range(n):
        step(p, jams, k * 1e-3, x, u, 1e-3, work, stages, METHOD_RK4, mech)


def timing(plant_table: dict, friction: dict | None) -> tuple[float, float]:
    """(median, p99) of one step in us."""
    raw = {"plant": dict(plant_table), "safety": {}}
    if friction is not None:
        raw["friction"] = friction
    plant = plant_from_config(resolve(raw))
    u = np.zeros(plant.nact)       # it falls and swings under gravity, sticking and slipping
    mech = for_plant(plant)
    args = (plant.params, plant.jams, plant.x, u, plant.work, plant.stages)
    steps(*args, 10, mech)
    x0, jams0 = plant.x.copy(), plant.jams.copy()
    per = []
    for _ in range(200):     # each batch a second of motion from the initial state
        plant.x[:] = x0
        plant.jams[:] = jams0
        start = time.perf_counter()
        steps(*args, 1000, mech)
        per.append((time.perf_counter() - start) / 1000 * 1e6)
        assert np.all(np.isfinite(plant.x))
    return float(np.median(per)), float(np.percentile(per, 99))


def main() -> None:
    cases = {"none": None} if "--no-friction" in sys.argv else CASES
    for name, table in (("3-DOF arm", ARM), ("Panda (URDF)", PANDA)):
        for case, friction in cases.items():
            median, p99 = timing(table, friction)
            print(f"{name:14s} friction {case:8s} RK4 step median {median:7.3f} us  "
                  f"p99 {p99:7.3f} us")


if __name__ == "__main__":
    main()
