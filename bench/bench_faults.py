"""Per-tick plant cost with no fault and with three active, for two checkouts side by side.

    python bench/bench_faults.py --path base=/tmp/base-path --path this=/work/wt/X-path \
        [--plants serial3_free,ur5_pd,rrr3_pd] [--steps 20000] [--rounds 9] [--block 16] \
        [--workers 3] [--each]

Each ``--path`` is a PYTHONPATH under which ``import hilrig`` finds one checkout (default:
this process's PYTHONPATH, labelled ``this``); a checkout from before the fault table
(commit ddb5666: ``git archive ddb5666 | tar -x -C /tmp/base`` and a folder holding a
symlink ``hilrig -> /tmp/base``) runs its "none" case only. ``--workers`` worker
processes per checkout (this file with ``--worker``) each compile their loops once; then
round by round the checkouts' workers run in turn, so all see the same host. Several
workers: on the loaded development VM the same loop measured 143 ns a step in some
workers of a run and 174 ns in another (docs/FAULTS.md, Cost; the loop's code
placement moves it by as much), so the figures are medians over all workers.

What a tick does to its plant (rt.tick.tick and the loops around it), in one compiled loop
of ``--steps`` steps under a constant command: the fault table at the boundary
(plant.stepping.apply_schedule), the sensor passes while the table holds a fault
(plant.faults.hold_previous, sense, behind rt.tick's one check), the measurement and
the motor currents (plant.motor.currents), the call of the law with its limits
(rt.tick.control, the config's built-in law; its command is unused), the plant step
with the config's correction (plant.stepping.advance). The sensor passes run while the
table's summary asks for them (plant.faults.holding, sensing), where the checkout's tick
runs them: inside the law's call (a ``control`` that takes the fault table), else in
the tick before it; a checkout without that summary runs ``sense`` at every tick of a
table with faults, as its tick did, and the checkouts of two earlier experiments
(commits 8fbcedb and 0ed1ce7: constant sensor offsets added from the jams without a
pass over the rows, ``plant.faults.sense_measurement``, inlined or in a called kernel,
``sense_faulty``; docs/FAULTS.md, Cost) run theirs. A checkout from before the fault
table runs the plant's part alone.
Tables: none (no rows), spare rows (a real-time run's table without faults: 64 spare
rows, hil run's), three active (effectiveness 0.7 on joint 1, viscous friction 0.5 N m
s/rad on joint 2, a 0.01 rad bias on joint 1's position; chains only: a 3RRR takes no
actuator fault), three, drift (the same with a drift of 0.01 rad/s for the bias, which
the experiments' offsets do not serve). The clock is read every ``--block`` steps.

Printed per plant, checkout and table: the median over rounds and workers of each run's
median and p99 of the blocks' ns per step, and of its mean ns per step, with the change
of the median against the first checkout's "none"; then each table's change against
its own checkout's "none" measured just before by the same worker (the pairs' median and
quartiles: the fault cost without the spread of code placements between workers and of
the host's load between rounds); with ``--each``, each worker's median.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.limits import config_limits
from hilrig.drivers.registry import command_unit
from hilrig.plant.factory import correction_id, plant_from_config
from hilrig.plant.family import for_plant
from hilrig.plant.model import METHODS
from hilrig.plant.motor import currents
from hilrig.plant.stepping import advance, apply_schedule
from hilrig.settings.config import load
from hilrig.timing.clock import now_ns, timespec
from numba import njit

try:        # a checkout with the fault table
    from hilrig.plant.faults import (
        FAULT_COLUMNS,
        LIVE_ROWS,
        fault_row,
        hold_previous,
        holds_faults,
        sense,
    )
except ImportError:     # the base: a jam schedule of 4 columns, no sensor faults
    FAULT_COLUMNS = None
try:        # a checkout whose table has a summary (rt.tick asks it before each pass)
    from hilrig.plant.faults import holding, sensing
except ImportError:
    holding = sensing = None
try:        # the experiment of commit 8fbcedb: constant sensor offsets without a pass
    from hilrig.plant.faults import sense_measurement
except ImportError:
    sense_measurement = None
try:        # ... and of 0ed1ce7: the same in a called kernel
    from hilrig.plant.faults import sense_faulty as sense_measurement  # noqa: F811
except ImportError:
    pass

try:        # a checkout whose tick calls the law in a kernel of its own
    from hilrig.rt.tick import control
except ImportError:
    control = None
# ... and whose ``control`` runs the sensor pass before the law (it takes the fault table)
SENSES_IN_CONTROL = control is not None and \
    "faults" in inspect.signature(control.py_func).parameters

CHAINS = ("serial3_free", "ur5_pd")     # the plants that take actuator faults

# hilrig's kernel options, not cached: numba's own cache of a file outside hilrig's
# packages would not see an edit of the plant code it inlines (jit.compilation)
kernel = njit(nogil=True, error_model="numpy", _nrt=False)

if FAULT_COLUMNS is not None and holding is None:     # a table without a summary
    @njit(inline="always")
    def holding(table):
        return True

    @njit(inline="always")
    def sensing(table):
        return True

if FAULT_COLUMNS is not None and sense_measurement is None:     # sense for every kind
    @njit(inline="always")
    def sense_measurement(table, jams, t, k, meas, nact):
        if sensing(table):
            sense(table, t, k, meas, nact)

if SENSES_IN_CONTROL:     # the sensor pass inside the law's call
    @njit(inline="always")
    def sensed_control(table, jams, t, k, meas, nact, faulty, h, law):
        """The sensor pass and the law with its limits, as rt.tick.tick calls them."""
        ctl, out, held = law
        control(None, t, meas[1:1 + nact], meas[1 + nact:1 + 2 * nact],
                meas[1 + 2 * nact:1 + 3 * nact], ctl[0], ctl[1], out, ctl[2], h, out, held,
                table, k, meas, faulty)
elif FAULT_COLUMNS is not None:     # the sensor pass in the tick, then the law's call
    @njit(inline="always")
    def sensed_control(table, jams, t, k, meas, nact, faulty, h, law):
        """The sensor pass and the law with its limits, as rt.tick.tick calls them."""
        if faulty:
            sense_measurement(table, jams, t, k, meas, nact)
        ctl, out, held = law
        control(None, t, meas[1:1 + nact], meas[1 + nact:1 + 2 * nact],
                meas[1 + 2 * nact:1 + 3 * nact], ctl[0], ctl[1], out, ctl[2], h, out, held)

if FAULT_COLUMNS is not None:
    @kernel
    def steps(p, jams, x, u, work, stages, table, meas, h, n, method, correction, mech,
              block, ts, out, law):
        """n ticks' worth of plant work from t = 0, ns per step of each block of ``block``
        steps into ``out``; False on an invalid state. ``law``: the law's params, state
        and limits, and scratch for its command and held command, for the call of the
        built-in law the tick makes (rt.tick.control; the plant steps under ``u``)."""
        nact = u.shape[0]
        nq = x.shape[0] // 2
        cur = meas[1 + 2 * nact:]
        start = now_ns(ts)
        for k in range(n):
            t = k * h
            apply_schedule(p, jams, table, t, x, 1e-9 * h)
            faulty = holds_faults(table)                                 # as rt.tick.tick
            if faulty and holding(table):
                hold_previous(table, meas, nact)
            for j in range(nact):
                meas[1 + j] = x[j]
                meas[1 + nact + j] = x[nq + j]
            if faulty:
                currents(p, x, u, cur, jams)
            else:
                currents(p, x, u, cur)
            sensed_control(table, jams, t, k, meas, nact, faulty, h, law)
            if not advance(p, jams, t, x, u, h, method, correction, work, stages, mech):
                return False
            if (k + 1) % block == 0:
                now = now_ns(ts)
                out[k // block] = (now - start) / block
                start = now
        return True

    def tables(plant: str) -> dict:
        """The fault tables of the module docstring, by label."""
        out = {"none": np.zeros((0, FAULT_COLUMNS)),
               "spare rows": np.zeros((LIVE_ROWS, FAULT_COLUMNS))}
        if plant in CHAINS:
            out["three active"] = np.array([
                fault_row("effectiveness", 0, 0.0, np.inf, {"factor": 0.7}),
                fault_row("friction", 1, 0.0, np.inf, {"viscous": 0.5}),
                fault_row("sensor_bias", 0, 0.0, np.inf, {"bias": 0.01})])
            out["three, drift"] = out["three active"].copy()
            out["three, drift"][2] = fault_row("sensor_drift", 0, 0.0, np.inf, {"rate": 0.01})
        return out
else:
    @kernel
    def steps(p, jams, x, u, work, stages, table, meas, h, n, method, correction, mech,
              block, ts, out, law):
        """The base's tick around its plant (no sensor faults, currents without jams, no
        law)."""
        nact = u.shape[0]
        nq = x.shape[0] // 2
        cur = meas[1 + 2 * nact:]
        start = now_ns(ts)
        for k in range(n):
            t = k * h
            apply_schedule(p, jams, table, t, x, 1e-9 * h)
            for j in range(nact):
                meas[1 + j] = x[j]
                meas[1 + nact + j] = x[nq + j]
            currents(p, x, u, cur)
            if not advance(p, jams, t, x, u, h, method, correction, work, stages, mech):
                return False
            if (k + 1) % block == 0:
                now = now_ns(ts)
                out[k // block] = (now - start) / block
                start = now
        return True

    def tables(plant: str) -> dict:
        return {"none": np.zeros((0, 4))}


def worker() -> None:
    """Serve requests on stdin, one JSON line each ({"plant", "table", "steps", "block"}
    or {"plant"} for the list of tables), one JSON line of answer each."""
    plants: dict = {}
    for line in sys.stdin:
        request = json.loads(line)
        name = request["plant"]
        if name not in plants:
            cfg = load(name, [])
            plant = plant_from_config(cfg)
            method = METHODS[cfg.sim.integrator]
            unit = command_unit(cfg.link.type, cfg.plant.drive)
            c = controller_from_config(cfg, unit)
            assert c.builtin, f"{name}: the bench calls the built-in law"
            law = (c.params, c.state, config_limits(cfg, plant.nact, unit))
            plants[name] = (cfg, plant, method, for_plant(plant, method), correction_id(cfg),
                            law)
        cfg, base, method, mech, correction, law = plants[name]
        if "table" not in request:
            print(json.dumps(list(tables(name))), flush=True)
            continue
        n, block = request["steps"], request["block"]
        plant = base.copy()
        table = tables(name)[request["table"]]
        meas = np.zeros(1 + 3 * plant.nact)
        out = np.zeros(n // block)
        ok = steps(plant.params, plant.jams, plant.x, np.full(plant.nact, 0.5), plant.work,
                   plant.stages, table, meas, cfg.sim.dt, n, method, correction, mech, block,
                   timespec(), out, (law, np.zeros(plant.nact), np.zeros(plant.nact)))
        print(json.dumps({"ok": bool(ok), "median": float(np.median(out)),
                          "p99": float(np.percentile(out, 99)), "mean": float(out.mean())}),
              flush=True)


class Worker:
    """A worker process under one PYTHONPATH; its stderr (compile lines) into a file."""

    def __init__(self, pythonpath: str, log) -> None:
        env = dict(os.environ, PYTHONPATH=pythonpath)
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, text=True)

    def ask(self, request: dict):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker ended on {request} (see its log)")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", action="append", help="LABEL=PYTHONPATH")
    parser.add_argument("--plants", default="serial3_free,ur5_pd,rrr3_pd")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--workers", type=int, default=3,
                        help="worker processes per checkout (code placements)")
    parser.add_argument("--each", action="store_true",
                        help="also print each worker's median (its code placement)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    paths = [p.split("=", 1) for p in (args.path or [f"this={os.environ['PYTHONPATH']}"])]
    plants = args.plants.split(",")
    results: dict = {}
    with tempfile.TemporaryFile("w+") as log:
        workers = [(label, Worker(path, log)) for n in range(args.workers)
                   for label, path in paths]
        try:
            kinds = {(plant, label): w.ask({"plant": plant})
                     for plant in plants for label, w in workers}
            for r in range(args.rounds + 1):          # round 0 compiles and warms up
                for plant in plants:
                    for label, w in workers:
                        for table in kinds[plant, label]:
                            answer = w.ask({"plant": plant, "table": table,
                                            "steps": args.steps, "block": args.block})
                            assert answer["ok"], (plant, label, table)
                            if r:
                                answer["worker"] = id(w)
                                results.setdefault((plant, label, table), []).append(answer)
                print(f"round {r}/{args.rounds} done", file=sys.stderr)
        except Exception:
            log.seek(0)
            sys.stderr.write(log.read()[-4000:])
            raise
        finally:
            for _, w in workers:
                w.close()
    print(f"ns per plant step: median over {args.rounds} rounds x {args.workers} workers of "
          f"each run's median, p99 and mean over blocks of {args.block} steps; load average "
          f"{os.getloadavg()[1]:.1f} (5 min)")
    first = paths[0][0]
    for plant in plants:
        ref = statistics.median(a["median"] for a in results[plant, first, "none"])
        for (name, label, table), answers in results.items():
            if name != plant:
                continue
            med = statistics.median(a["median"] for a in answers)
            p99 = statistics.median(a["p99"] for a in answers)
            mean = statistics.median(a["mean"] for a in answers)
            print(f"  {plant:<13} {label:<6} {table:<13} median {med:7.1f}  p99 {p99:7.1f}  "
                  f"mean {mean:7.1f}  ({100 * (med / ref - 1):+5.1f} % vs {first} none)")
        for (name, label, table), answers in results.items():
            if name != plant or table == "none":
                continue
            own = results[plant, label, "none"]
            change = sorted(100 * (a["median"] / b["median"] - 1) for a, b in zip(answers, own))
            q1, q2, q3 = statistics.quantiles(change, n=4)
            print(f"  {plant:<13} {label:<6} {table:<13} paired with its own none: "
                  f"{q2:+5.1f} % (quartiles {q1:+5.1f}, {q3:+5.1f}; {len(change)} pairs)")
        if args.each:
            for (name, label, table), answers in results.items():
                if name == plant:
                    each = {}
                    for a in answers:
                        each.setdefault(a["worker"], []).append(a["median"])
                    print(f"  {plant:<13} {label:<6} {table:<13} by worker: " + " ".join(
                        f"{statistics.median(m):7.1f}" for m in each.values()))


if __name__ == "__main__":
    main()
