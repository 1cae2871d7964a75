"""Real-time benchmarks (issue: real-time loop and emulator). Prints medians and tails.

    python bench/bench_rt.py [--duration 60] [--only inproc,rate5k,zmq,fast]

- inproc: in-process 1 kHz loop, 3RRR with PD, for --duration s, three ways:
  SCHED_FIFO on CPU 1; SCHED_FIFO with a CPU-bound process on the other core;
  normal scheduling (SCHED_OTHER). Lateness, whole-tick compute time, overruns,
  and what the loop did after the worst stalls (the overrun policy at work),
  next to the steal time and the machine's floor (bench/machine_floor.py: the
  same wait and scheduling with an empty tick), run in interleaved 10 s chunks so
  that loop and floor see the same host.
- rate5k: the 3-DOF arm at 5 kHz (SCHED_FIFO).
- zmq: controller <-> emulator round trip (lockstep COMMAND -> step -> STATE) over
  ipc and tcp loopback, lockstep throughput (steps per second), and the floor:
  a bare pyzmq ping-pong with the same frames and pacing (bench/zmq_floor.py).
- fast: in-process --fast (lockstep, compiled) in multiples of real time.
SCHED_FIFO needs root or CAP_SYS_NICE; the summary says what was in force.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from hilrig.drivers.zmq_link import ZmqLink  # noqa: E402
from hilrig.settings.config import load  # noqa: E402
from hilrig.rt.loop import LinkLoop  # noqa: E402
from hilrig.rt.session import Session  # noqa: E402
from hilrig.timing.summary import format_summary, summarize  # noqa: E402

from bench.machine_floor import floor_run, steal_ms  # noqa: E402
from bench.zmq_floor import round_trips  # noqa: E402

FIFO = ["loop.fifo_priority=80", "loop.cpu=1"]


def _burn(stop) -> None:
    os.sched_setaffinity(0, {0})
    x = 0
    while not stop.is_set():
        x += 1


def _stalls(events: list, n: int = 5) -> str:
    overruns = sorted((e for e in events if e["kind"] == "overrun"),
                      key=lambda e: -e["missed"])[:n]
    return "; ".join(f"t={e['t']:.3f}s missed {e['missed']} (woke {e['lateness'] * 1e6:.0f} µs "
                     f"late)" for e in overruns) or "none"


def inproc(config: str, sets: list, label: str, duration: float, hog: bool = False,
           chunk: float = 10.0) -> None:
    """The loop for ``duration`` s in chunks of ``chunk`` s, each after a chunk of the
    machine's floor (the empty loop, same wait and scheduling), so that both see
    the same host; statistics over all chunks."""
    chunks = max(1, int(round(duration / chunk)))
    cfg = load(ROOT / "configs" / f"{config}.toml",
               [f"sim.duration={duration / chunks}"] + sets)
    loop, h = cfg.loop, cfg.sim.dt
    stop = multiprocessing.Event()
    burner = multiprocessing.Process(target=_burn, args=(stop,)) if hog else None
    if burner:
        burner.start()
    runs, floors, events = [], [], []
    steal = {"loop": 0.0, "floor": 0.0}
    try:
        for c in range(chunks):
            timings, overruns, stolen = floor_run(duration / chunks, h, loop.spin, loop.cpu,
                                                  loop.fifo_priority)
            floors.append((timings, overruns))
            steal["floor"] += stolen
            with tempfile.TemporaryDirectory() as tmp:
                session = Session(cfg, Path(tmp) / "run.mcap")
                before = steal_ms(loop.cpu)
                result = session.run()
                steal["loop"] += steal_ms(loop.cpu) - before
            runs.append((session.timings[:result.ticks], result.summary["overruns"]))
            events += [{**e, "t": e["t"] + c * duration / chunks} for e in result.events]
    finally:
        if burner:
            stop.set()
            burner.join()
    summary = summarize(np.concatenate([t for t, _ in runs]), sum(o for _, o in runs),
                        result.summary["scheduling"])
    floor = summarize(np.concatenate([t for t, _ in floors]), sum(o for _, o in floors))
    print(f"\n== {label} ({1 / h:g} Hz, {duration:g} s in {chunks} chunks, policy "
          f"{loop.overrun}, correction {result.summary['correction']}, rehearse "
          f"{loop.rehearse * 1e6:g} µs)")
    print(format_summary(summary))
    print(f"  worst stalls: {_stalls(events)}")
    late = floor["lateness_us"]
    print(f"  steal time of the loop's CPU(s): {steal['loop']:.0f} ms during the loop, "
          f"{steal['floor']:.0f} ms during the floor")
    print(f"  machine floor (empty loop, same wait and scheduling, interleaved): lateness "
          f"p99 {late['p99']:.2f} µs, p99.9 {late['p99.9']:.2f}, max {late['max']:.0f}; "
          f"overruns {floor['overruns']} ({floor['overruns_per_1000']:.2f} per 1000)")


def zmq_round_trip(transport: str, duration: float) -> None:
    endpoint = (f"ipc://{tempfile.gettempdir()}/hil-bench-{os.getpid()}" if transport == "ipc"
                else "tcp://127.0.0.1:5591")
    sets = [f"sim.duration={duration}", "link.timeout=5.0"]
    emu = subprocess.Popen([sys.executable, "-m", "hilrig.cli", "emulate",
                            str(ROOT / "configs" / "rrr3_pd.toml"), "--bind", endpoint,
                            "--mode", "lockstep", *sum((["--set", s] for s in sets), [])],
                           cwd=ROOT, stdout=subprocess.PIPE, text=True)
    emu.stdout.readline()
    cfg = load(ROOT / "configs" / "rrr3_pd.toml", sets + [f"link.endpoint='{endpoint}'"])
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = LinkLoop(cfg, ZmqLink.from_config(cfg), Path(tmp) / "c.mcap").run()
        elapsed = time.perf_counter() - started
    emu.terminate()
    emu.wait()
    read = result.summary["compute_read_us"]
    tick = result.summary["compute_tick_us"]
    print(f"\n== ZeroMQ lockstep over {transport}: {result.ticks} steps")
    print(f"  round trip (COMMAND -> step -> STATE, read phase): median {read['median']:.1f} µs, "
          f"p99 {read['p99']:.1f}, p99.9 {read['p99.9']:.1f}, max {read['max']:.1f}")
    print(f"  whole controller tick: median {tick['median']:.1f} µs, p99 {tick['p99']:.1f}")
    print(f"  lockstep throughput: {result.ticks / elapsed:.0f} steps/s (incl. start-up)")
    floor = round_trips(endpoint + "-floor" if transport == "ipc" else "tcp://127.0.0.1:5592",
                        int(min(duration, 10.0) * 1000))
    print(f"  machine floor (bare pyzmq ping-pong, same frames and pacing): median "
          f"{np.median(floor):.1f} µs, p99 {np.percentile(floor, 99):.1f}, "
          f"p99.9 {np.percentile(floor, 99.9):.1f}")


def fast(duration: float) -> None:
    for config in ("rrr3_pd", "serial3_jam2"):
        cfg = load(ROOT / "configs" / f"{config}.toml", [f"sim.duration={duration}"])
        with tempfile.TemporaryDirectory() as tmp:
            session = Session(cfg, Path(tmp) / "f.mcap", fast=True)
            started = time.perf_counter()
            result = session.run()
            elapsed = time.perf_counter() - started
        tick = result.summary["compute_tick_us"]
        print(f"\n== --fast {config}: {duration:g} s in {elapsed:.2f} s = "
              f"{duration / elapsed:.0f}x real time (incl. warm-up and log); tick median "
              f"{tick['median']:.2f} µs, p99 {tick['p99']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--only", default="inproc,rate5k,zmq,fast")
    args = parser.parse_args()
    only = args.only.split(",")
    if "inproc" in only:
        inproc("rrr3_pd", FIFO, "3RRR PD, SCHED_FIFO", args.duration)
        inproc("rrr3_pd", FIFO + ["loop.rehearse=0"], "3RRR PD, SCHED_FIFO, no rehearsal",
               args.duration)
        inproc("rrr3_pd", FIFO, "3RRR PD, SCHED_FIFO, CPU hog on the other core", args.duration,
               hog=True)
        inproc("rrr3_pd", ["loop.fifo_priority=0"], "3RRR PD, SCHED_OTHER (no FIFO, no pinning)",
               args.duration)
    if "rate5k" in only:
        inproc("serial3_free", FIFO + ["sim.dt=0.0002"], "3-DOF arm at 5 kHz, SCHED_FIFO",
               args.duration)
    if "zmq" in only:
        zmq_round_trip("ipc", min(args.duration, 20.0))
        zmq_round_trip("tcp", min(args.duration, 20.0))
    if "fast" in only:
        fast(60.0)


if __name__ == "__main__":
    main()
