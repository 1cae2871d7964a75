"""Costs of the flexible P-R robot (issue 12) and of the 3RRR stiffness map.

    python bench/bench_flex.py [--skip-run]

1. One 1 ms step of plant.flex_rp.robot inside numba, n = 5 and n = 10 elements: the Rosenbrock
   step (sim.integrator = "rosenbrock"; goals <= 5 us and <= 10 us) as `hil sim` runs it
   (the lagged Jacobian, one column refreshed per step), the step alone in a compiled
   loop refreshing 1, 2 or all 2 nq Jacobian columns per step (all: the formulation
   before the lag), and for the trade-off the explicit alternative, RK4 substeps small enough to be stable (the damped bending
   modes reach about -3e5 1/s at n = 5).
2. `hil run configs/flex_rp_rt.toml` (feed-forward + PD, 1 kHz, real time): per-tick
   compute median and p99 from its telemetry, against the 1 ms budget.
3. The 50 x 50 stiffness map of the 3RRR (goal < 1 s).

Medians and tails over repeats; on a shared machine the tails are noise, re-run it quiet.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


def step_cost(elements: int, method: str, substeps: int = 1, repeats: int = 15,
              duration: float = 0.2) -> np.ndarray:
    """Seconds per 1 ms tick inside the compiled offline loop (rt.lockstep through
    rt.sim.simulate: the step and a constant-torque law), one sample per run; RK4 with
    ``substeps`` steps per tick (sim.dt = 1 ms / substeps, ticks counted per 1 ms)."""
    from hilrig.settings.config import resolve
    from hilrig.rt.sim import simulate
    raw = {"plant": {"model": "flex_rp", "drive": "torque", "elements": elements},
           "sim": {"integrator": method, "dt": 1e-3 / substeps, "duration": duration},
           "input": {"torque": [0.01, 1e-4]}}
    cfg = resolve(raw)
    simulate(cfg)
    ticks = duration / 1e-3
    return np.array([simulate(cfg).stepping_seconds / ticks for _ in range(repeats)])


def ros2_cost(elements: int, columns: int, ticks: int = 200, repeats: int = 25) -> np.ndarray:
    """Seconds per 1 ms step of plant.rosenbrock.ros2 alone refreshing ``columns`` Jacobian
    columns per step, in a compiled loop over ``ticks`` steps under a constant force and
    torque from the paper's moving start; one sample per loop."""
    import time

    from hilrig.plant import rosenbrock
    from hilrig.plant.factory import plant_from_config
    from hilrig.settings.config import resolve
    from numba import njit

    @njit
    def loop(p, jams, x, u, work, stages, mech, columns, ticks):
        health = 1.0
        for _ in range(ticks):
            health = min(health, rosenbrock.ros2(p, jams, x, u, 1e-3, work, stages, mech,
                                                 columns))
        return health

    raw = {"plant": {"model": "flex_rp", "drive": "torque", "elements": elements,
                     "start_rates": [0.1 - 0.3 / 3 ** 0.5, 1 / 3 ** 0.5]},
           "sim": {"integrator": "rosenbrock"}}
    plant = plant_from_config(resolve(raw))
    u = np.array([0.01, 1e-4])
    start = plant.x.copy()
    samples = []
    for _ in range(repeats + 1):
        plant.x[:] = start
        plant.work[:] = 0.0          # a fresh Jacobian: every loop starts alike
        began = time.perf_counter()
        ok = loop(plant.params, plant.jams, plant.x, u, plant.work, plant.stages,
                  plant.mechanism, columns, ticks) > 0.0
        samples.append((time.perf_counter() - began) / ticks)
        assert ok
    return np.array(samples[1:])       # the first call compiles


def run_ticks() -> np.ndarray:
    """compute_tick (us) of each tick of `hil run flex_rp_rt` (2 s)."""
    with tempfile.TemporaryDirectory() as tmp:
        log, out = Path(tmp) / "flex.mcap", Path(tmp) / "flex.npz"
        hil = [sys.executable, "-m", "hilrig.cli"]
        subprocess.run(hil + ["run", str(CONFIGS / "flex_rp_rt.toml"), "--log", str(log),
                              "--no-plot"], check=True, capture_output=True)
        subprocess.run(hil + ["log", "export", str(log), "--out", str(out)], check=True,
                       capture_output=True)
        return np.load(out)["compute_tick"]


def map_time(repeats: int = 10) -> np.ndarray:
    from hilrig.plant.builtin_models import rrr3_stiffness_map
    from hilrig.settings.config import load
    cfg = load(CONFIGS / "rrr3_pd.toml")
    return np.array([rrr3_stiffness_map(cfg)["seconds"] for _ in range(repeats)])


def line(name: str, seconds: np.ndarray, unit: float = 1e6, suffix: str = "us") -> str:
    return (f"{name:44s} median {np.median(seconds) * unit:9.2f} {suffix}   "
            f"p99 {np.percentile(seconds, 99) * unit:9.2f} {suffix}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-run", action="store_true", help="skip the hil run")
    args = parser.parse_args()
    for n in (5, 10):
        print(line(f"rosenbrock 1 ms step, n = {n} (hil sim loop)", step_cost(n, "rosenbrock")))
        for columns in (1, 2, 4 * n + 4):
            print(line(f"  ros2 alone, {columns} Jacobian columns/step", ros2_cost(n, columns)))
    # RK4 is stable for |lambda h| < 2.78: about 110 substeps at n = 5 (-3e5 1/s) and
    # 16 times more at n = 10 (the stiffest damped mode grows as n^4)
    for n, sub in ((5, 128), (10, 2048)):
        print(line(f"rk4, {sub} substeps per 1 ms, n = {n}",
                   step_cost(n, "rk4", sub, 3, 0.02 if n == 10 else 0.1)))
    if not args.skip_run:
        ticks = run_ticks()
        ticks = ticks[np.isfinite(ticks)]
        print(line("hil run flex_rp_rt compute_tick (budget 1 ms)", ticks))
    print(line("rrr3 stiffness map 50 x 50", map_time(), 1e3, "ms"))


if __name__ == "__main__":
    main()
