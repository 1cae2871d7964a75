"""The emulator under a flood of malformed frames (issue 11, item 4).

Three measurements, each without and with a flood of malformed frames (every kind of
tests/malformed.py, from 64 peers, at 50,000 frames/s by default, sent by a separate
process):

1. free mode: ``hil emulate rig_zmq`` with ``hil control rig_zmq`` driving it for
   DURATION s: the emulator's lateness p50/p99/max and overruns (its log's summary), and
   whether the controller kept its link (how its run ended).
2. lockstep round trip: COMMAND -> step -> STATE, paced at 1 kHz, from this process.
3. rejects per core: a lockstep emulator with no controller under an unpaced flood:
   frames rejected per second of the emulator's CPU time.

Goal: with the flood, the emulator's lateness p99 within twice its no-flood value and
the controller still running to its end.

    python bench/bench_flood.py [--duration 5] [--rate 50000] [--peers 64]
    python bench/bench_flood.py flood ENDPOINT RATE PEERS SECONDS   # the flooding process

On a shared or virtual machine the figures move with the neighbours' load; run it on a
quiet machine for numbers to quote (medians and tails are printed).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from malformed import malformed_messages  # noqa: E402

CONFIG = str(ROOT / "configs" / "rig_zmq.toml")


def flood(endpoint: str, rate: float, peers: int, seconds: float) -> None:
    """Send malformed messages at ``rate`` frames/s (0: as fast as possible) from ``peers``
    DEALER sockets for ``seconds``; print the number sent and the rate achieved."""
    context = zmq.Context()
    sockets = []
    for _ in range(peers):
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 10)          # the ERROR replies are not read
        sock.connect(endpoint)
        sockets.append(sock)
    messages = malformed_messages(seed=1, n=4096, nact=3)
    time.sleep(0.2)
    sent, dropped, i = 0, 0, 0
    start = time.perf_counter()
    batch_period = 1e-3
    while True:
        now = time.perf_counter() - start
        if now >= seconds:
            break
        due = int(now * rate) + 1 if rate else sent + 256
        while sent + dropped < due:
            try:
                sockets[i % peers].send_multipart(messages[i % len(messages)], flags=zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                dropped += 1                         # the emulator's queue for this peer is full
            i += 1
        if rate:
            time.sleep(max(0.0, batch_period - (time.perf_counter() - start - now)))
        for sock in sockets[: 4]:                    # drain some replies (cheap)
            while sock.poll(0):
                sock.recv()
    elapsed = time.perf_counter() - start
    print(f"{sent} {dropped} {elapsed:.3f}", flush=True)
    for sock in sockets:
        sock.close(0)
    context.term()


def _flooder(endpoint: str, rate: float, peers: int, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "flood", endpoint, str(rate), str(peers),
                             str(seconds)], stdout=subprocess.PIPE, text=True)


def _flood_report(proc: subprocess.Popen) -> str:
    sent, dropped, elapsed = proc.communicate(timeout=120)[0].split()
    return (f"flood: {int(sent)} frames sent in {float(elapsed):.1f} s "
            f"({int(sent) / float(elapsed):.0f}/s), {int(dropped)} held back by the high-water "
            "mark")


def _emulator(endpoint: str, log: Path, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "hilrig.cli", "emulate", CONFIG,
                             "--bind", endpoint, "--log", str(log), *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("emulating"):
        raise RuntimeError(f"the emulator did not start: {line}")
    return proc


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    return proc.communicate(timeout=60)[0]


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_mode(tmp: Path, duration: float, rate: float, peers: int, with_flood: bool) -> None:
    from hilrig.telemetry.logfile import read_log

    endpoint = f"ipc://{tmp}/free-{int(with_flood)}"
    emu_log, ctl_log = tmp / f"emu{int(with_flood)}.mcap", tmp / f"ctl{int(with_flood)}.mcap"
    emu = _emulator(endpoint, emu_log)
    flooder = _flooder(endpoint, rate, peers, duration + 2.0) if with_flood else None
    ctl = subprocess.run([sys.executable, "-m", "hilrig.cli", "control", CONFIG, "--connect",
                          endpoint, "--duration", str(duration), "--log", str(ctl_log),
                          "--estop-endpoint", "", "--set", "safety.watchdog_ticks=50"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = _flood_report(flooder) if flooder else "no flood"
    _stop(emu)
    summary = read_log(emu_log)[3]
    late = summary.get("lateness_us", {})
    ended = [line for line in ctl.stdout.splitlines() if "ended:" in line]
    print(f"  {'flood   ' if with_flood else 'no flood'}: emulator lateness median "
          f"{late.get('median', float('nan')):.1f} µs, p99 {late.get('p99', float('nan')):.1f}, "
          f"max {late.get('max', float('nan')):.0f}; overruns {summary.get('overruns')}; "
          f"rejected {summary.get('rejected')}")
    print(f"            controller: {ended[0] if ended else ctl.stderr.strip()[-200:]}")
    print(f"            {report}")
    return late.get("p99")


def round_trip(tmp: Path, count: int, rate: float, peers: int, with_flood: bool) -> None:
    from hilrig.drivers.wire import MessageType, decode, encode

    endpoint = f"ipc://{tmp}/lockstep-{int(with_flood)}"
    emu = _emulator(endpoint, tmp / f"rt{int(with_flood)}.mcap", "--mode", "lockstep")
    flooder = _flooder(endpoint, rate, peers, count * 1e-3 + 3.0) if with_flood else None
    time.sleep(0.5)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send(encode(MessageType.HELLO, 0, 0.0, [3]))
    for _ in range(2):                    # WELCOME, the state at HELLO
        sock.recv()
    times = np.empty(count)
    deadline = time.perf_counter()
    for k in range(count):
        deadline += 1e-3
        time.sleep(max(0.0, deadline - 3e-4 - time.perf_counter()))
        while time.perf_counter() < deadline:
            pass
        sent = time.perf_counter_ns()
        sock.send(encode(MessageType.COMMAND, k + 1, 0.0, [0.0, 0.0, 0.0]))
        while True:
            if not sock.poll(5000):
                raise RuntimeError("the emulator stopped answering")
            if decode(sock.recv())[0] == MessageType.STATE:
                break
        times[k] = (time.perf_counter_ns() - sent) * 1e-3
    sock.send(encode(MessageType.BYE, count, 0.0))
    sock.close()
    report = _flood_report(flooder) if flooder else "no flood"
    _stop(emu)
    print(f"  {'flood   ' if with_flood else 'no flood'}: round trip median "
          f"{np.median(times):.1f} µs, p99 {np.percentile(times, 99):.1f}, max "
          f"{times.max():.0f} ({count} commands); {report}")


def rejects_per_core(tmp: Path, peers: int, seconds: float = 3.0) -> None:
    endpoint = f"ipc://{tmp}/rejects"
    emu = _emulator(endpoint, tmp / "rejects.mcap", "--mode", "lockstep")
    cpu0 = _cpu_seconds(emu.pid)
    flooder = _flooder(endpoint, 0, peers, seconds)
    report = _flood_report(flooder)
    time.sleep(0.5)                       # let the emulator finish the backlog
    cpu = _cpu_seconds(emu.pid) - cpu0
    out = _stop(emu)
    rejected = int(out.split("rejected frames ")[1].split()[0])
    print(f"  {rejected} frames rejected with {cpu:.2f} s of the emulator's CPU: "
          f"{rejected / max(cpu, 1e-9):.0f} per second per core; {report}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "flood":
        flood(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="free-mode run, s")
    parser.add_argument("--rate", type=float, default=50000.0, help="flood, frames/s")
    parser.add_argument("--peers", type=int, default=64, help="flooding peers")
    parser.add_argument("--round-trips", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hil-flood-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        print(f"== free mode, {args.duration:g} s of `hil control rig_zmq` "
              f"(flood {args.rate:g} frames/s from {args.peers} peers)")
        quiet = free_mode(tmp, args.duration, args.rate, args.peers, False)
        flooded = free_mode(tmp, args.duration, args.rate, args.peers, True)
        if quiet and flooded:
            print(f"  lateness p99 with the flood / without: {flooded / quiet:.2f} (goal <= 2)")
        print("== lockstep round trip (COMMAND -> step -> STATE, 1 kHz)")
        round_trip(tmp, args.round_trips, args.rate, args.peers, False)
        round_trip(tmp, args.round_trips, args.rate, args.peers, True)
        print(f"== rejects per core (unpaced flood from {args.peers} peers)")
        rejects_per_core(tmp, args.peers)


if __name__ == "__main__":
    main()
