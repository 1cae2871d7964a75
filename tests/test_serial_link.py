"""The packet-serial link against the emulated RoboClaw drives on a real pty, with real pyserial.

Most tests run the emulator in lockstep (one plant step per tick of the link) with
reply timeouts far above any VM stall, so that no result depends on timing. The
fault tests shorten the timeouts where a fault has to run them out.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import re
import time

import numpy as np
import pytest
import serial
from hilrig.controllers.factory import controller_from_config
from hilrig.devices.roboclaw_drive import DEFAULT_MAX_CURRENT, RoboClawEmulator, serve
from hilrig.drivers import roboclaw_codec as rc
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import DriveFault, LinkError, LinkTimeout, Measurement
from hilrig.drivers.serial_link import SerialLink
from hilrig.plant.factory import plant_from_config
from hilrig.settings.config import ConfigError
from hilrig.schema import Config

from conftest import config, replaced

LOCKSTEP = ("emulator.mode=lockstep",)
PATIENT = ("link.serial.timeout=0.5", "link.serial.budget=2.0", "link.timeout=5.0")
IMPATIENT = ("link.serial.timeout=0.1", "link.serial.budget=1.0")
LOST_AFTER = "link.timeout=0.25"
SLOW_PTY = ("link.serial.timeout=0.5", "link.serial.budget=1.0")
SEQUENTIAL = "link.serial.pipeline=false"   # one request, one reply (rig_serial pipelines)
TRACKING_BOUND = 1e-3       # rad: serial run vs in-process run, at every tick
TARGET_BOUND = 0.02         # rad: |q - target| after the 3 s run, both runs


def rig(*overrides: str) -> Config:
    return config("rig_serial", *LOCKSTEP, *PATIENT, *overrides)


@pytest.fixture
def emulator():
    emu = RoboClawEmulator(rig()).start()
    yield emu
    emu.stop()
    assert emu.error is None


@pytest.fixture
def connect():
    """connect(emulator, *overrides) -> an open SerialLink to it; closed after the test."""
    links = []

    def make(emu: RoboClawEmulator, *overrides: str) -> SerialLink:
        cfg = rig(*overrides)
        cfg = replaced(cfg, "link.serial", port=emu.port)
        # up to three bring-ups: on a busy host the emulator's thread, starved, once left
        # all three 0.1 s set-up exchanges of one unanswered (not these tests' subject)
        for attempt in range(3):
            link = SerialLink.from_config(cfg)
            links.append(link)
            try:
                link.open()
                return link
            except LinkError as exc:
                if attempt == 2 or "no RoboClaw answers" not in str(exc):
                    raise

    yield make
    for link in links:
        link.safe_stop()
        link.close()


def pd_loop(link, cfg: dict, ticks: int, before_tick=None, record=None) -> np.ndarray:
    """read -> PD (controllers.law) -> write, ``ticks`` times; returns the measured q per tick."""
    gains = controller_from_config(cfg, link.command_unit)
    meas, u = Measurement(link.n_axes), np.zeros(link.n_axes)
    q = np.zeros((ticks, link.n_axes)) if record is None else record
    for k in range(ticks):
        if before_tick is not None:
            before_tick(k)
        assert link.read(meas)
        gains(meas.t, meas.pos, meas.vel, meas.current, u)
        link.write(u)
        q[k] = meas.pos
    return q


# -- closed loop ----------------------------------------------------------------------

def test_pd_tracks_its_target_through_the_serial_link_like_the_in_process_run(emulator,
                                                                                   connect):
    cfg = rig()
    ticks = int(round(cfg.sim.duration / cfg.sim.dt))
    target = np.array(cfg.controller.target)
    q_serial = pd_loop(connect(emulator), cfg, ticks)
    with PlantLink(plant_from_config(cfg), cfg.sim.dt) as inprocess:
        q_inprocess = pd_loop(inprocess, cfg, ticks)
    # every difference comes from quantisation: encoder counts (3.1e-4 rad at the joint),
    # speeds in whole counts/s, duty steps of 24 V / 32767, currents in 10 mA
    assert np.abs(q_serial - q_inprocess).max() < TRACKING_BOUND
    assert np.abs(q_serial[-1] - target).max() < TARGET_BOUND
    assert np.abs(q_inprocess[-1] - target).max() < TARGET_BOUND
    assert np.abs(q_serial[0]).max() == 0.0
    assert emulator.stats["steps"] == ticks - 1       # lockstep: one step per tick after the first


def patient_link(port: str, **settings) -> SerialLink:
    """The rig's link with reply timeouts no VM stall reaches (free-mode tests)."""
    return SerialLink(port, [(0x80, 1), (0x80, 2), (0x81, 1)], 2048, 10.0, timeout=0.05,
                      budget=0.1, lost_after=5.0, **settings)


def test_pd_in_free_mode_moves_every_joint_towards_its_target():
    cfg = config("rrr3_pd", "link.type=serial", "sim.dt=0.01")          # emulator.mode = "free": the plant keeps real time
    gains = controller_from_config(cfg, SerialLink.command_unit)
    target = np.array(cfg.controller.target)
    with RoboClawEmulator(cfg) as emu:
        with patient_link(emu.port) as link:
            meas, u = Measurement(3), np.zeros(3)
            fresh = 0
            while fresh < 50:
                if link.read(meas):
                    fresh += 1
                    gains(meas.t, meas.pos, meas.vel, meas.current, u)
                link.write(u)
                time.sleep(cfg.sim.dt)
        steps = emu.stats["steps"]
    assert emu.error is None and steps >= 50
    assert np.all(np.abs(target - meas.pos) < 0.75 * np.abs(target))


# -- units and conversions ------------------------------------------------------------

def test_open_reads_the_battery_and_configures_each_drive(emulator, connect):
    link = connect(emulator)
    assert list(link.supply) == [24.0, 24.0, 24.0]
    first, second = emulator.controllers[0x80], emulator.controllers[0x81]
    assert first.serial_timeout == pytest.approx(0.5)
    assert second.serial_timeout == pytest.approx(0.5)
    assert first.max_current == [4.0, 4.0]
    assert second.max_current == [4.0, DEFAULT_MAX_CURRENT]   # 0x81 M2 drives no joint
    assert first.duty == [0, 0] and second.duty == [0, 0]


@pytest.mark.parametrize("supply, volts, duties", [
    (0.0, [12.0, -6.0, 0.0], [16384, -8192, 0]),          # measured 24 V battery
    (12.0, [12.0, -6.0, 3.0], [32767, -16384, 8192]),     # configured 12 V supply
    (0.0, [100.0, -100.0, 1e-6], [32767, -32767, 0]),     # clamped to +-100 %
])
def test_volts_become_duty_and_duty_becomes_plant_volts(emulator, connect, supply, volts,
                                                        duties):
    link = connect(emulator, f"link.serial.supply_voltage={supply}")
    meas = Measurement(3)
    assert link.read(meas)
    link.write(np.array(volts))
    assert emulator.controllers[0x80].duty == duties[:2]
    assert emulator.controllers[0x81].duty == [duties[2], 0]
    assert link.read(meas)                     # lockstep: the plant steps with those duties
    held = emulator.plant.held
    assert np.allclose(held, np.array(duties) / 32767 * 24.0, rtol=0, atol=1e-12)


def test_non_finite_command_is_refused_with_the_joint_named(emulator, connect):
    link = connect(emulator)
    with pytest.raises(LinkError, match="joint 2: command nan V is not finite"):
        link.write(np.array([0.0, math.nan, 0.0]))


def test_positions_speeds_and_currents_arrive_quantised_in_joint_units(emulator, connect):
    link = connect(emulator)
    q, qd = np.array([0.3, -1.2, 2.5]), np.array([0.5, -0.25, 0.0])
    emulator.set_state(q, qd)
    meas = Measurement(3)
    assert link.read(meas)
    counts_per_rad = 2048 * 10 / (2 * np.pi)
    assert np.allclose(meas.pos, np.round(q * counts_per_rad) / counts_per_rad, rtol=0,
                       atol=1e-12)
    assert np.allclose(meas.vel, np.round(qd * counts_per_rad) / counts_per_rad, rtol=0,
                       atol=1e-12)
    current = -0.1 * 10 * qd / 3.0             # zero volts: i = -K_e r qd / R_a
    assert np.allclose(meas.current, np.round(current * 100) / 100, rtol=0, atol=1e-12)


def test_encoder_counts_unwrap_across_zero_and_across_int32(emulator, connect):
    link = connect(emulator)
    counts_per_rad = 2048 * 10 / (2 * np.pi)
    meas = Measurement(3)
    for counts in ([-100, 5, 0], [100, 5, 0], [2 ** 31 - 100, 5, 0], [2 ** 31 + 100, 5, 0],
                   [2 ** 32 + 7, 5, 0]):
        emulator.set_state(np.array(counts) / counts_per_rad)
        assert link.read(meas)
        assert np.allclose(meas.pos * counts_per_rad, counts, rtol=0, atol=1e-3)


def read_once(*overrides: str) -> Measurement:
    """One measurement of the rig at rest at q = [0.3, -1.2, 2.5] rad from a fresh emulator."""
    with RoboClawEmulator(rig(*overrides)) as emu:
        cfg = rig(*overrides)
        cfg = replaced(cfg, "link.serial", port=emu.port)
        with SerialLink.from_config(cfg) as link:
            emu.set_state(np.array([0.3, -1.2, 2.5]))
            meas = Measurement(3)
            assert link.read(meas)
    assert emu.error is None
    return meas


def test_sensor_noise_is_seeded():
    noise = ("emulator.serial.position_noise=5.0", "emulator.serial.speed_noise=50.0",
             "emulator.serial.current_noise=0.05")
    clean = read_once()
    first, again = read_once(*noise), read_once(*noise)
    other = read_once(*noise, "emulator.serial.seed=7")
    assert np.array_equal(first.buffer[1:], again.buffer[1:])
    assert not np.array_equal(first.buffer[1:], other.buffer[1:])
    counts_per_rad = 2048 * 10 / (2 * np.pi)
    assert 0 < np.abs(first.pos - clean.pos).max() * counts_per_rad < 5 * 5.0
    assert np.all(first.vel != 0.0) and np.all(first.current != 0.0)


@pytest.mark.slow
def test_emulated_latency_delays_every_reply():
    # 50 ms latency against a 10 ms reply timeout: nothing arrives in time
    cfg = rig("emulator.serial.latency=0.05", "link.serial.timeout=0.01", SEQUENTIAL)
    with RoboClawEmulator(cfg) as emu:
        cfg = replaced(cfg, "link.serial", port=emu.port)
        with SerialLink.from_config(cfg) as link:     # open's exchanges wait 0.1 s each
            assert link.read(Measurement(3)) is False
            assert "ReadEncM1 (cmd 16) at 0x80: no reply within 10.00 ms" in link.last_error
    # the same latency against the 0.5 s timeout of the other tests
    assert read_once("emulator.serial.latency=0.05").pos[0] == pytest.approx(0.3, abs=2e-4)


def test_scheduled_jams_of_the_config_start_in_the_emulated_plant():
    cfg = rig("faults.jam.joint=3", "faults.jam.t1=0.1", "faults.jam.duration=0.02")
    with RoboClawEmulator(cfg) as emu:
        cfg = replaced(cfg, "link.serial", port=emu.port)
        with SerialLink.from_config(cfg) as link:
            q = pd_loop(link, cfg, 25)
    assert np.ptp(q[13:, 2]) == 0.0 and np.ptp(q[:11, 2]) > 0.0     # blocked from 0.12 s
    assert np.ptp(q[13:, 0]) > 0.0


# -- faults on the wire ---------------------------------------------------------------

def test_one_bad_crc_is_retried_and_the_tick_stays_fresh(emulator, connect):
    link = connect(emulator, *IMPATIENT)
    meas = Measurement(3)
    emulator.corrupt_replies(1)
    assert link.read(meas)
    assert link.failed_exchanges == 1 and link.stale_reads == 0
    assert "ReadEncM1 (cmd 16) at 0x80: bad CRC, received" in link.last_error


@pytest.mark.parametrize("inject, cause", [
    ("corrupt_replies", r"ReadEncM1 \(cmd 16\) at 0x80: bad CRC"),
    ("truncate_replies", r"ReadEncM1 \(cmd 16\) at 0x80: truncated reply, 3 of 7 bytes"),
    ("drop_replies", r"ReadEncM1 \(cmd 16\) at 0x80: no reply within"),
])
def test_a_read_that_fails_every_retry_is_stale_and_keeps_the_measurement(emulator, connect,
                                                                           inject, cause):
    link = connect(emulator, *IMPATIENT, SEQUENTIAL)
    meas = Measurement(3)
    emulator.set_state(np.array([0.1, 0.2, 0.3]))
    assert link.read(meas)
    before = meas.buffer.copy()
    getattr(emulator, inject)(2)               # the attempt and its one retry
    emulator.set_state(np.array([0.4, 0.5, 0.6]))
    assert link.read(meas) is False
    assert np.array_equal(meas.buffer, before, equal_nan=True)
    assert link.stale_reads == 1 and link.failed_exchanges == 2
    assert re.search(cause, link.last_error)
    assert link.read(meas)                     # the next tick is fresh again
    assert meas.pos[0] == pytest.approx(0.4, abs=2e-4)


def test_a_reply_that_comes_after_its_attempt_gave_up_fails_no_other_exchange(emulator,
                                                                                connect):
    """The first ReadEncM1 is answered 0.45 s late, after its 0.3 s attempt timed out and
    the retry went out: its reply answers the retry, and the retry's own reply, late now,
    is skipped by ReadSpeedM1 instead of being taken for its reply (a bad CRC, whose retry's
    reply came late in turn: on a busy host every tick failed that way until the link was
    lost; bench/bench_rigs.py)."""
    link = connect(emulator, "link.serial.timeout=0.3", "link.serial.retries=1", SEQUENTIAL)
    meas = Measurement(3)
    emulator.set_state(np.array([0.1, 0.2, 0.3]))
    assert link.read(meas)
    emulator.delay_replies(1, 0.45)
    assert link.read(meas)
    assert link.failed_exchanges == 1 and "ReadEncM1 (cmd 16) at 0x80: no reply" in \
        link.last_error
    assert link.crc_errors == 0 and link.late_bytes == rc.READ_ENC_M1.reply_length
    assert meas.pos == pytest.approx([0.1, 0.2, 0.3], abs=2e-4)
    for _ in range(3):
        assert link.read(meas)
        link.write(np.zeros(3))
    assert link.failed_exchanges == 1 and link.failed_writes == 0


def test_a_pipelined_read_waits_one_round_trip_per_controller_not_one_per_request(
        emulator, connect):
    """Every reply 0.12 s after its request, as a busy host's pty may deliver them
    (docs/RIGPC.md): one request after another, the ten of a read need 1.2 s and the read
    fails its 1 s budget; pipelined (rig_serial), the two controllers' batches 0.24 s. The
    reply timeout (0.5 s) is above the delay: no attempt is repeated, no reply is late."""
    meas = Measurement(3)
    emulator.set_state(np.array([0.1, 0.2, 0.3]))
    pipelined = connect(emulator, *SLOW_PTY)
    assert pipelined.pipeline
    emulator.latency = 0.12                    # from now on (the set-up answered at once)
    assert pipelined.read(meas)
    assert meas.pos == pytest.approx([0.1, 0.2, 0.3], abs=2e-4)
    assert pipelined.failed_exchanges == 0
    pipelined.close()
    emulator.latency = 0.0
    sequential = connect(emulator, *SLOW_PTY, SEQUENTIAL)
    emulator.latency = 0.12
    assert sequential.read(meas) is False
    assert "at 0x81" in sequential.last_error  # 0x80's six replies took 0.72 s of the 1 s
    assert sequential.failed_exchanges == 1


def test_a_pipelined_read_names_the_reply_that_failed(emulator, connect):
    link = connect(emulator, *IMPATIENT)
    assert link.read(Measurement(3))
    emulator.corrupt_replies(1)                # ReadEncM1's reply in 0x80's batch
    assert link.read(Measurement(3))           # the batch is repeated
    assert link.failed_exchanges == 1 and link.crc_errors == 1
    assert "ReadEncM1 (cmd 16) at 0x80: bad CRC" in link.last_error


def test_a_nack_on_a_duty_command_is_retried(emulator, connect):
    link = connect(emulator, *IMPATIENT)
    assert link.read(Measurement(3))
    emulator.corrupt_replies(1)                # the ACK of DutyM1M2 at 0x80 becomes 0x00
    link.write(np.array([6.0, 6.0, 6.0]))
    assert "DutyM1M2 (cmd 34) at 0x80: expected ACK 0xFF, got 0x00" in link.last_error
    assert link.failed_writes == 0 and emulator.controllers[0x80].duty == [8192, 8192]


def test_an_unacknowledged_write_leaves_that_drive_on_its_old_duty(emulator, connect):
    link = connect(emulator, *IMPATIENT)
    assert link.read(Measurement(3))
    emulator.drop_replies(2)                   # 0x80 hears neither the command nor its retry
    link.write(np.array([6.0, 6.0, 6.0]))
    assert link.failed_writes == 1
    assert "DutyM1M2 (cmd 34) at 0x80: no reply within" in link.last_error
    assert emulator.controllers[0x80].duty == [0, 0]
    assert emulator.controllers[0x81].duty == [8192, 0]


def test_a_silent_drive_is_a_link_timeout_naming_the_last_error(emulator, connect):
    link = connect(emulator, *IMPATIENT, LOST_AFTER)
    meas = Measurement(3)
    assert link.read(meas)
    emulator.drop_replies(10 ** 6)
    with pytest.raises(LinkTimeout) as info:
        for _ in range(20):                    # each read takes 2 x 0.1 s; lost after 0.25 s
            assert link.read(meas) is False
    message = str(info.value)
    assert "no complete measurement for" in message and "link.timeout = 0.25 s" in message
    assert "ReadEncM1 (cmd 16) and 5 more requests at 0x80: no reply within" in message


def test_a_silent_drive_makes_writes_time_out_too(emulator, connect):
    link = connect(emulator, *IMPATIENT, LOST_AFTER)
    emulator.drop_replies(10 ** 6)
    with pytest.raises(LinkTimeout, match=r"no acknowledged duty command for .* last error: "
                                          r"Duty\w+ \(cmd 3\d\) at 0x8\d: no reply"):
        for _ in range(20):
            link.write(np.zeros(3))


def test_the_budget_caps_every_wait(emulator, connect):
    link = connect(emulator, "link.serial.timeout=0.2", "link.serial.budget=0.05")
    emulator.drop_replies(10 ** 6)
    assert link.read(Measurement(3)) is False
    # one attempt, cut at the 50 ms budget instead of the 200 ms reply timeout; no retry fits
    assert re.search(r"no reply within (4\d|50)\.\d\d ms", link.last_error)
    assert link.failed_exchanges == 1


def test_bad_crc_and_truncated_requests_get_no_reply(emulator):
    """The device side: what the emulated drive does with bad frames from the controller."""
    with serial.Serial(emulator.port, 460800, timeout=0.5) as raw:
        bad = bytearray(rc.encode_request(0x80, rc.DUTY_M1, 1000))
        bad[-1] ^= 1
        raw.write(bytes(bad) + rc.encode_request(0x80, rc.READ_MAIN_BATTERY))
        assert raw.read(4) == rc.encode_reply(0x80, rc.READ_MAIN_BATTERY, 240)
        assert emulator.stats["bad_frames"] == 1
        assert "DutyM1 (cmd 32) at 0x80: bad CRC" in emulator.last_bad_frame
        raw.write(rc.encode_request(0x80, rc.DUTY_M1, 1000)[:3])    # then silence
        time.sleep(0.05)                                            # > the 10 ms packet gap
        raw.write(rc.encode_request(0x81, rc.READ_MAIN_BATTERY))
        assert raw.read(4) == rc.encode_reply(0x81, rc.READ_MAIN_BATTERY, 240)
        assert emulator.stats["discarded"] == 1
        raw.write(bytes((0x85, 24)) + bytes((0x80, 99)))            # nobody at 0x85; no cmd 99
        raw.timeout = 0.1
        assert raw.read(1) == b""
    assert emulator.controllers[0x80].duty == [0, 0]


# -- drive faults, jams, safe stop ------------------------------------------------------

@pytest.mark.parametrize("address, bits, joint, text", [
    (0x80, 0x00000080, 2, "M2 driver fault"),
    (0x80, 0x00000008, 1, "main battery voltage too high"),
    (0x81, 0x00001001, 3, "E-stop, M1 current error"),
])
def test_status_errors_raise_drive_faults_in_plain_language(emulator, connect, address, bits,
                                                            joint, text):
    link = connect(emulator)
    assert link.read(Measurement(3))
    emulator.set_errors(address, bits)
    with pytest.raises(DriveFault) as info:
        link.read(Measurement(3))
    fault = info.value
    assert (fault.axis, fault.code) == (joint, bits)
    assert fault.message == f"{text} (RoboClaw at 0x{address:02X} on {emulator.port})"
    assert str(fault).startswith(f"axis {joint}: drive fault 0x{bits:04X}: {text}")


def test_warnings_other_than_over_current_are_kept_not_raised(emulator, connect):
    link = connect(emulator)
    emulator.set_errors(0x81, 0x00080000)        # main battery voltage low warning
    assert link.read(Measurement(3))
    assert link.status[0x81] == 0x00080000 and link.status[0x80] == 0


def test_a_jam_behind_the_drive_becomes_an_over_current_fault(emulator, connect):
    cfg = rig()
    link = connect(emulator)
    q = np.full((300, 3), np.nan)

    def jam_at_tick_10(k):
        if k == 10:
            emulator.jam(1, 0.02)

    with pytest.raises(DriveFault) as info:
        pd_loop(link, cfg, 300, before_tick=jam_at_tick_10, record=q)
    fault = info.value
    assert fault.axis == 1 and fault.code & rc.OVERCURRENT_WARNING[1]
    assert "M1 over-current warning on 20 consecutive reads (RoboClaw at 0x80, limit 4 A): " \
           "the motor is stalled or its joint is jammed" == fault.message
    reached = np.flatnonzero(~np.isnan(q[:, 0]))[-1]
    assert 10 + 19 <= reached < 60                         # 20 reads after the jam at tick 10
    assert np.ptp(q[14:reached + 1, 0]) == 0.0             # joint 1 blocked after the jam
    assert np.ptp(q[14:reached + 1, 2]) > 0.05             # joint 3 still moving
    link.safe_stop()
    assert emulator.controllers[0x80].duty == [0, 0]


def test_safe_stop_zeroes_every_motor_and_blocks_commands(emulator, connect):
    link = connect(emulator)
    pd_loop(link, rig(), 5)
    assert emulator.controllers[0x80].duty != [0, 0]
    link.safe_stop()
    assert emulator.controllers[0x80].duty == [0, 0] and emulator.controllers[0x81].duty == [0, 0]
    link.write(np.array([6.0, -6.0, 6.0]))
    assert emulator.controllers[0x80].duty == [0, 0] and emulator.controllers[0x81].duty == [0, 0]
    link.safe_stop()
    link.close()
    link.close()
    link.safe_stop()                           # idempotent, never raises, even when closed


def test_the_drive_timeout_stops_the_motors_when_packets_stop():
    with RoboClawEmulator(config("rig_serial")) as emu:     # free mode, real time
        with patient_link(emu.port, drive_timeout=0.1) as link:
            link.write(np.array([6.0, 6.0, 6.0]))
            assert emu.controllers[0x80].duty == [8192, 8192]
            time.sleep(0.4)                    # no packets for 4 x the drive timeout
            assert emu.controllers[0x80].duty == [0, 0]
            assert emu.controllers[0x81].duty == [0, 0]


# -- the link's own failures ------------------------------------------------------------

def test_a_missing_controller_is_named_at_open(emulator):
    cfg = rig("link.serial.axes=[[128, 1], [128, 2], [131, 1]]")
    cfg = replaced(cfg, "link.serial", port=emulator.port)
    link = SerialLink.from_config(cfg)
    with pytest.raises(LinkError, match=f"no RoboClaw answers at address 0x83 on "
                                        f"{emulator.port}: ReadMainBattery \\(cmd 24\\) at "
                                        f"0x83: no reply within"):
        link.open()
    link.safe_stop()


def test_a_missing_port_is_named_at_open():
    cfg = rig("link.serial.port='/nonexistent/ttyACM9'")
    with pytest.raises(LinkError, match="cannot open serial port /nonexistent/ttyACM9"):
        SerialLink.from_config(cfg).open()


def test_the_emulator_going_away_is_a_link_error_not_a_hang(connect):
    emu = RoboClawEmulator(rig()).start()
    link = connect(emu)
    assert link.read(Measurement(3))
    emu.stop()
    with pytest.raises(LinkError, match=f"{emu.port}: (write|read) failed"):
        link.read(Measurement(3))


@pytest.mark.system
def test_serve_runs_the_drives_in_their_own_process(tmp_path):
    path = str(tmp_path / "roboclaw")
    cfg = rig(f"link.serial.port='{path}'")
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(target=serve, args=(cfg, path, stop))
    process.start()
    try:
        for _ in range(600):                   # the link appears once the plant is compiled
            if os.path.islink(path) or not process.is_alive():
                break
            time.sleep(0.05)
        with SerialLink.from_config(cfg) as link:
            meas = Measurement(3)
            assert link.read(meas) and np.array_equal(meas.pos, np.zeros(3))
    finally:
        stop.set()
        process.join(30)
    assert process.exitcode == 0
    assert not os.path.lexists(path)


# -- config --------------------------------------------------------------------------

def test_serial_defaults_put_two_motors_on_each_controller():
    cfg = config("rrr3_pd", "link.type=serial", "sim.dt=0.01")
    assert cfg.link.serial.axes == ((0x80, 1), (0x80, 2), (0x81, 1))
    assert cfg.link.serial.counts_per_rev == (2048.0,) * 3
    assert cfg.emulator.serial.battery_voltage == 24.0
    # a link's table is in the resolved config where the config uses that link
    assert not hasattr(config("serial3_free").link, "serial")


@pytest.mark.parametrize("override, message", [
    ("link.serial.baudrate=9600", "unknown key 'link.serial.baudrate' (did you mean "
                                  "'link.serial.baud'?)"),
    ("emulator.serial.noise=1", "unknown key 'emulator.serial.noise'"),
    ("link.serial.baud=1000", "link.serial.baud: must be one of"),
    ("link.serial.axes=[[128, 1], [128, 2]]", "link.serial.axes: expected 3 pairs"),
    ("link.serial.axes=[[128, 1], [128, 2], [129]]",
     "link.serial.axes[2]: expected a pair of integers"),
    ("link.serial.axes=[[128, 1], [128, 2], [136, 1]]",
     "link.serial.axes[2]: address must be 128..135"),
    ("link.serial.axes=[[128, 1], [128, 3], [129, 1]]",
     "link.serial.axes[1]: channel must be 1 (M1) or 2 (M2), got 3"),
    ("link.serial.axes=[[128, 1], [128, 2], [128, 1]]",
     "link.serial.axes[2]: motor M1 of 0x80 is already mapped to another joint"),
    ("link.serial.drive_timeout=0.25", "link.serial.drive_timeout: must be a multiple of 0.1 s"),
    ("link.serial.drive_timeout=30", "link.serial.drive_timeout: must be a multiple of 0.1 s "
                                     "up to 25.5 s"),
    ("link.serial.budget=0.006", "link.serial.budget: a read and a write may take 2 x 0.006 s, "
                                 "more than one tick (sim.dt = 0.01 s)"),
    ("plant.drive=torque", "link.type: 'serial' drives DC motors by duty cycle"),
    ("link.serial.counts_per_rev=0", "link.serial.counts_per_rev[0]: must be > 0"),
])
def test_bad_serial_config_names_the_key_and_the_reason(override, message):
    with pytest.raises(ConfigError) as info:
        config("rig_serial", override)
    assert message in str(info.value)


def test_speed_mode_holds_the_speed_the_voltage_stands_for(emulator, connect):
    """link.serial.command = "speed": SpeedM1M2 with duty x QPPS / 32767; the drive's
    velocity PID holds joint 1 at u / supply x (no-load motor speed) / r = 2.4 rad/s for
    2.4 V, where the duty-driven motor would settle lower (back-EMF and damping)."""
    link = connect(emulator, "link.serial.command=speed",
                   "link.serial.overcurrent_ticks=0")   # the PID accelerates at > 4 A
    qpps = 24.0 / 0.1 * 2048 / (2 * math.pi)            # battery / K_e, in counts/s
    assert np.allclose(link.qpps, round(qpps))
    meas, u = Measurement(3), np.array([2.4, 0.0, 0.0])
    for _ in range(300):                                # 3 s
        assert link.read(meas)
        link.write(u)
    assert meas.vel[0] == pytest.approx(2.4 * round(qpps) / qpps, abs=0.02)
    assert np.abs(meas.vel[1:]).max() < 0.02            # speed 0: held, not free
