"""Packet-serial link timings (issue: serial drive link). Run: python bench/bench_serial.py [N]

The emulated drives of configs/rig_serial.toml run in their own process
(devices.roboclaw_drive.serve, free mode: the plant keeps real time at
sim.dt) behind a pty; the link opens the pty with pyserial. Prints median, p99
and max of:
- one command/response exchange: ReadEncM1 (2 bytes out, 7 back) through
  SerialLink.exchange, N times (with its one retry; failures are counted);
- one full tick for the 3 axes: ``read`` (10 exchanges) + ``write`` (2), N ticks
  back to back, with a PD command computed between them (not timed; a stale
  read holds the previous command), and the
  number of stale reads at the rig's 2 ms reply timeout and 4 ms budget.
A pty has no baud rate: on real hardware add the wire time (102 bytes a tick,
2.2 ms at 460800 baud). Timings on a shared 2-core VM vary between runs.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hilrig.controllers.factory import controller_from_config  # noqa: E402
from hilrig.devices.roboclaw_drive import serve  # noqa: E402
from hilrig.drivers import roboclaw_codec as rc  # noqa: E402
from hilrig.drivers.link import Measurement  # noqa: E402
from hilrig.drivers.serial_link import ExchangeTimeout, SerialLink  # noqa: E402
from hilrig.settings.config import load  # noqa: E402


def summary(name: str, seconds: np.ndarray) -> str:
    us = seconds * 1e6
    return (f"{name:<44} median {np.median(us):8.1f} us   p99 {np.percentile(us, 99):8.1f} us"
            f"   max {us.max():8.1f} us   (n = {len(us)})")


def main(n: int = 2000) -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="hilrig-bench-"), "roboclaw")
    # a stale tick is counted, not fatal: the bench measures cost, not loss of the link;
    # ticks run back to back, ~10 per plant step, so the start-up current would count as
    # 20 over-current ticks
    cfg = load(ROOT / "configs" / "rig_serial.toml", [f"link.serial.port='{path}'",
                                                      "link.timeout=60.0",
                                                      "link.serial.overcurrent_ticks=0"])
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    emulator = context.Process(target=serve, args=(cfg, path, stop), daemon=True)
    emulator.start()
    try:
        while not os.path.islink(path):
            if not emulator.is_alive():
                raise SystemExit("the emulator process died before creating its pty")
            time.sleep(0.05)
        with SerialLink.from_config(cfg) as link:
            exchange = np.zeros(n)
            failed = 0
            for k in range(n):
                started = time.perf_counter()
                try:
                    link.exchange(0x80, rc.READ_ENC_M1)
                except (rc.FrameError, ExchangeTimeout):
                    failed += 1
                exchange[k] = time.perf_counter() - started
            gains = controller_from_config(cfg, link.command_unit)
            meas, u = Measurement(link.n_axes), np.zeros(link.n_axes)
            tick = np.zeros(n)
            for k in range(n):
                started = time.perf_counter()
                fresh = link.read(meas)
                read = time.perf_counter() - started
                if fresh:                  # a stale tick holds the previous command
                    gains(meas.t, meas.pos, meas.vel, meas.current, u)
                started = time.perf_counter()
                link.write(u)
                tick[k] = read + time.perf_counter() - started
            stale = link.stale_reads
    finally:
        stop.set()
        emulator.join(10)
    print(summary("one exchange (ReadEncM1) on a pty", exchange))
    print(f"failed exchanges (after a retry): {failed} of {n}")
    print(summary("read + write, 3 axes (12 exchanges)", tick))
    print(f"stale reads: {stale} of {n} (reply timeout {cfg.link.serial.timeout * 1e3:g} "
          f"ms, budget {cfg.link.serial.budget * 1e3:g} ms per phase)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
