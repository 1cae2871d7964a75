"""Plant kernel timings (issue: plant models as numba kernels). Run: python bench/bench_plant.py

Prints medians and tails of:
- one RK4 step (1 ms) of the paper's 3-DOF arm stepped inside numba (batches of
  1000 steps; per-step time of each batch) and called once from Python;
- the same with DC motors coupled (simplified and full model);
- MuJoCo's mj_step and a Pinocchio aba RK4 step on the same arm, if installed
  (pip install .[bench]), as ratios to ours;
- one RK4 step of the 3RRR with Baumgarte, one full-coordinate projection, one
  post-adjustment;
- a 10 s run of each paper scenario at 1 ms (x real time, stepping only) and the
  start-up time with an empty and with a warm numba cache (fresh processes).
Timings on a shared 2-core VM vary by tens of percent between runs.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import njit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from plant import rrr3  # noqa: E402
from plant.factory import plant_from_config  # noqa: E402
from plant.integrators import METHOD_RK4, step  # noqa: E402
from rt.config import load, resolve  # noqa: E402
from rt.sim import simulate  # noqa: E402

BATCH = 1000


@njit(cache=True)
def _stepped(p, jams, x, u, h, work, stages, n):
    t = 0.0
    for _ in range(n):
        step(p, jams, t, x, u, h, work, stages, METHOD_RK4)
        t += h


@njit(cache=True)
def _projected(p, x, scratch, n):
    for _ in range(n):
        x[3] += 1e-7
        rrr3.project(p, x, scratch)


@njit(cache=True)
def _post_adjusted(p, x, scratch, n):
    for _ in range(n):
        x[3] += 1e-7
        rrr3.post_adjust(p, x, scratch)


def stats(samples_ns) -> str:
    s = np.asarray(samples_ns, dtype=float)
    return (f"median {np.median(s):8.0f} ns  p99 {np.percentile(s, 99):8.0f} ns  "
            f"p99.9 {np.percentile(s, 99.9):8.0f} ns")


def inside_numba(plant, u, batches=300) -> np.ndarray:
    """Per-step time of each batch of BATCH steps stepped inside one numba call."""
    args = (plant.params, plant.jams, plant.x.copy(), np.asarray(u, float), 1e-3, plant.work,
            plant.stages)
    _stepped(*args, 10)
    out = np.empty(batches)
    for b in range(batches):
        x0 = plant.x.copy()
        start = time.perf_counter_ns()
        _stepped(plant.params, plant.jams, x0, args[3], 1e-3, plant.work, plant.stages, BATCH)
        out[b] = (time.perf_counter_ns() - start) / BATCH
    return out


def from_python(plant, u, calls=100_000) -> np.ndarray:
    """Time of one kernel call from Python (perf_counter_ns around each call)."""
    p, jams, work, stages = plant.params, plant.jams, plant.work, plant.stages
    x = plant.x.copy()
    u = np.asarray(u, float)
    step(p, jams, 0.0, x, u, 1e-3, work, stages, METHOD_RK4)
    out = np.empty(calls)
    clock = time.perf_counter_ns
    for k in range(calls):
        if k % 5000 == 0:
            x[:] = plant.x
        start = clock()
        step(p, jams, 0.0, x, u, 1e-3, work, stages, METHOD_RK4)
        out[k] = clock() - start
    overhead = np.median([-(clock() - clock()) for _ in range(10000)])
    return out - overhead


def arm(drive="torque"):
    plant = {"model": "serial_arm", "q0": [0.444134, -0.444134, 0.529083], "damping": 15.0,
             "drive": drive}
    sim = {"integrator": "accurate"} if drive == "voltage_full" else {}
    if drive != "torque":
        plant["motor"] = {"rotor_inertia": 2e-4, "resistance": 2.0, "inductance": 2e-3,
                          "torque_constant": 0.5, "back_emf_constant": 0.5, "gear_ratio": 50.0}
    return plant_from_config(resolve({"plant": plant, "sim": sim}))


def startup(cache_dir: str) -> float:
    """Start-up (compile or cache load) of a run, measured in a fresh process."""
    code = ("import sys; sys.path.insert(0, %r); from rt.config import load; "
            "from rt.sim import simulate; r = simulate(load(%r, ['sim.duration=0.01'])); "
            "print(r.startup_seconds)") % (str(ROOT), str(ROOT / "configs/rrr3_pd.toml"))
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    print("== 3-DOF arm (paper 000), one RK4 step, h = 1 ms ==")
    ours = None
    for label, drive, u in (("torque-driven", "torque", [0, 0, 0]),
                            ("+ motors, simplified", "voltage", [3.0, -2.0, 1.0]),
                            ("+ motors, full (current states)", "voltage_full", [3.0, -2.0, 1.0])):
        plant = arm(drive)
        inside = inside_numba(plant, u)
        outside = from_python(plant, u)
        print(f"{label:34s} inside numba:  {stats(inside)}")
        print(f"{'':34s} from Python:   {stats(outside)}")
        if drive == "torque":
            ours = np.median(outside)
    try:
        import engines
        mj = engines.time_mujoco_step(n=100_000)
        pin = engines.time_pinocchio_rk4_step(n=30_000)
        print(f"MuJoCo mj_step (RK4) from Python:  median {mj.median_ns:8.0f} ns  "
              f"p99 {mj.p99_ns:8.0f} ns  = {mj.median_ns / ours:.1f}x ours from Python")
        print(f"Pinocchio aba RK4 step from Python: median {pin.median_ns:8.0f} ns  "
              f"p99 {pin.p99_ns:8.0f} ns  = {pin.median_ns / ours:.1f}x ours from Python")
    except ImportError as exc:
        print(f"(MuJoCo/Pinocchio comparison skipped: {exc}; pip install .[bench])")

    print("\n== 3RRR (paper 003), Baumgarte on ==")
    plant = plant_from_config(load(ROOT / "configs/rrr3_pd.toml"))
    print(f"{'one RK4 step':34s} inside numba:  {stats(inside_numba(plant, [5.0, -5.0, 5.0]))}")
    scratch = plant.work[plant.nq + 2:]
    for label, kernel in (("full-coordinate projection", _projected),
                          ("paper's post-adjustment", _post_adjusted)):
        x = plant.x.copy()
        kernel(plant.params, x, scratch, 10)
        samples = []
        for _ in range(300):
            x = plant.x.copy()
            start = time.perf_counter_ns()
            kernel(plant.params, x, scratch, 100)
            samples.append((time.perf_counter_ns() - start) / 100)
        print(f"{label:34s} inside numba:  {stats(samples)}")

    print("\n== 10 s of each paper scenario at 1 ms (stepping only) ==")
    for name in ("serial3_free", "serial3_jam1", "serial3_jam2", "rrr3_forward", "rrr3_pd"):
        cfg = load(ROOT / f"configs/{name}.toml", ["sim.duration=10"])
        runs = [simulate(cfg).stepping_seconds for _ in range(5)]
        best, median = min(runs), float(np.median(runs))
        print(f"{name:14s} median {median * 1e3:7.1f} ms ({10 / median:6.0f}x real time), "
              f"best {best * 1e3:7.1f} ms ({10 / best:6.0f}x)")

    print("\n== start-up before the first step (fresh process, rrr3_pd) ==")
    with tempfile.TemporaryDirectory() as cache:
        cold = startup(cache)
        warm = startup(cache)
    print(f"empty numba cache (compile): {cold:.2f} s; warm cache: {warm * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
