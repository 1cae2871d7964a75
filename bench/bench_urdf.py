"""The URDF plant's forward dynamics beside Pinocchio's and MuJoCo's, on the shipped Panda
(plant.model = "urdf", docs/URDF.md). Run: python bench/bench_urdf.py

Prints medians and 99th percentiles (per call, ns) of:
- hilrig: the chain's mechanism alone (M(q) by CRBA, the bias by RNEA, V) and the forward
  dynamics (plant.dynamics.derivative: the mechanism and the Cholesky solve, what one RK4
  stage costs), both called in a compiled loop: batches of BATCH calls, the per-call time
  of each batch, so no Python call is in the figure;
- Pinocchio's aba and MuJoCo's mj_forward and mj_step on the same file (the fingers
  removed, as tests/test_urdf.py does, so that all three have the Panda's 7 joints), each
  call timed from Python with time.perf_counter_ns. Their C++ time is estimated by
  subtracting the median of the same call on a one-joint model of the same kind (one
  revolute joint and one body: the same binding's argument conversion and dispatch, whose
  C++ work is a few tens of ns), printed beside: so the C++ figures are slightly low,
  by that one-joint work;
- one 1 ms RK4 tick of panda_pd (7 joints, geared DC motors, simplified motor model) in
  a compiled loop, the controller's computed torque alone (the built-in feed-forward: one
  more RNEA pass per tick), and a 10 s panda_pd scenario through hil sim's path
  (rt.sim.simulate: its stepping time, wall clock, and the whole run's CPU time of this
  thread, which another process's time slices do not inflate);
- campaigns of 10 s Panda scenarios (panda_jams' grid of jammed joint x jam time x
  payload, 10 s each: 24 scenarios, then 96 with more payloads) on a LocalCluster of one
  single-threaded worker process, warmed first: simulated seconds per second of the
  worker's compiled runs, per wall second of the whole campaign (Dask and Parquet
  included), and per CPU second of the worker process (which other processes' time
  slices do not inflate); the issue's goal is >= 300x real time per core. The 24
  scenarios make tasks of a few scenarios each (campaign.runner's batching gives each
  worker thread several tasks), so Dask's per-task cost weighs more than in the 96, or
  in a real campaign of hundreds;
- `hil run panda_pd` and `hil run rig_inprocess` (paper 000's 3-DOF arm, motors and
  feed-forward) paced at 1 kHz for --seconds each, one after the other on this host: the
  overruns each reports, and their compute_tick medians (skip with --no-run).
The p99 of a compiled loop's batches holds the batches another process's time slice cut
(on a shared machine, up to milliseconds); the medians do not.
Timings on a shared 2-core VM vary by tens of percent between runs.
"""
from __future__ import annotations

import dataclasses
import gc
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import njit

from hilrig.controllers.builtin import builtin_command
from hilrig.controllers.factory import controller_from_config
from hilrig.plant.dynamics import derivative
from hilrig.plant.factory import plant_from_config
from hilrig.plant.family import for_plant
from hilrig.plant.integrators import METHOD_RK4, step
from hilrig.plant.layout import H_BODY
from hilrig.plant.urdf import dynamics, parse
from hilrig.rt.sim import simulate
from hilrig.settings.config import load, resolve

BATCH_NS = 200_000     # a batch's own work, about 200 us: a longer one is often cut by
BATCHES = 1000         # another process's time slice on a shared machine
CALLS = 20000          # Python-timed calls of Pinocchio and MuJoCo


@njit(cache=False)   # not cached: numba's stamp is this file's, not the kernels' it inlines
def _mechanism_batch(q, qd, p, mass, bias, n):
    for _ in range(n):
        dynamics.mechanism(q, qd, p, mass, bias)


@njit(cache=False)   # not cached: numba's stamp is this file's, not the kernels' it inlines
def _derivative_batch(p, jams, x, u, dx, work, n, mech):
    for _ in range(n):
        derivative(p, jams, 0.0, x, u, dx, work, mech)


@njit(cache=False)   # not cached: numba's stamp is this file's, not the kernels' it inlines
def _tick_batch(p, jams, x, u, h, work, stages, n, mech):
    t = 0.0
    for _ in range(n):
        step(p, jams, t, x, u, h, work, stages, METHOD_RK4, mech)
        t += h


@njit(cache=False)   # not cached: numba's stamp is this file's, not the kernels' it inlines
def _law_batch(pos, vel, cur, params, state, u, n):
    for _ in range(n):
        builtin_command(0.5, pos, vel, cur, params, state, u)


def _median_ns(run, n: int, times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter_ns()
        run(n)
        samples.append(time.perf_counter_ns() - started)
    return float(np.median(samples))


def batched(run) -> np.ndarray:
    """Per-call ns of BATCHES batches of ``run(n)`` (n calls in a compiled loop, n chosen
    so that a batch's calls take about BATCH_NS), less the batch's own cost: the median of
    ``run(0)``, numba's dispatch of the arguments (tens of us with a function pointer)."""
    overhead = _median_ns(run, 0, 200)
    size = max(1, int(BATCH_NS * 1000 / max(_median_ns(run, 1000, 5) - overhead, 1.0)))
    out = np.empty(BATCHES)
    gc.disable()
    try:
        for k in range(BATCHES):
            started = time.perf_counter_ns()
            run(size)
            out[k] = (time.perf_counter_ns() - started - overhead) / size
    finally:
        gc.enable()
    return out


def per_call(call) -> np.ndarray:
    """ns of each of CALLS Python calls of ``call()``."""
    for _ in range(100):
        call()
    out = np.empty(CALLS)
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for k in range(CALLS):
            started = clock()
            call()
            out[k] = clock() - started
    finally:
        gc.enable()
    return out


def line(name: str, ns: np.ndarray, note: str = "") -> None:
    print(f"{name:52s} median {np.median(ns):8.0f} ns   p99 {np.percentile(ns, 99):8.0f} ns"
          f"{'   ' + note if note else ''}")


ONE_JOINT = """<robot name="one"><link name="base"/>
<joint name="j" type="revolute"><parent link="base"/><child link="l"/><axis xyz="0 0 1"/>
<limit lower="-3" upper="3" effort="1" velocity="1"/></joint>
<link name="l"><inertial><origin xyz="0.1 0 0"/><mass value="1"/>
<inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link></robot>"""


def panda_without_fingers(folder: Path) -> Path:
    """The shipped Panda less its fingers (MuJoCo and Pinocchio would move them)."""
    text = open(parse.resolve("panda")).read()
    text = re.sub(r'<link name="panda_(left|right)finger">.*?</link>', "", text, flags=re.S)
    text = re.sub(r'<joint name="panda_finger_joint\d" .*?</joint>', "", text, flags=re.S)
    path = folder / "panda7.urdf"
    path.write_text(text)
    return path


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="bench-urdf-"))
    panda = panda_without_fingers(folder)
    one = folder / "one.urdf"
    one.write_text(ONE_JOINT)
    rng = np.random.default_rng(1)
    q, qd, tau = rng.uniform(-1, 1, 7), rng.uniform(-1, 1, 7), rng.uniform(-10, 10, 7)

    print("Panda, 7 joints, forward dynamics per call")
    plant = plant_from_config(resolve({"plant": {"model": "urdf", "urdf": str(panda),
                                                 "drive": "torque"}}))
    plant.set_state(q, qd)
    p = plant.params
    body = p[int(p[H_BODY]):]
    mass, bias = np.zeros((7, 7)), np.zeros(7)
    mech = for_plant(plant)
    dx = np.zeros(len(plant.x))
    line("hilrig mechanism (CRBA + RNEA + V), compiled loop",
         batched(lambda n: _mechanism_batch(q, qd, body, mass, bias, n)))
    ours = batched(lambda n: _derivative_batch(p, plant.jams, plant.x, tau, dx, plant.work, n,
                                               mech))
    line("hilrig forward dynamics (+ Cholesky), compiled loop", ours)

    try:
        import pinocchio as pin
    except ImportError:
        print("pinocchio: not installed (pip install .[bench])")
    else:
        model = pin.buildModelFromUrdf(str(panda))
        data = model.createData()
        small = pin.buildModelFromUrdf(str(one))
        small_data = small.createData()
        q1, v1, t1 = np.zeros(1), np.ones(1), np.ones(1)
        overhead = np.median(per_call(lambda: pin.aba(small, small_data, q1, v1, t1)))
        aba = per_call(lambda: pin.aba(model, data, q, qd, tau)) - overhead
        line("Pinocchio aba, Python call overhead subtracted", aba,
             f"(overhead {overhead:.0f} ns)")
        print(f"{'':52s} hilrig / Pinocchio: {np.median(ours) / np.median(aba):.2f}")

    try:
        import mujoco
    except ImportError:
        print("mujoco: not installed (pip install .[bench])")
    else:
        mj_model = mujoco.MjModel.from_xml_path(str(panda))
        mj_data = mujoco.MjData(mj_model)
        mj_data.qpos[:], mj_data.qvel[:], mj_data.qfrc_applied[:] = q, qd, tau
        mj_small = mujoco.MjModel.from_xml_path(str(one))
        small_data = mujoco.MjData(mj_small)
        overhead = np.median(per_call(lambda: mujoco.mj_forward(mj_small, small_data)))
        forward = per_call(lambda: mujoco.mj_forward(mj_model, mj_data)) - overhead
        line("MuJoCo mj_forward, one-joint call subtracted", forward,
             f"(one-joint call {overhead:.0f} ns)")
        print(f"{'':52s} hilrig / MuJoCo: {np.median(ours) / np.median(forward):.2f}")

        step = per_call(lambda: mujoco.mj_step(mj_model, mj_data))
        small_step = np.median(per_call(lambda: mujoco.mj_step(mj_small, small_data)))
        line("MuJoCo mj_step (RK4 off: Euler), one-joint call subtracted", step - small_step,
             f"(one-joint call {small_step:.0f} ns)")

    print("\npanda_pd: 7 joints, geared DC motors (simplified), RK4 at 1 ms")
    cfg = load("panda_pd")
    plant = plant_from_config(cfg)
    u = np.full(7, 0.5)
    line("one 1 ms tick (RK4: four derivatives), compiled loop",
         batched(lambda n: _tick_batch(plant.params, plant.jams, plant.x.copy(), u, 1e-3,
                                       plant.work, plant.stages, n, for_plant(plant))))
    controller = controller_from_config(cfg, "V")
    pos, vel, cur, command = plant.q.copy(), plant.qd.copy(), np.zeros(7), np.zeros(7)
    line("the feed-forward law (RNEA + PD), compiled loop",
         batched(lambda n: _law_batch(pos, vel, cur, controller.params, controller.state,
                                      command, n)))
    ten = cfg.replace(sim=dataclasses.replace(cfg.sim, duration=10.0))
    simulate(ten)                                   # compiled and warm
    cpu = time.thread_time()
    run = simulate(ten)
    cpu = time.thread_time() - cpu
    print(f"{'a 10 s scenario (hil sim path: rows, feed-forward)':52s} stepping "
          f"{run.stepping_seconds * 1e3:.0f} ms wall: {10.0 / run.stepping_seconds:.0f}x real "
          f"time; whole run {cpu * 1e3:.0f} ms of CPU: {10.0 / cpu:.0f}x per core")
    for payloads in (2, 8):
        campaign(folder, payloads)
    if "--no-run" not in sys.argv:
        paced(float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv
              else 10.0)
    return 0


CAMPAIGN = """
[campaign]
base = "panda_jam"
duration = 10.0
[[axis]]
key = "faults.jam.joint"
values = [2, 4, 6]
[[axis]]
key = "faults.jam.t1"
values = [0.4, 0.8, 1.2, 50.0]
[[axis]]
key = "plant.payload"
values = [{payloads}]
"""


def campaign(folder: Path, payloads: int) -> None:
    """12 x ``payloads`` Panda scenarios of 10 s (payloads of 0 to 3 kg) on one worker
    process (see the module docstring)."""
    from hilrig.campaign.runner import open_client, run_campaign
    from hilrig.campaign.spec import load_spec

    path = folder / f"panda10-{payloads}.toml"
    masses = np.linspace(0.0, 3.0, payloads)
    path.write_text(CAMPAIGN.format(payloads=", ".join(f"[{m:.6g}, 0.0, 0.0, 0.1]"
                                                        for m in masses)))
    spec = load_spec(str(path))
    client, cluster = open_client(workers=1)
    try:
        run_campaign(load_spec(str(path)), folder / f"warm-{payloads}", client,
                     batch=spec.count)
        before = sum(client.run(time.process_time).values())
        started = time.perf_counter()
        rows = run_campaign(spec, folder / f"out-{payloads}", client).table.to_pylist()
        wall = time.perf_counter() - started
        cpu = sum(client.run(time.process_time).values()) - before
    finally:
        client.close()
        cluster.close()
    simulated = sum(row["simulated_s"] for row in rows)
    stepping = sum(row["stepping_s"] for row in rows)
    print(f"\ncampaign: {len(rows)} Panda scenarios of 10 s on 1 worker: "
          f"{simulated / stepping:.0f}x real time in the compiled runs, "
          f"{simulated / wall:.0f}x per wall second of the whole campaign; "
          f"{simulated / cpu:.0f}x per CPU second of the worker (goal >= 300x per core)")


def paced(seconds: float) -> None:
    """`hil run` of panda_pd and of the 3-DOF arm (rig_inprocess) at 1 kHz, in a scratch
    folder: the overruns and compute_tick each reports."""
    import subprocess

    print(f"\nhil run at 1 kHz, {seconds:g} s each, one after the other")
    for name in ("panda_pd", "rig_inprocess"):
        with tempfile.TemporaryDirectory() as scratch:
            proc = subprocess.run([sys.executable, "-m", "hilrig.cli", "run", name,
                                   "--duration", str(seconds), "--no-plot"], cwd=scratch,
                                  capture_output=True, text=True, timeout=600)
        text = proc.stdout + proc.stderr
        found = [row.strip() for row in text.splitlines()
                 if row.strip().startswith(("ticks ", "compute_tick"))]
        print(f"{name:14s} " + ("; ".join(found) if found else f"failed: {text[-300:]}"))


if __name__ == "__main__":
    sys.exit(main())
