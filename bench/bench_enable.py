"""Drives enabled -> first control command, in `hil control`. Run: python bench/bench_enable.py [N]

``hil emulate`` of configs/rig_canopen.toml (CiA 402 drives on the ``hilrig_zmq`` CAN bus)
and of configs/rig_serial.toml (RoboClaw drives on a pty) runs as a subprocess, and
``hil control`` of the same config against it, once with an empty numba cache (its own
HILRIG_CACHE_DIR, just created: every kernel of the controller compiles) and N times
(default 3) with that cache warm. The emulator always starts from the default (warm)
cache. Prints, from each run's timing summary (``<log>.timing.json``):

- warm-up: link configured -> kernels compiled or loaded and run once, s;
- enable -> first command: the drives enabled (CANopen: the first statusword showing
  OPERATION ENABLED; serial: ``activate``) -> the first command written, ms, and the
  same in tick periods (sim.dt: 2 ms CANopen, 10 ms serial). Target: at most 2.

The control runs use the tests' generous link timeouts (this VM stalls for tens of ms);
they do not change when the first tick starts. Figures vary between runs on a shared VM.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RIGS = {
    "canopen": ("rig_canopen", lambda tag: [
        "link.canopen.interface='hilrig_zmq'", f"link.canopen.channel='ipc:///tmp/{tag}'",
        "link.canopen.tpdo_timeout=0.5", "link.canopen.heartbeat_timeout=2.0",
        "safety.watchdog_ticks=1000"], lambda tag: Path(f"/tmp/{tag}.up")),
    "serial": ("rig_serial", lambda tag: [
        f"link.serial.port='/tmp/{tag}'", "link.serial.timeout=0.004", "link.serial.budget=0.005",
        "link.timeout=1.0", "safety.watchdog_ticks=100"], lambda tag: Path(f"/tmp/{tag}")),
}


def hil(*args: str) -> list:
    return [sys.executable, "-m", "hilrig.cli", *args]


def wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the emulated drives did not come up ({path})")
        time.sleep(0.02)


def run_once(link: str, cache_dir: str, workdir: Path) -> dict:
    """One ``hil emulate`` + ``hil control`` pair; the controller's timing summary."""
    name, sets, ready = RIGS[link]
    tag = f"hil-bench-enable-{uuid.uuid4().hex[:8]}"
    config = str(ROOT / "configs" / f"{name}.toml")
    args = [a for s in sets(tag) + ["sim.duration=0.5"] for a in ("--set", s)]
    emu = subprocess.Popen(hil("emulate", config, *args), cwd=workdir, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for(ready(tag), 300)
        log = workdir / f"{tag}.mcap"
        ctl = subprocess.run(hil("control", config, *args, "--log", str(log),
                                 "--estop-endpoint", ""),
                             cwd=workdir, capture_output=True, text=True, timeout=600,
                             env=dict(os.environ, HILRIG_CACHE_DIR=cache_dir))
    finally:
        emu.terminate()
        emu.communicate(timeout=30)
    summary_path = log.with_suffix(".timing.json")
    if not summary_path.exists():
        raise RuntimeError(f"hil control wrote no summary:\n{ctl.stdout}{ctl.stderr}")
    summary = json.loads(summary_path.read_text())
    summary["dt"] = 1.0 / summary["rate_hz"]
    return summary


def line(link: str, cache: str, s: dict) -> str:
    if "enable_to_first_command_s" not in s:
        return f"{link:<8} {cache:<5} no first command: {s['reason']}"
    e2c = s["enable_to_first_command_s"]
    return (f"{link:<8} {cache:<5} warm-up {s['warm_up_s']:7.3f} s   enable -> first command "
            f"{e2c * 1e3:7.3f} ms = {e2c / s['dt']:5.2f} ticks of {s['dt'] * 1e3:g} ms   "
            f"(run: {s['status']}, {s['ticks_run']} ticks)")


def main(repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="hil-bench-enable-") as tmp:
        workdir = Path(tmp)
        for link in RIGS:
            cache_dir = tempfile.mkdtemp(prefix="numba-", dir=tmp)     # empty: a cold cache
            print(line(link, "cold", run_once(link, cache_dir, workdir)), flush=True)
            for _ in range(repeats):
                print(line(link, "warm", run_once(link, cache_dir, workdir)), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
