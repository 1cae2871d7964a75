"""Plant kernel timings (issue: plant models as numba kernels). Run: python bench/bench_plant.py

Prints medians and tails of:
- one RK4 step (1 ms) of the paper's 3-DOF arm stepped inside numba (batches of
  1000 steps; per-step time of each batch): plant.integrators.step, which takes
  the fused scalar step (plant.rk4_arm3), that step alone (without step()'s
  dispatch: the model and jam checks), and the generic RK4 over
  plant.dynamics.derivative (the path before the fused one); healthy, with a
  blocked joint, with DC motors coupled (simplified and full model);
- one step called from Python: step() and plant.stepping.advance() through numba's
  dispatcher (9 and 10 arguments), and plant.packed's one-argument advance through
  the dispatcher and through its compiled entry point (what PackedStep.step calls);
- MuJoCo's mj_step and a Pinocchio aba RK4 step on the same arm, if installed
  (pip install .[bench]), as ratios to ours;
- one RK4 step of the 3RRR with Baumgarte (fused, plant.rrr3_scalar, beside the
  generic RK4), the step and the projection fused (what a run with
  plant.correction = "projection" takes), one full-coordinate projection
  (scalar and generic), one post-adjustment;
- a 10 s run of each paper scenario at 1 ms (x real time, stepping only) and the
  start-up time with an empty and with a warm numba cache (fresh processes).
Timings on a shared 2-core VM vary by tens of percent between runs.
"""
from __future__ import annotations

import copy
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

from hilrig.plant import rrr3, rrr3_scalar  # noqa: E402
from hilrig.plant.factory import plant_from_config  # noqa: E402
from hilrig.plant.family import for_plant  # noqa: E402
from hilrig.plant.integrators import METHOD_RK4, _rk4, state_size, step  # noqa: E402
from hilrig.plant.packed import PackedStep, advance_packed  # noqa: E402
from hilrig.plant.rk4_arm3 import rk4_arm3  # noqa: E402
from hilrig.settings.config import load, resolve  # noqa: E402
from hilrig.plant.stepping import CORRECTION_PROJECTION, advance  # noqa: E402
from hilrig.rt.sim import simulate  # noqa: E402

BATCH = 1000


@njit(cache=True)
def _stepped(p, jams, x, u, h, work, stages, n, mech):
    t = 0.0
    for _ in range(n):
        step(p, jams, t, x, u, h, work, stages, METHOD_RK4, mech)
        t += h


@njit(cache=True)
def _stepped_fused(p, jams, x, u, h, work, stages, n, mech):
    """The fused arm step itself (plant.rk4_arm3), without step()'s dispatch."""
    for _ in range(n):
        rk4_arm3(p, jams, x, u, h)


@njit(cache=True)
def _stepped_generic(p, jams, x, u, h, work, stages, n, mech):
    """The generic RK4 (plant.integrators._rk4 over plant.dynamics.derivative)."""
    t = 0.0
    nx = state_size(p)
    for _ in range(n):
        _rk4(p, jams, t, x, u, h, work, stages, nx, mech)
        t += h


@njit(cache=True)
def _advanced(p, jams, x, u, h, work, stages, n, mech):
    """plant.stepping.advance with the projection: the 3RRR's step and projection fused."""
    t = 0.0
    for _ in range(n):
        advance(p, jams, t, x, u, h, METHOD_RK4, CORRECTION_PROJECTION, work, stages, mech)
        t += h


@njit(cache=True)
def _projected(p, x, work, n):
    for _ in range(n):
        x[3] += 1e-7
        rrr3_scalar.project(p, x, work)


@njit(cache=True)
def _projected_generic(p, x, scratch, n):
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


def inside_numba(plant, u, batches=300, kernel=_stepped) -> np.ndarray:
    """Per-step time of each batch of BATCH steps stepped inside one numba call, compiled
    for the plant's family as the loops are (plant.family)."""
    u = np.asarray(u, float)
    mech = for_plant(plant)
    kernel(plant.params, plant.jams, plant.x.copy(), u, 1e-3, plant.work, plant.stages, 10, mech)
    out = np.empty(batches)
    for b in range(batches):
        x0 = plant.x.copy()
        start = time.perf_counter_ns()
        kernel(plant.params, plant.jams, x0, u, 1e-3, plant.work, plant.stages, BATCH, mech)
        out[b] = (time.perf_counter_ns() - start) / BATCH
    return out


def from_python(plant, u, calls=100_000) -> dict:
    """Time of one step call from Python (perf_counter_ns around each call), per way
    of calling (CALLS, interleaved): {label: samples in ns}."""
    p, jams, work, stages = plant.params, plant.jams, plant.work, plant.stages
    x = plant.x.copy()
    u = np.asarray(u, float)
    packed_plant = copy.deepcopy(plant)
    packed = PackedStep(packed_plant, 1e-3, METHOD_RK4)
    packed.u[:] = u
    call, block = packed.call, packed.block
    advance_packed(block)
    step(p, jams, 0.0, x, u, 1e-3, work, stages, METHOD_RK4)
    advance(p, jams, 0.0, x, u, 1e-3, METHOD_RK4, 0, work, stages)
    clock = time.perf_counter_ns
    out = {label: np.empty(calls) for label in CALLS}
    for k in range(calls):
        if k % 5000 == 0:
            x[:] = plant.x
            packed_plant.x[:] = plant.x
        start = clock()
        step(p, jams, 0.0, x, u, 1e-3, work, stages, METHOD_RK4)
        out[CALLS[0]][k] = clock() - start
        start = clock()
        advance(p, jams, 0.0, x, u, 1e-3, METHOD_RK4, 0, work, stages)
        out[CALLS[1]][k] = clock() - start
        start = clock()
        advance_packed(block)
        out[CALLS[2]][k] = clock() - start
        start = clock()
        call(block)
        out[CALLS[3]][k] = clock() - start
    overhead = np.median([-(clock() - clock()) for _ in range(10000)])
    return {label: samples - overhead for label, samples in out.items()}


CALLS = ("step(9 args), dispatcher", "advance(10 args), dispatcher",
         "advance_packed(block), dispatcher", "PackedStep.call(block)")


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
    code = ("from hilrig.settings.config import load; from hilrig.rt.sim import simulate; "
            "r = simulate(load(%r, ['sim.duration=0.01'])); print(r.startup_seconds)"
            ) % str(ROOT / "configs/rrr3_pd.toml")
    env = dict(os.environ, HILRIG_CACHE_DIR=cache_dir)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    print("== 3-DOF arm (paper 000), one RK4 step, h = 1 ms, inside numba ==")
    for label, drive, u, blocked in (("torque-driven", "torque", [0, 0, 0], False),
                                     ("torque-driven, joint 2 blocked", "torque", [0, 0, 0], True),
                                     ("+ motors, simplified", "voltage", [3.0, -2.0, 1.0], False),
                                     ("+ motors, full (current states)", "voltage_full",
                                      [3.0, -2.0, 1.0], False)):
        plant = arm(drive)
        if blocked:
            plant.start_jam(2, 0.0)
        print(f"{label:34s} step():        {stats(inside_numba(plant, u))}")
        if drive != "voltage_full":  # there step() is the generic RK4
            print(f"{'':34s} rk4_arm3():    "
                  f"{stats(inside_numba(plant, u, kernel=_stepped_fused))}")
            print(f"{'':34s} generic RK4:   "
                  f"{stats(inside_numba(plant, u, kernel=_stepped_generic))}")
    print("\n== the same step called once from Python (torque-driven arm) ==")
    timings = from_python(arm("torque"), [0, 0, 0])
    for label, samples in timings.items():
        print(f"{label:34s} {stats(samples)}")
    ours = np.median(timings[CALLS[-1]])
    import engines
    missing = [name for name, module in (("mujoco", engines.mujoco), ("pin", engines.pin))
               if module is None]
    if missing:
        print(f"(MuJoCo/Pinocchio comparison skipped: {', '.join(missing)} not installed; "
              "pip install .[bench])")
    else:
        mj = engines.time_mujoco_step(n=100_000)
        pin = engines.time_pinocchio_rk4_step(n=30_000)
        print(f"MuJoCo mj_step (RK4) from Python:  median {mj.median_ns:8.0f} ns  "
              f"p99 {mj.p99_ns:8.0f} ns  = {mj.median_ns / ours:.1f}x ours (PackedStep.call)")
        print(f"Pinocchio aba RK4 step from Python: median {pin.median_ns:8.0f} ns  "
              f"p99 {pin.p99_ns:8.0f} ns  = {pin.median_ns / ours:.1f}x ours (PackedStep.call)")

    print("\n== 3RRR (paper 003), Baumgarte on, inside numba ==")
    plant = plant_from_config(load(ROOT / "configs/rrr3_pd.toml"))
    u = [5.0, -5.0, 5.0]
    print(f"{'one RK4 step':34s} step():        {stats(inside_numba(plant, u))}")
    print(f"{'':34s} generic RK4:   "
          f"{stats(inside_numba(plant, u, kernel=_stepped_generic))}")
    print(f"{'RK4 step + projection, fused':34s} advance():     "
          f"{stats(inside_numba(plant, u, kernel=_advanced))}")
    scratch = plant.work[plant.nq + 2:]
    for label, kernel, space in (("full-coordinate projection, scalar", _projected, plant.work),
                                 ("full-coordinate projection, generic", _projected_generic,
                                  scratch),
                                 ("paper's post-adjustment", _post_adjusted, scratch)):
        x = plant.x.copy()
        kernel(plant.params, x, space, 10)
        samples = []
        for _ in range(300):
            x = plant.x.copy()
            start = time.perf_counter_ns()
            kernel(plant.params, x, space, 100)
            samples.append((time.perf_counter_ns() - start) / 100)
        print(f"{label:34s}                {stats(samples)}")

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
