"""Telemetry costs: writer throughput, file size, and what the writer thread does to a loop.

    python bench/bench_telemetry.py [--seconds 3] [--blocks 4]

1. Throughput: rows of the 3RRR layout (rt.telemetry.run_groups) drained and written
   per second of writer time, per chunk compression; file size per minute of run
   at 1 kHz and 5 kHz. The rows are a real 3RRR PD run (``hil sim``), so the
   compression ratios are those of smooth trajectories, not of noise.
2. GIL impact: a Python thread that sleeps until 200 us before each 1 ms deadline,
   spins on perf_counter_ns until it, records its lateness and writes 1 (1 kHz) or 5
   (5 kHz equivalent) rows into the ring; with and without the writer thread,
   alternating in blocks so that load from other processes hits both alike.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcap.writer import CompressionType  # noqa: E402

import rt.telemetry as telemetry  # noqa: E402
from rt.config import load  # noqa: E402
from rt.sim import simulate  # noqa: E402
from rt.telemetry import Telemetry, run_groups  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PERIOD_NS = 1_000_000
SPIN_NS = 200_000


def rows_of_a_run(dt: float, seconds: float) -> tuple[np.ndarray, dict]:
    """(rows, cfg): a 3RRR PD run at step dt in the run_groups layout, timing columns filled."""
    cfg = load(ROOT / "configs" / "rrr3_pd.toml", [f"sim.dt={dt}", f"sim.duration={seconds}"])
    arrays = simulate(cfg).arrays
    n = len(arrays["t"])
    rng = np.random.default_rng(0)
    timing = {"tick": np.arange(n, dtype=float), "lateness": rng.gamma(2.0, 5e-6, n),
              "compute_read": rng.gamma(4.0, 1e-6, n), "compute_control": rng.gamma(4.0, 1e-6, n),
              "compute_write": rng.gamma(4.0, 2e-6, n)}
    timing["compute_tick"] = timing["compute_read"] + timing["compute_control"] \
        + timing["compute_write"]
    groups = run_groups("rrr3", 6, 3, cfg["plant"]["drive"])
    rows = np.column_stack([{**arrays, **timing}[name].reshape(n, -1) for name, _ in groups])
    return rows, cfg


def throughput(rows: np.ndarray, cfg: dict, folder: Path) -> None:
    groups = run_groups("rrr3", 6, 3, cfg["plant"]["drive"])
    seconds = rows[-1, 0]
    rate = (len(rows) - 1) / seconds
    print(f"\n{len(rows)} rows ({seconds:g} s at {rate:.0f} Hz), {8 * rows.shape[1]} bytes each")
    print("compression | writer rows/s | writer CPU at 1 kHz | at 5 kHz | MB per minute at "
          f"{rate:.0f} Hz")
    for compression in (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD):
        telemetry.COMPRESSION = compression
        path = folder / f"throughput_{compression.name}.mcap"
        tel = Telemetry(path, groups, cfg, capacity=len(rows), period=3600.0)
        tel.ring[:] = rows
        tel.head[0] = len(rows)
        started = time.thread_time()
        tel.close()  # drains every row in this thread: all of the writer's work, timed
        cpu = time.thread_time() - started
        per_second = len(rows) / cpu
        mb_min = path.stat().st_size / 1e6 / seconds * 60
        print(f"{compression.name:11} | {per_second:13,.0f} | {100 * 1000 / per_second:17.1f} % "
              f"| {100 * 5000 / per_second:6.1f} % | {mb_min:.1f}")
    telemetry.COMPRESSION = CompressionType.ZSTD


def spin_block(seconds: float, ring: np.ndarray, head: np.ndarray, rows_per_tick: int,
               out: list) -> None:
    """The loop: sleep, spin to each deadline, record lateness (ns), write rows.

    A deadline missed by more than a period is skipped (as the loop's "skip" policy
    does), so one stall counts once instead of delaying every later tick.
    """
    cap = ring.shape[0]
    n = int(seconds * 1e9 / PERIOD_NS)
    deadline = time.perf_counter_ns() + PERIOD_NS
    for k in range(n):
        wait = deadline - SPIN_NS - time.perf_counter_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        while time.perf_counter_ns() < deadline:
            pass
        out.append(time.perf_counter_ns() - deadline)
        for _ in range(rows_per_tick):
            row = ring[head[0] % cap]
            row[0] = head[0] * 1e-3 / rows_per_tick
            head[0] += 1
        deadline += PERIOD_NS
        while deadline < time.perf_counter_ns():
            deadline += PERIOD_NS


def gil_impact(cfg: dict, folder: Path, seconds: float, blocks: int, rows_per_tick: int,
               label: str) -> dict:
    groups = run_groups("rrr3", 6, 3, cfg["plant"]["drive"])
    width = sum(w[0] if isinstance(w, tuple) else w for _, w in groups)
    lateness = {"without writer": [], "with writer": []}
    for block in range(blocks):
        for name in lateness:
            if name == "with writer":
                tel = Telemetry(folder / f"gil_{label}.mcap", groups, cfg)
                ring, head = tel.ring, tel.head
            else:
                tel, ring, head = None, np.zeros((1 << 16, width)), np.zeros(1, np.int64)
            thread = threading.Thread(target=spin_block,
                                      args=(seconds, ring, head, rows_per_tick, lateness[name]))
            thread.start()
            thread.join()
            if tel is not None:
                tel.close()
    print(f"\n{label}: loop at 1 kHz writing {rows_per_tick} row(s) per tick, "
          f"{blocks} x {seconds:g} s per case (load average {os.getloadavg()[0]:.2f})")
    print("case           | median us | p99 us | p99.9 us | max us | ticks > 50 us")
    for name, values in lateness.items():
        v = np.array(values) / 1e3
        print(f"{name:14} | {np.median(v):9.1f} | {np.percentile(v, 99):6.1f} | "
              f"{np.percentile(v, 99.9):8.1f} | {v.max():6.0f} | {np.mean(v > 50):.2%}")
    return lateness


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one block, s")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per case")
    parser.add_argument("--switchinterval", type=float,
                        help="sys.setswitchinterval for the GIL runs, s (default: Python's 5 ms)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for dt in (1e-3, 2e-4):
            rows, cfg = rows_of_a_run(dt, 10.0)
            throughput(rows, cfg, folder)
        if args.switchinterval:
            sys.setswitchinterval(args.switchinterval)
        print(f"\nGIL switch interval {sys.getswitchinterval() * 1e6:.0f} us, "
              f"writer batch {telemetry.BATCH_ROWS} rows")
        for rows_per_tick, label in ((1, "1 kHz"), (5, "5 kHz equivalent")):
            gil_impact(cfg, folder, args.seconds, args.blocks, rows_per_tick, label)


if __name__ == "__main__":
    main()
