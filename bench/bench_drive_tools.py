"""Standard tools against the emulated drives (issue 16). Run: python bench/bench_drive_tools.py [N]

The drives run in another process (``hil emulate``), as on a rig. Prints median, p90
and max of:

- CANopen: ``canopen``'s BaseNode402 with the EDS of ``hil canopen eds``, from NMT reset
  node (boot-up) through OPERATION ENABLED on the default, event-driven PDOs (no
  remapping, no SYNC): N bring-ups of node 1 of configs/rig_canopen.toml;
- CANopen: ``canopen``'s reset idiom (``nmt.state = 'RESET'``, ``wait_for_bootup()``) N
  times (how many hear the boot-up, and its delay after the command), then the 10 ms
  event timer of the default TPDO1 measured on the bus for 5 s (median and tails);
- packet serial: the round trip of each command the ``basicmicro`` library sends
  (ReadVersion, GetEncoders, GetSpeeds, ..., SpeedM1M2, the position mode), N calls
  each, on the pty of ``hil emulate rig_serial``; and the caller's wait for a command
  the emulated device does not answer, with the library's default timeouts;
- the emulated velocity PID: from rest, SpeedM1 to 4000 counts/s (1.2 rad/s at joint 1)
  until the speed stays within 2 % for 0.3 s, polled with GetSpeeds (wall-clock time),
  a few repetitions.

A pty has no baud rate: on real hardware add the wire time of the request and reply.
Timings on a shared 2-core VM vary between runs.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HIL = [sys.executable, "-m", "hilrig.cli"]
M = 0x80


def summary(name: str, seconds) -> str:
    ms = np.asarray(seconds) * 1e3
    return (f"{name:<36} median {np.median(ms):8.3f} ms   p90 {np.percentile(ms, 90):8.3f} ms"
            f"   max {ms.max():8.3f} ms   (n = {len(ms)})")


def canopen_bring_up(n: int) -> None:
    import logging

    import canopen
    from canopen.profiles.p402 import BaseNode402

    logging.getLogger("canopen").setLevel(logging.ERROR)   # 0x6060/0x6061 over SDO: by design

    channel = f"ipc:///tmp/hil-bench-{uuid.uuid4().hex[:8]}"
    eds = Path(tempfile.mkdtemp(prefix="hilrig-bench-")) / "drive.eds"
    subprocess.run(HIL + ["canopen", "eds", "--node", "1", "-o", str(eds)], check=True,
                   cwd=ROOT, capture_output=True)
    emu = subprocess.Popen(HIL + ["emulate", "rig_canopen", "--set",
                                  f"link.canopen.channel='{channel}'"],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    net = canopen.Network()
    try:
        net.connect(interface="hilrig_zmq", channel=channel, connect_timeout=120.0)
        times = []
        for _ in range(n):
            node = BaseNode402(1, str(eds))
            net.add_node(node)
            booted = []

            def on_boot(cob_id, data, ts, booted=booted):
                if data[0] == 0:
                    booted.append(1)
            net.subscribe(0x701, on_boot)
            started = time.perf_counter()
            node.nmt.send_command(0x81)                     # reset node
            while not booted:
                time.sleep(0.0005)
            node.nmt.wait_for_heartbeat(1.0)                # PRE-OPERATIONAL
            node.setup_402_state_machine()
            node.op_mode = "CYCLIC SYNCHRONOUS TORQUE"
            node.nmt.state = "OPERATIONAL"
            node.state = "OPERATION ENABLED"
            times.append(time.perf_counter() - started)
            node.state = "SWITCH ON DISABLED"
            net.unsubscribe(0x701, on_boot)
            del net[1]
        print(summary("BaseNode402 reset -> OPERATION ENABLED", times))
        print("  (includes waiting for the first heartbeat, 0x1017 = 100 ms after boot-up)")
    finally:
        net.disconnect()
        emu.send_signal(signal.SIGINT)
        emu.wait(30)


def canopen_reset_and_event_timer(n: int) -> None:
    import canopen

    channel = f"ipc:///tmp/hil-bench-{uuid.uuid4().hex[:8]}"
    emu = subprocess.Popen(HIL + ["emulate", "rig_canopen", "--set",
                                  f"link.canopen.channel='{channel}'"],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    net = canopen.Network()
    try:
        for line in emu.stderr:                            # the ready line
            if "emulated CiA 402 drives" in line:
                break
        net.connect(interface="hilrig_zmq", channel=channel, connect_timeout=10.0)
        node = canopen.RemoteNode(1, None)
        net.add_node(node)
        boot_ups, delays, heard = [], [], 0
        net.subscribe(0x701, lambda cob_id, data, ts: data[0] == 0 and
                      boot_ups.append(time.perf_counter()))
        for _ in range(n):
            sent = time.perf_counter()
            node.nmt.state = "RESET"
            try:
                node.nmt.wait_for_bootup(2.0)
                heard += 1
                delays.append(boot_ups[-1] - sent)
            except canopen.nmt.NmtError:
                pass
        print(f"canopen reset idiom: boot-up heard {heard} of {n}")
        print(summary("  boot-up after NMT reset", delays))
        arrivals = []
        net.subscribe(0x181, lambda cob_id, data, ts: arrivals.append(time.perf_counter()))
        node.nmt.state = "OPERATIONAL"
        time.sleep(5.0)
        node.nmt.state = "PRE-OPERATIONAL"
        periods = np.diff(arrivals[1:])
        ms = periods * 1e3
        print(summary("TPDO1 event timer (10 ms) period", periods)
              + f"   p1 {np.percentile(ms, 1):.3f} ms   p99 {np.percentile(ms, 99):.3f} ms")
    finally:
        net.disconnect()
        emu.send_signal(signal.SIGINT)
        emu.communicate(timeout=30)


def serial_tools(n: int) -> None:
    from basicmicro import Basicmicro

    port = f"/tmp/hil-bench-pty-{uuid.uuid4().hex[:8]}"
    emu = subprocess.Popen(HIL + ["emulate", "rig_serial", "--set", f"link.serial.port='{port}'"],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(port):
            if time.monotonic() > deadline or emu.poll() is not None:
                raise SystemExit("the emulated pty did not appear")
            time.sleep(0.05)
        bm = Basicmicro(port, 460800, timeout=0.05, retries=3)
        assert bm.Open()
        calls = {
            "ReadVersion (21)": lambda: bm.ReadVersion(M),
            "ReadLogicBatteryVoltage (25)": lambda: bm.ReadLogicBatteryVoltage(M),
            "GetEncoders (78)": lambda: bm.GetEncoders(M),
            "GetSpeeds (108)": lambda: bm.GetSpeeds(M),
            "GetISpeeds (79)": lambda: bm.GetISpeeds(M),
            "ReadTemp (82)": lambda: bm.ReadTemp(M),
            "GetTimeout (15)": lambda: bm.GetTimeout(M),
            "ReadM1VelocityPID (55)": lambda: bm.ReadM1VelocityPID(M),
            "SetEncM1 (22)": lambda: bm.SetEncM1(M, 0),
            "ResetEncoders (20)": lambda: bm.ResetEncoders(M),
            "SpeedM1M2 (37)": lambda: bm.SpeedM1M2(M, 0, 0),
            "SpeedAccelM1M2 (40)": lambda: bm.SpeedAccelM1M2(M, 1000, 0, 0),
            "DutyM1M2 (34)": lambda: bm.DutyM1M2(M, 0, 0),
            "ReadISpeedM1 (30)": lambda: bm.ReadISpeedM1(M),
            "ReadBuffers (47)": lambda: bm.ReadBuffers(M),
            "ReadPWMs (48)": lambda: bm.ReadPWMs(M),
            "DutyAccelM1 (52)": lambda: bm.DutyAccelM1(M, 10000, 0),
            "SetM1PositionPID (61)": lambda: bm.SetM1PositionPID(M, 20.0, 0.5, 4.0, 4000, 5,
                                                                  0, 0),
            "ReadM1PositionPID (63)": lambda: bm.ReadM1PositionPID(M),
            "SpeedAccelDeccelPositionM1 (65)": lambda: bm.SpeedAccelDeccelPositionM1(
                M, 4000, 2000, 4000, 0, 1),
            "GetStatus (73)": lambda: bm.GetStatus(M),
        }
        for name, call in calls.items():
            times = []
            for _ in range(n):
                started = time.perf_counter()
                result = call()
                times.append(time.perf_counter() - started)
                assert result is True or result[0], (name, result)
            print(summary(name, times))
        settle = []
        for _ in range(5):
            assert bm.DutyM1M2(M, 0, 0)
            time.sleep(1.5)                               # back to rest
            started = time.perf_counter()
            assert bm.SpeedM1(M, 4000)
            entered = None
            while time.perf_counter() - started < 5.0:
                speed = bm.GetSpeeds(M)[1]
                speed = speed - (1 << 32) if speed >= 1 << 31 else speed
                now = time.perf_counter() - started
                if abs(speed - 4000) <= 80:
                    entered = entered if entered is not None else now
                    if now - entered > 0.3:
                        break
                else:
                    entered = None
            settle.append(entered if entered is not None else float("nan"))
            assert bm.SpeedM1(M, 0)
        print(summary("SpeedM1 4000 counts/s: 2 % settling", settle))
        bm.DutyM1M2(M, 0, 0)
        bm.close()
        # a command the device does not answer (as a RoboClaw: no reply), with the
        # library's defaults (1 s read timeout, 2 tries): the caller's own timeouts
        quiet = Basicmicro(port, 460800)
        assert quiet.Open()
        started = time.perf_counter()
        try:
            quiet.ReadEncoderModes(M)                       # cmd 91, not emulated
        except Exception:  # noqa: BLE001 - basicmicro's PacketTimeoutError, expected
            pass
        print(summary("unanswered command (91), defaults", [time.perf_counter() - started]))
        quiet.close()
    finally:
        emu.send_signal(signal.SIGINT)
        emu.wait(30)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    canopen_bring_up(max(5, count // 10))
    canopen_reset_and_event_timer(max(20, count // 10))
    serial_tools(count)
