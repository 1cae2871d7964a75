"""Telemetry costs: writer throughput, file size, and what the writer thread does to a loop.

    python bench/bench_telemetry.py [--seconds 1] [--blocks 10] [--fifo 50]

1. Throughput: rows of the 3RRR layout (telemetry.recorder.run_groups) written per second
   of writer CPU time, per chunk compression; file size per minute of run at 1 kHz
   and 5 kHz. The rows are a real 3RRR PD run (``hil sim``), so the compression
   ratios are those of smooth trajectories, not of noise.
2. GIL impact: a Python thread (the loop) sleeps until 200 us before each 1 ms
   deadline (in C, without the GIL, returning its wake-up time), spins on the clock
   until the deadline, records its lateness and its wait for the GIL after waking,
   and writes 1 (1 kHz) or 5 (5 kHz equivalent) rows into the ring. Cases: no writer; the
   telemetry writer; and, for comparison, a writer thread that appends the rows with
   the mcap package's Writer one message at a time (the first design, replaced
   because of what it does here). Blocks of the cases alternate so that load from
   other processes hits all alike. ``--fifo P`` runs the loop thread under
   SCHED_FIFO priority P (as loop.fifo_priority does), which takes the other
   processes of a shared machine out of the picture.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from mcap.writer import Writer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hilrig.settings.config import load  # noqa: E402
from hilrig.plant.builtin_models import RRR3  # noqa: E402
from hilrig.rt.sim import simulate  # noqa: E402
from hilrig.schema import Config  # noqa: E402
from hilrig.telemetry import recorder as telemetry  # noqa: E402
from hilrig.telemetry.mcap_writer import McapWriter  # noqa: E402
from hilrig.telemetry.recorder import Telemetry, run_groups, schema_text  # noqa: E402

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
    groups = run_groups(RRR3.diagnostics, 6, 3, cfg.plant.drive)
    rows = np.column_stack([{**arrays, **timing}[name].reshape(n, -1) for name, _ in groups])
    return rows, cfg


def throughput(rows: np.ndarray, cfg: Config, folder: Path) -> None:
    groups = run_groups(RRR3.diagnostics, 6, 3, cfg.plant.drive)
    seconds = rows[-1, 0]
    rate = (len(rows) - 1) / seconds
    print(f"\n{len(rows)} rows ({seconds:g} s at {rate:.0f} Hz), {8 * rows.shape[1]} bytes each")
    print(f"compression | writer rows/s | writer CPU at 1 kHz | at 5 kHz | MB/min at {rate:.0f} Hz")
    for compression in ("", "lz4", "zstd"):
        telemetry.COMPRESSION = compression
        path = folder / f"throughput_{compression}.mcap"
        tel = Telemetry(path, groups, cfg.to_dict(), capacity=len(rows), period=3600.0)
        tel.ring[:] = rows
        tel.head[0] = len(rows)
        started = time.thread_time()
        tel.close()  # copies, chunks and writes every row in this thread: all the writer's work
        per_second = len(rows) / (time.thread_time() - started)
        mb_min = path.stat().st_size / 1e6 / seconds * 60
        print(f"{compression or 'none':11} | {per_second:13,.0f} | {100 * 1000 / per_second:17.2f} %"
              f" | {100 * 5000 / per_second:6.2f} % | {mb_min:.1f}")
    telemetry.COMPRESSION = "zstd"
    started = time.thread_time()
    with open(folder / "per_message.mcap", "wb") as stream:  # the first design, for comparison
        writer = Writer(stream)
        writer.start()
        channel = writer.register_channel("/hil/tick", "ros1", 0)
        for row in rows:
            writer.add_message(channel, int(row[0] * 1e9), row.tobytes(), int(row[0] * 1e9))
        writer.finish()
    per_second = len(rows) / (time.thread_time() - started)
    print(f"zstd, mcap.Writer per message | {per_second:13,.0f} | "
          f"{100 * 1000 / per_second:.2f} % | {100 * 5000 / per_second:.2f} %")


class PerMessageWriter:
    """The first design: every 25 ms, rows appended one add_message call each with
    the mcap package's Writer, a chunk finished every 0.5 s (zstd)."""

    def __init__(self, path: Path, groups, width: int):
        self.ring = np.zeros((1 << 16, width))
        self.head = np.zeros(1, np.int64)
        self._stream = open(path, "wb")
        self._writer = Writer(self._stream, chunk_size=1 << 30)
        self._writer.start()
        schema = self._writer.register_schema("hilrig/Tick", "ros1msg",
                                              schema_text(groups).encode())
        self._channel = self._writer.register_channel("/hil/tick", "ros1", schema)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        copied, next_chunk = 0, time.monotonic() + telemetry.CHUNK_PERIOD
        while not self._stop.wait(0.025):
            end = int(self.head[0])
            rows = self.ring[np.arange(copied, end) % len(self.ring)]
            for row in rows:
                stamp = int(row[0] * 1e9)
                self._writer.add_message(self._channel, stamp, row.tobytes(), stamp)
            copied = end
            if time.monotonic() >= next_chunk:
                self._writer.flush()
                next_chunk = time.monotonic() + telemetry.CHUNK_PERIOD

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._writer.finish()
        self._stream.close()


def longest_steps(rows: np.ndarray, folder: Path, repeat: int = 20) -> None:
    """CPU time of the writer's longest uninterrupted steps (median of ``repeat``), which
    bound how long it can keep the GIL from a loop when the switch interval does not
    cut in (5 ms by default). Compression, CRC and file writes release the GIL."""
    print("\nwriter step                                                   | CPU ms")
    n = telemetry.CHUNK_ROWS
    stamps = np.rint(rows[:n, 0] * 1e9).astype(np.int64)
    for compression in ("", "zstd"):
        times = []
        with open(folder / "step.mcap", "wb") as stream:
            writer = McapWriter(stream, compression)
            for _ in range(repeat):
                started = time.thread_time()
                writer.add_chunk(1, stamps, rows[:n], np.arange(n))
                times.append(time.thread_time() - started)
        print(f"telemetry: one chunk of {n} rows, compression {compression or 'none':4}"
              f"              | {np.median(times) * 1e3:.2f}")
    for label, count, flush in (("one wake-up at 5 kHz, 125 rows", 125, False),
                                ("0.5 s chunk at 5 kHz, 2500 rows", 2500, True)):
        times = []
        for _ in range(repeat):
            with open(folder / "step_per_message.mcap", "wb") as stream:
                writer = Writer(stream, chunk_size=1 << 30)
                writer.start()
                channel = writer.register_channel("/hil/tick", "ros1", 0)
                started = time.thread_time()
                for row in rows[:count]:
                    writer.add_message(channel, int(row[0] * 1e9), row.tobytes(), 0)
                if flush:
                    started = time.thread_time()
                    writer.flush()
                times.append(time.thread_time() - started)
        print(f"mcap.Writer per message: {label:36} | {np.median(times) * 1e3:.2f}")


SLEEP_UNTIL_C = """
#include <time.h>
long long sleep_until(long long deadline_ns) {  /* returns the wake-up time, ns */
    struct timespec ts = {deadline_ns / 1000000000LL, deadline_ns % 1000000000LL};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
"""


def sleep_until(folder: Path):
    """A C sleep_until(deadline ns) -> wake-up ns, called without the GIL (ctypes drops it):
    the time from its return to the next Python statement is the wait for the GIL."""
    source, library = folder / "sleep_until.c", folder / "sleep_until.so"
    source.write_text(SLEEP_UNTIL_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    function = ctypes.CDLL(str(library)).sleep_until
    function.argtypes, function.restype = [ctypes.c_longlong], ctypes.c_longlong
    return function


def spin_block(sleep, seconds: float, ring: np.ndarray, head: np.ndarray, rows_per_tick: int,
               out: list, fifo: int) -> None:
    """The loop: sleep (no GIL), spin to each deadline, write rows; append per tick
    (lateness, wait for the GIL after waking), ns.

    A deadline missed by more than a period is skipped (as the loop's "skip" policy
    does), so one stall counts once instead of delaying every later tick.
    """
    if fifo:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo))
    cap = ring.shape[0]
    n = int(seconds * 1e9 / PERIOD_NS)
    deadline = time.monotonic_ns() + PERIOD_NS
    for _ in range(n):
        woke = sleep(deadline - SPIN_NS)
        gil_wait = time.monotonic_ns() - woke
        while time.monotonic_ns() < deadline:
            pass
        out.append((time.monotonic_ns() - deadline, gil_wait))
        for _ in range(rows_per_tick):
            row = ring[head[0] % cap]
            row[0] = head[0] * 1e-3 / rows_per_tick
            head[0] += 1
        deadline += PERIOD_NS
        while deadline < time.monotonic_ns():
            deadline += PERIOD_NS


def gil_impact(sleep, cfg: Config, folder: Path, seconds: float, blocks: int,
               rows_per_tick: int, fifo: int) -> None:
    groups = run_groups(RRR3.diagnostics, 6, 3, cfg.plant.drive)
    width = sum(w[0] if isinstance(w, tuple) else w for _, w in groups)
    cases = {"no writer": [], "mcap.Writer per message": [], "telemetry": []}
    for _ in range(blocks):
        for name, lateness in cases.items():
            if name == "telemetry":
                writer = Telemetry(folder / "gil.mcap", groups, cfg.to_dict())
            elif name == "no writer":
                writer = None
            else:
                writer = PerMessageWriter(folder / "gil_per_message.mcap", groups, width)
            ring = writer.ring if writer else np.zeros((1 << 16, width))
            head = writer.head if writer else np.zeros(1, np.int64)
            thread = threading.Thread(target=spin_block, args=(sleep, seconds, ring, head,
                                                               rows_per_tick, lateness, fifo))
            thread.start()
            thread.join()
            if writer is not None:
                writer.close()
    print(f"\nloop at 1 kHz writing {rows_per_tick} row(s) per tick ({rows_per_tick} kHz of rows), "
          f"{blocks} x {seconds:g} s per case, loop {'SCHED_FIFO ' + str(fifo) if fifo else 'SCHED_OTHER'}"
          f", load average {os.getloadavg()[0]:.2f}")
    print("case                    | lateness us: median   p99  p99.9    max  >50us "
          "| GIL wait us: p99  p99.9    max  >50us")
    for name, values in cases.items():
        late, gil = (np.array(values) / 1e3).T
        print(f"{name:23} | {np.median(late):19.1f} {np.percentile(late, 99):5.0f} "
              f"{np.percentile(late, 99.9):6.0f} {late.max():6.0f} {np.mean(late > 50):6.2%} "
              f"| {np.percentile(gil, 99):16.1f} {np.percentile(gil, 99.9):6.0f} "
              f"{gil.max():6.0f} {np.mean(gil > 50):6.2%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one block, s")
    parser.add_argument("--blocks", type=int, default=10, help="blocks per case")
    parser.add_argument("--fifo", type=int, default=0,
                        help="SCHED_FIFO priority of the loop thread (0: normal scheduling)")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for dt in (1e-3, 2e-4):
            rows, cfg = rows_of_a_run(dt, 10.0)
            if not args.skip_throughput:
                throughput(rows, cfg, folder)
        longest_steps(rows, folder)
        print(f"\nGIL switch interval {sys.getswitchinterval() * 1e6:.0f} us")
        sleep = sleep_until(folder)
        for rows_per_tick in (1, 5):
            gil_impact(sleep, cfg, folder, args.seconds, args.blocks, rows_per_tick, args.fifo)


if __name__ == "__main__":
    main()
