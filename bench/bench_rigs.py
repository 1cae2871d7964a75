"""The shipped two-process rigs, as shipped, quiet and with a CPU hog on every core.

    python bench/bench_rigs.py [--only zmq_free,zmq_lockstep,canopen,serial,serial_pty]
                               [--loads quiet,loaded] [--runs N] [--duration S]
                               [--floor S] [--set KEY=VALUE ...] [--pty N]

Each run is what a user types in two terminals: ``hil emulate CONFIG`` (a real
subprocess; the run starts once it printed its ready line) and then ``hil control
CONFIG`` for sim.duration s (the config's 3 s unless --duration), with nothing
changed but a fresh address (endpoint, CAN channel or serial socket) per run.
``serial_pty`` is rig_serial over a pty instead of its shipped socket (link.serial.port a
path), to compare the two transports side by side. "loaded" adds one
busy loop per core (``sh -c 'while :; do :; done'``, normal priority, killed after
each scenario), as a browser, a viewer and a compiler would on a rig PC.

First it measures the machine's floor (``--floor`` s, bench/machine_floor.py): an empty
1 kHz loop at SCHED_FIFO 99 on every CPU at once, and the longest stretches it could not
run (the host taking the vCPU away, the kernel's own work). No loop can keep a deadline
through such a stall, nor a link a watchdog shorter than it.

``--pty N`` measures instead N round trips (a 5-byte request, a 7-byte reply, as
rig_serial's reads) between two processes at SCHED_FIFO 80 and 70 over a pty and over
rig_serial's Unix socket (``unix://``, drivers.protocol_unix, the near end opened by
pyserial as the link opens it), quiet and loaded: a pty hands its bytes to the other end
through a kernel worker of normal priority, which the hogs delay (docs/RIGPC.md).

Per scenario and load it prints: runs that lost the link (the controller's watchdog,
a missing TPDO or reply: any run that did not end "done", with its reasons), and
overruns per 1000 ticks of the controller and (ZeroMQ emulator) of the emulator.
Default runs: 20 of rig_zmq in free mode, 10 of each other (issue 28).

The figures are only as quiet as the host: on a machine shared with other users (a
CI runner, a VM with steal time) the "quiet" rows carry their load too; the load
average at the start of each scenario is printed with it. SCHED_FIFO needs root or
CAP_SYS_NICE (docs/RIGPC.md); without it the rigs run at normal priority and say so.
"""
from __future__ import annotations

import argparse
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import hilrig
from hilrig.telemetry.logfile import read_log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))      # bench.machine_floor

# scenario -> (config, --set overrides for both processes, default runs)
SCENARIOS = {
    "zmq_free": ("rig_zmq", [], 20),
    "zmq_lockstep": ("rig_zmq", ["emulator.mode='lockstep'"], 10),
    "canopen": ("rig_canopen", [], 10),
    "serial": ("rig_serial", [], 10),
    "serial_pty": ("rig_serial", [], 10),
}
READY_TIMEOUT = 120.0   # s for `hil emulate` to print its ready line (a cold kernel cache)


def hil(*args: str) -> list:
    return [sys.executable, "-m", "hilrig.cli", *args]


def fresh_address(name: str) -> list:
    """--set overrides that give a run of scenario ``name`` an address of its own."""
    tag = uuid.uuid4().hex[:10]
    if name == "canopen":
        return [f"link.canopen.channel='ipc:///tmp/hil-bench-can-{tag}'"]
    if name == "serial":
        return [f"link.serial.port='unix://$RUNTIME/bench-roboclaw-{tag}'"]
    if name == "serial_pty":
        return [f"link.serial.port='/tmp/hil-bench-pty-{tag}'"]
    return [f"link.endpoint='ipc:///tmp/hil-bench-{tag}'"]


class Hogs:
    """One busy shell loop per core at normal priority, until ``stop``."""

    def __init__(self, n: int):
        self.procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"],
                                       start_new_session=True) for _ in range(n)]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def _lines(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)
    out.put(None)


def run_pair(name: str, sets: list, tmp: Path, duration: float | None) -> dict:
    """One `hil emulate` + `hil control` run of scenario ``name``; the controller's summary
    and the emulator's end lines."""
    config = SCENARIOS[name][0]
    sets = sets + fresh_address(name)
    if duration is not None:
        sets.append(f"sim.duration={duration}")
    options = [a for s in sets for a in ("--set", s)]
    config_path = str(ROOT / "configs" / f"{config}.toml")
    emu_err = open(tmp / "emulate.err", "w+")
    emu = subprocess.Popen(hil("emulate", config_path, *options), cwd=tmp, text=True,
                           stdout=subprocess.PIPE, stderr=emu_err)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(emu.stdout, lines), daemon=True).start()
    try:
        banner = lines.get(timeout=READY_TIMEOUT)
        if not banner or not banner.startswith("emulating"):
            emu_err.seek(0)
            raise RuntimeError(f"hil emulate did not start: {banner!r} {emu_err.read()}")
        log = tmp / "control.mcap"
        ctl = subprocess.run(hil("control", config_path, *options, "--log", str(log)),
                             cwd=tmp, capture_output=True, text=True, timeout=300)
    finally:
        if emu.poll() is None:
            emu.send_signal(signal.SIGINT)
        try:
            emu.wait(timeout=30)
        except subprocess.TimeoutExpired:
            emu.kill()
            emu.wait()
        emu_err.close()
    emu_out = []
    while (line := lines.get(timeout=5)) is not None:
        emu_out.append(line)
    try:
        summary = read_log(log)[3]
    except Exception as exc:  # noqa: BLE001 -- reported as the run's failure
        summary = {"reason": f"no log ({exc}); {ctl.stderr.strip()[-300:]}", "ticks": 0,
                   "overruns": 0}
    out = {"reason": summary.get("reason", "?"), "ticks": summary.get("ticks_run", 0),
           "overruns": summary.get("overruns", 0), "emu_ticks": 0, "emu_overruns": 0,
           "exit": ctl.returncode}
    for line in emu_out:   # the ZeroMQ emulator's end lines
        if line.startswith("emulator stopped at tick"):
            out["emu_ticks"] = int(line.split()[4].rstrip(":"))
        elif line.startswith("overruns "):
            out["emu_overruns"] = int(line.split()[1].rstrip(","))
    return out


def machine_floor(duration: float) -> None:
    """The empty SCHED_FIFO 99 loop on every CPU at once for ``duration`` s: its stalls."""
    import numpy as np
    from bench.machine_floor import floor_run

    results = {}

    def run(cpu: int) -> None:
        results[cpu] = floor_run(duration, 0.001, 5e-5, cpu, 99)

    threads = [threading.Thread(target=run, args=(cpu,)) for cpu in range(os.cpu_count() or 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for cpu, (timings, overruns, steal) in sorted(results.items()):
        skipped = np.isnan(timings[:, 0])
        stalls, n = [], 0           # stretches of skipped ticks, ms
        for missed in skipped:
            if missed:
                n += 1
            elif n:
                stalls.append(n)
                n = 0
        late = np.nanmax(timings[:, 0]) * 1e3
        print(f"floor cpu{cpu}: {duration:g} s, missed deadlines {overruns}, stalls >= 3 ms "
              f"{sum(s >= 3 for s in stalls)}, >= 5 ms {sum(s >= 5 for s in stalls)}, longest "
              f"{max(stalls + [0])} ms (latest wake {late:.1f} ms); steal {steal:.0f} ms",
              flush=True)


def round_trips(n: int, kind: str):
    """``n`` request/reply round trips over a pty (``kind`` "pty") or rig_serial's Unix
    socket ("unix"), this process at SCHED_FIFO 80 (the link) and a forked echo at 70 (the
    drive); s each."""
    import select
    import time
    import tty

    import numpy as np
    import serial
    from hilrig.drivers import protocol_unix

    if kind == "pty":
        near, far = os.openpty()
        tty.setraw(near)
        tty.setraw(far)
    else:                  # the listening end as the emulator makes it, the link's as it opens
        url = f"unix://$RUNTIME/bench-rt-{uuid.uuid4().hex[:10]}"
        protocol_unix.register()
        server, made = protocol_unix.listen(url)
        try:
            port = serial.serial_for_url(url, timeout=0)
            server.setblocking(True)
            far = server.accept()[0].detach()
        finally:
            server.close()
            protocol_unix.remove(made)
        near = os.dup(port.fileno())
        port.close()
    pid = os.fork()
    if pid == 0:                                  # the drive: answer each request
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(70))
            os.close(near)
            while (request := os.read(far, 64)) not in (b"", b"q"):
                os.write(far, b"\x01" * (7 * (len(request) // 5)))
        finally:
            os._exit(0)
    os.close(far)
    times = np.zeros(n)
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(80))
    try:
        for k in range(n):
            start = time.perf_counter()
            os.write(near, b"\x80\x10\x00\x00\x00")
            got = 0
            while got < 7 and select.select((near,), (), (), 1.0)[0]:
                got += len(os.read(near, 64))
            times[k] = time.perf_counter() - start
            time.sleep(0.001)
    finally:
        os.sched_setscheduler(0, policy, param)
        os.write(near, b"q")
        os.waitpid(pid, 0)
        os.close(near)
    return times


def pty_scenario(n: int, loaded: bool) -> None:
    """Round trips over a pty and a Unix socket (``round_trips``), quiet or under the hogs."""
    import numpy as np

    load_avg = os.getloadavg()[0]
    hogs = Hogs(os.cpu_count() or 1) if loaded else None
    try:
        results = {kind: round_trips(n, kind) * 1e3 for kind in ("pty", "unix")}
    finally:
        if hogs is not None:
            hogs.stop()
    for kind, ms in results.items():
        print(f"round trip {kind:<4} {'loaded' if loaded else 'quiet':<6} load {load_avg:4.1f}  "
              f"n {n}  median {np.median(ms):.3f} ms  p99 {np.percentile(ms, 99):.2f}  "
              f"p99.9 {np.percentile(ms, 99.9):.2f}  max {ms.max():.2f}  > 2 ms "
              f"{np.sum(ms > 2.0)}", flush=True)


def scenario(name: str, runs: int, duration: float | None, loaded: bool,
             extra: list = ()) -> None:
    config, sets, _ = SCENARIOS[name]
    sets = sets + list(extra)
    load_avg = os.getloadavg()[0]
    hogs = Hogs(os.cpu_count() or 1) if loaded else None
    results = []
    try:
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as tmp:
                results.append(run_pair(name, list(sets), Path(tmp), duration))
    finally:
        if hogs is not None:
            hogs.stop()
    lost = [r for r in results if r["reason"] != "done"]
    ticks = sum(r["ticks"] for r in results)
    emu_ticks = sum(r["emu_ticks"] for r in results)
    per_run = [1000.0 * r["overruns"] / max(r["ticks"], 1) for r in results]
    line = (f"{name:<13} {'loaded' if loaded else 'quiet':<6} load {load_avg:4.1f}  "
            f"runs {len(results):2d}  link lost {len(lost):2d}  controller overruns "
            f"{1000.0 * sum(r['overruns'] for r in results) / max(ticks, 1):6.2f}/1000 "
            f"(worst run {max(per_run):6.2f})")
    if emu_ticks:
        line += (f"  emulator overruns "
                 f"{1000.0 * sum(r['emu_overruns'] for r in results) / emu_ticks:6.2f}/1000")
    print(line, flush=True)
    for reason in sorted({r["reason"] for r in lost}):
        count = sum(r["reason"] == reason for r in lost)
        print(f"    {count} x {reason}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--loads", default="quiet,loaded")
    parser.add_argument("--runs", type=int, help="runs per scenario and load (default: "
                        "20 for zmq_free, 10 for the others)")
    parser.add_argument("--duration", type=float, help="s per run (default: the config's)")
    parser.add_argument("--floor", type=float, default=60.0,
                        help="s of the machine's floor first (0: skip)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for both processes (a variant to compare)")
    parser.add_argument("--pty", type=int, default=0, metavar="N",
                        help="measure N pty and Unix-socket round trips instead (needs "
                             "SCHED_FIFO)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # the hogs stop in any case
    print(f"{os.cpu_count()} CPUs; hilrig from {Path(hilrig.__file__).parent}"
          + (f"; --set {' '.join(args.set)}" if args.set else ""), flush=True)
    if args.pty:
        for load in args.loads.split(","):
            pty_scenario(args.pty, load == "loaded")
        return
    if args.floor > 0:
        machine_floor(args.floor)
    for name in args.only.split(","):
        for load in args.loads.split(","):
            scenario(name, args.runs or SCENARIOS[name][2], args.duration, load == "loaded",
                     args.set)


if __name__ == "__main__":
    main()
