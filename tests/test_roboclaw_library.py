"""The ``basicmicro`` RoboClaw library against the emulated packet-serial drives on a pty.

Every command the library and common robot drivers use first or most, as the library
sends and parses them (its own framing and CRC), and the emulated velocity PID: a speed
command settles at the commanded speed; the position mode (position PID, move profiles,
buffers) brings a joint to a commanded count. An unknown command is dropped whole: no
reply, and the next request is answered normally.
"""
import os
import signal
import subprocess
import time
import uuid

import numpy as np
import pytest
import serial
from basicmicro import Basicmicro
from conftest import config
from hilrig.devices.roboclaw_drive import RoboClawEmulator
from hilrig.drivers import roboclaw_codec as rc
from rt_helpers import ROOT, hil, read_complete, wait_for

M = 0x80           # joints 1 and 2 of rig_serial: M1 and M2 of 0x80


@pytest.fixture
def device():
    emu = RoboClawEmulator(config("rig_serial")).start()       # free mode: real time
    bm = Basicmicro(emu.port, 460800, timeout=0.05, retries=3)
    assert bm.Open()
    try:
        yield emu, bm
    finally:
        bm.close()
        emu.stop()
    assert emu.error is None


def test_every_listed_command_through_basicmicro(device):
    emu, bm = device
    ok, version = bm.ReadVersion(M)
    assert ok and version == rc.VERSION_TEXT[:-1].decode()      # up to the NUL
    assert bm.ReadLogicBatteryVoltage(M) == (True, 50)          # 5.0 V
    assert bm.ReadMainBatteryVoltage(M) == (True, 240)          # 24.0 V
    assert bm.ReadTemp(M) == (True, 250)                        # 25.0 degC
    assert bm.GetTimeout(M) == (True, 0.0)
    assert bm.SetTimeout(M, 2.5) and bm.GetTimeout(M) == (True, 2.5)
    assert bm.SetEncM1(M, 123456) and bm.SetEncM2(M, 0xFFFFFF00)     # -256
    ok, enc1, enc2 = bm.GetEncoders(M)
    assert ok and (enc1, enc2) == (123456, 0xFFFFFF00)          # the arm is at rest
    assert bm.ReadEncM1(M)[1] == 123456
    assert bm.ResetEncoders(M) and bm.GetEncoders(M) == (True, 0, 0)
    assert bm.GetSpeeds(M) == (True, 0, 0) and bm.GetISpeeds(M) == (True, 0, 0)
    ok, p, i, d, qpps = bm.ReadM1VelocityPID(M)
    assert ok and (p, i, d) == (8.0, 40.0, 0.0)
    assert qpps == round(24.0 / 0.1 * 2048 / (2 * np.pi))     # no-load speed at 24 V
    assert bm.SetM2VelocityPID(M, 2.5, 0.75, 0.125, 50000)
    assert bm.ReadM2VelocityPID(M) == (True, 2.5, 0.75, 0.125, 50000)
    assert bm.ReadM1VelocityPID(M)[1:4] == (8.0, 40.0, 0.0)    # M1 untouched
    for command in (lambda: bm.SpeedM1(M, 1000), lambda: bm.SpeedM2(M, -1000),
                    lambda: bm.SpeedM1M2(M, 500, -500), lambda: bm.SpeedAccelM1(M, 10000, 800),
                    lambda: bm.SpeedAccelM2(M, 10000, -800),
                    lambda: bm.SpeedAccelM1M2(M, 20000, 0, 0), lambda: bm.DutyM1M2(M, 0, 0)):
        assert command() is True
    assert emu.stats["bad_frames"] == 0 and emu.stats["unknown"] == 0


def signed(value):
    """basicmicro returns GetSpeeds' 32-bit fields unsigned; the device sends int32."""
    return value - (1 << 32) if value >= 1 << 31 else value


def _settle(bm, target, channel=1, limit=4.0):
    """Poll GetSpeeds until the speed stays within 2 % of ``target`` for 0.3 s; the time
    it first entered that band (s after the call), and the speeds seen."""
    start = time.monotonic()
    entered, seen = None, []
    while time.monotonic() - start < limit:
        ok, s1, s2 = bm.GetSpeeds(M)
        assert ok
        speed = signed((s1, s2)[channel - 1])
        seen.append(speed)
        now = time.monotonic() - start
        if abs(speed - target) <= 0.02 * abs(target):
            entered = entered if entered is not None else now
            if now - entered > 0.3:
                return entered, seen
        else:
            entered = None
        time.sleep(0.005)
    raise AssertionError(f"speed did not settle at {target}: last {seen[-5:]}")


@pytest.mark.slow
def test_a_speed_command_settles_with_the_emulated_velocity_pid(device):
    _, bm = device
    target = 4000                                   # counts/s: 1.2 rad/s at joint 1
    assert bm.SpeedM1(M, target)
    settle, _ = _settle(bm, target)
    print(f"SpeedM1 {target} counts/s settled within 2 % after {settle * 1e3:.0f} ms")
    assert bm.SpeedM1(M, -target)                   # and back the other way
    _settle(bm, -target)
    assert bm.DutyM1M2(M, 0, 0)


@pytest.mark.slow
def test_speed_with_acceleration_ramps_the_set_point(device):
    _, bm = device
    accel, target = 4000, 4000                      # 1 s ramp
    assert bm.SpeedAccelM1(M, accel, target)
    started = time.monotonic()
    time.sleep(0.2)
    ok, speed, _ = bm.GetSpeeds(M)
    elapsed = time.monotonic() - started
    assert ok and 0 < speed <= accel * elapsed * 1.1 + 200   # on the ramp, not at target
    settle, _ = _settle(bm, target)
    assert settle > 0.5                             # the ramp takes a second
    assert bm.DutyM1M2(M, 0, 0)


def test_an_unknown_command_is_dropped_whole(device):
    emu, _ = device
    port = serial.Serial(emu.port, 460800, timeout=0.2)
    try:
        read_version = bytes((M, rc.READ_VERSION.code))
        # cmd 170 (neither the RoboClaw manual nor basicmicro has it); its payload holds
        # what would parse as a ReadVersion request
        port.write(bytes((M, 170)) + read_version * 8 + b"\x12\x34")
        assert port.read(64) == b""                 # no reply at all, not a version text
        port.write(read_version)
        reply = port.read(len(rc.VERSION_TEXT) + 2)
        assert rc.decode_reply(M, rc.READ_VERSION, reply) == (rc.VERSION_TEXT,)
    finally:
        port.close()
    assert emu.stats["unknown"] == 1


@pytest.mark.system
def test_hil_emulate_serves_basicmicro_for_its_duration_and_logs(tmp_path):
    port = f"/tmp/hil-pty-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "drives.mcap"
    proc = subprocess.Popen(hil("emulate", "rig_serial", "--set", f"link.serial.port='{port}'",
                                "--duration", "12", "--log", str(log)),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: os.path.exists(port), 60, "the emulated pty")
        bm = Basicmicro(port, 460800, timeout=0.05, retries=3)
        assert bm.Open()
        assert bm.ReadVersion(M)[0]
        assert bm.SpeedM1M2(M, 3000, -3000)
        _settle(bm, 3000, 1, limit=8.0)
        _settle(bm, -3000, 2, limit=2.0)
        bm.close()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    assert proc.returncode == 0, out + err
    assert "stopped: duration reached" in out
    arrays, _, _, summary = read_complete(log)
    assert summary["reason"] == "duration reached"
    assert len(arrays["t"]) > 100 and abs(arrays["u"][-1, 0]) > 0.5    # the PID's voltage
    assert arrays["qd"][-1, 0] > 0.5 and arrays["qd"][-1, 1] < -0.5


def _until(predicate, limit: float, what: str):
    """Poll ``predicate`` (a round trip or a few) until it returns a true value."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
    raise AssertionError(f"not within {limit} s: {what}")


@pytest.mark.system
def test_basicmicro_drives_joint_1_to_a_position_and_the_position_mode_answers():
    """SpeedAccelDeccelPositionM1 against ``hil emulate rig_serial``: the emulated position
    PID and the plant's dynamics bring joint 1 to the commanded count, within the PID's
    deadzone, and it stays there; every command of the position mode and its companions
    (PID set/read, M2, M1M2, buffers, DutyAccel, PWMs, ISpeed, GetStatus) answers."""
    port = f"/tmp/hil-pty-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(hil("emulate", "rig_serial", "--set", f"link.serial.port='{port}'",
                                "--duration", "120"),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: os.path.exists(port), 60, "the emulated pty")
        bm = Basicmicro(port, 460800, timeout=0.05, retries=1)   # 1 s per unanswered try
        assert bm.Open()
        deadzone, min_pos, max_pos = 5, -50000, 50000               # counts
        assert bm.SetM1PositionPID(M, 20.0, 0.5, 4.0, 4000, deadzone, min_pos, max_pos)
        assert bm.SetM2PositionPID(M, 10.0, 0.0, 2.5, 0, 8, 0, 0)
        # basicmicro reads every field unsigned: MinPos -50000 comes back as 2^32 - 50000
        assert bm.ReadM1PositionPID(M) == (True, 20.0, 0.5, 4.0, 4000, deadzone,
                                           min_pos & 0xFFFFFFFF, max_pos)
        assert bm.ReadM2PositionPID(M) == (True, 10.0, 0.0, 2.5, 0, 8, 0, 0)
        assert bm.ResetEncoders(M) and bm.GetEncoders(M) == (True, 0, 0)

        target = 1630                             # counts: 0.5 rad at joint 1 (3260 counts/rad)
        assert bm.SpeedAccelDeccelPositionM1(M, 4000, 2000, 4000, target, 1)
        assert bm.ReadBuffers(M) == (True, 0, rc.BUFFER_IDLE)   # M1 executing, M2 idle
        ok, speed, backwards = bm.ReadISpeedM1(M)
        assert ok and backwards == 0
        _until(lambda: bm.ReadBuffers(M)[1] == rc.BUFFER_IDLE, 10.0, "the profile's end")
        settled = []

        def at_target():
            count = signed(bm.GetEncoders(M)[1])
            settled.append(count)
            return len(settled) > 20 and all(abs(c - target) <= deadzone for c in settled[-20:])
        _until(at_target, 15.0, f"joint 1 within {deadzone} counts of {target}: {settled[-5:]}")
        status = bm.GetStatus(M)
        assert status[0] and status[2] == 0                       # no error bits
        assert status[3:7] == (250, 250, 240, 50)                 # temperatures, batteries
        assert abs(signed(status[11]) - target) <= deadzone         # encoder 1
        position_error = status[19] - (1 << 16) if status[19] >= 1 << 15 else status[19]
        assert abs(position_error) <= deadzone
        print(f"joint 1 at {settled[-1]} counts for target {target} (deadzone {deadzone})")

        # M2 at once, then one buffered behind it: one waiting; both done: idle
        assert bm.SpeedAccelDeccelPositionM2(M, 4000, 2000, 4000, 300, 1)
        assert bm.SpeedAccelDeccelPositionM2(M, 4000, 2000, 4000, 0, 0)
        assert bm.ReadBuffers(M) == (True, rc.BUFFER_IDLE, 1)      # M1 done, M2: one waits
        _until(lambda: bm.ReadBuffers(M)[2] == rc.BUFFER_IDLE, 10.0, "M2's two moves")
        assert bm.SpeedAccelDeccelPositionM1M2(M, 4000, 2000, 4000, 0, 4000, 2000, 4000, 300, 1)
        assert bm.ReadBuffers(M) == (True, 0, 0)                   # both moving (~1 s)

        # duty with acceleration: from 0 the PWM ramps at 6000 duty/s to 3000 (0.5 s)
        assert bm.DutyM1M2(M, 0, 0) and bm.ReadPWMs(M) == (True, 0, 0)
        assert bm.DutyAccelM1(M, 6000, 3000) and bm.DutyAccelM2(M, 6000, -3000)
        ok, pwm1, pwm2 = bm.ReadPWMs(M)
        assert ok and 0 <= pwm1 < 3000 and -3000 < pwm2 <= 0
        _until(lambda: bm.ReadPWMs(M) == (True, 3000, -3000), 5.0, "the duty ramps' end")
        status = bm.GetStatus(M)
        assert (status[7], status[8]) == (3000, (-3000) & 0xFFFF)     # basicmicro: unsigned
        ok, speed, backwards = bm.ReadISpeedM2(M)
        assert ok and (backwards == 1) == (signed(speed) < 0)
        assert bm.DutyM1M2(M, 0, 0)
        bm.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out + err          # Ctrl-C, as hil run
