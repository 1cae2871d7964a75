"""CAN cycle timings (issue: CANopen CiA 402 link). Run: python bench/bench_can.py [cycles]

One cycle = SYNC -> TPDOs of the 3 emulated drives -> PD law -> 3 RPDOs, i.e.
``CanopenLink.read`` + ``controllers.law.command`` + ``CanopenLink.write``,
against the emulated CiA 402 drives of configs/rig_canopen.toml:

- in-process on python-can's ``virtual`` bus (drives in a thread of this process);
- across processes on ``hilrig_zmq`` (drives in a spawned process, ``serve``).

The loop runs back to back (no sleeping), so each cycle's time is the round trip
the real-time loop would see. Prints the median, p99 and max in µs, the number of
cycles that missed their TPDOs within the 0.5 s test timeout, and the stale frames.
Timings on a shared 2-core VM vary by tens of percent between runs, and single
stalls of tens of ms happen (see docs/PROTOCOLS.md §6).
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hilrig.controllers.factory import controller_from_config  # noqa: E402
from hilrig.devices.cia402_drive import EmulatedDrives, serve  # noqa: E402
from hilrig.drivers.canopen_link import CanopenLink  # noqa: E402
from hilrig.drivers.link import Measurement  # noqa: E402
from hilrig.settings.config import load  # noqa: E402
from hilrig.schema import Config  # noqa: E402


def cycles(cfg: Config, n: int) -> tuple[np.ndarray, int, int]:
    """Per-cycle times (s), missed cycles and stale frames of n cycles over a fresh link."""
    with CanopenLink.from_config(cfg) as link:
        gains = controller_from_config(cfg, link.command_unit)
        meas, u = Measurement(link.n_axes), np.zeros(link.n_axes)
        times, missed = np.zeros(n), 0
        for k in range(n):
            start = time.perf_counter()
            missed += not link.read(meas)
            gains(meas.t, meas.pos, meas.vel, meas.current, u)
            link.write(u)
            times[k] = time.perf_counter() - start
        return times, missed, link.stale_frames


def report(name: str, times: np.ndarray, missed: int, stale: int) -> None:
    us = times * 1e6
    print(f"{name:34s} median {np.median(us):7.0f} µs  p99 {np.percentile(us, 99):7.0f} µs  "
          f"max {us.max():8.0f} µs  missed {missed}  stale {stale}  ({len(us)} cycles)")


def main(n: int = 3000) -> None:
    overrides = ["link.canopen.tpdo_timeout=0.5", f"sim.duration={n * 0.002}"]
    cfg = load(ROOT / "configs" / "rig_canopen.toml",
               overrides + ["link.canopen.interface=virtual", "link.canopen.channel=bench"])
    with EmulatedDrives(cfg):
        report("virtual bus, drives in a thread", *cycles(cfg, n))

    channel = f"ipc:///tmp/hilrig-bench-{os.getpid()}"
    cfg = load(ROOT / "configs" / "rig_canopen.toml",
               overrides + ["link.canopen.interface=hilrig_zmq", f"link.canopen.channel={channel}"])
    ctx = multiprocessing.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Event()
    process = ctx.Process(target=serve, args=(cfg, None, stop, ready), daemon=True)
    process.start()
    try:
        if not ready.wait(60.0):
            raise SystemExit("the emulator process did not start")
        report("hilrig_zmq, drives in a process", *cycles(cfg, n))
    finally:
        stop.set()
        process.join(30.0)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
