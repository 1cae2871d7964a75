"""`hil estop --category 0|1|2` (IEC 60204-1 stop categories) on each link: the joints come
to rest within safety.stop_time for 1 and 2, the drives are disabled for 0 and 1, and the
position is held for 2."""
import signal
import subprocess
import threading
import uuid

import numpy as np
import pytest
from hilrig.controllers.factory import controller_from_config
from hilrig.devices.cia402_drive import EmulatedDrives
from hilrig.devices.roboclaw_drive import RoboClawEmulator
from hilrig.drivers.canopen_link import CanopenLink
from hilrig.drivers.cia402 import State
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import Measurement
from hilrig.drivers.serial_link import SerialLink
from hilrig.remote.fault import send_estop
from hilrig.rt.loop import LinkLoop
from rt_helpers import (
    ROOT,
    LENIENT_CONTROL,
    LENIENT_EMULATOR,
    EmulatorProcess,
    endpoint,
    estop_running_controller,
    hil,
    read_complete,
    ticks_logged,
    wait_for,
)
from conftest import config, replaced

STOP_TIME = 0.3        # s, safety.stop_time of these tests
AT_REST = 1e-3         # rad/s: |qd| at and after the stop time


@pytest.fixture(autouse=True)
def _no_emulator_left():
    yield
    EmulatorProcess.reap()


class _EStopAt:
    """A LinkLoop hook: once the loop has published ``rows`` rows, a thread sends `hil
    estop`'s frame of ``category`` to the loop's e-stop endpoint (remote.fault.send_estop)."""

    def __init__(self, endpoint, rows, category):
        self.endpoint, self.rows, self.category = endpoint, rows, category
        self.tick = None

    def start(self, loop):
        def run():
            wait_for(lambda: loop.telemetry.head[0] >= self.rows, 120, "the controller's ticks")
            self.tick = send_estop(self.endpoint, 10.0, self.category)
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self):
        self.thread.join(30)


def _run_with_estop(tmp_path, category, *overrides):
    cfg = config("rig_inprocess", "sim.duration=2.0", *overrides)
    estop = f"ipc:///tmp/hil-estop-{uuid.uuid4().hex[:8]}"
    hook = _EStopAt(estop, 500, category)
    result = LinkLoop(cfg, PlantLink.from_config(cfg), tmp_path / "ctl.mcap", estop,
                      hooks=[hook]).run()
    assert hook.tick is not None
    return cfg, result, read_complete(tmp_path / "ctl.mcap")


def _stop_rows(arrays, events, ticks_to_rest):
    """The rows of a controller's log from the e-stop on, from the stop time on, and the
    e-stop's event."""
    stop = next(e for e in events if e["kind"] == "estop")
    tick = arrays["tick"]
    return tick >= stop["tick"], tick >= stop["tick"] + ticks_to_rest, stop


@pytest.mark.parametrize("category", [1, 2])
def test_controlled_stops_on_the_in_process_link(tmp_path, category):
    """The arm moving on its quintic (t = 0.2..1.5 s) is stopped by a category 1 or 2
    e-stop: at rest within stop_time; 1 then ends the run (power removed), 2 holds the
    position to the end of the run."""
    cfg, result, (arrays, events, _, summary) = _run_with_estop(
        tmp_path, category, f"safety.stop_time={STOP_TIME}")
    n_rest = int(round(STOP_TIME / cfg.sim.dt))
    stopping, resting, stop = _stop_rows(arrays, events, n_rest)
    assert stop["category"] == category and result.status == "interrupted"
    qd = arrays["qd"]
    moving = np.abs(qd[stopping][0]).max()
    assert moving > 0.1                                   # it was moving
    if category == 1:
        assert summary["reason"] == "e-stop from the CLI (hil estop): category 1, controlled " \
                                    "stop, then power removed"
        assert arrays["tick"][-1] == stop["tick"] + n_rest - 1    # power removed at the time
        last = arrays["tick"] > arrays["tick"][-1] - 0.1 * n_rest
        assert np.abs(qd[last]).max() < AT_REST           # at rest before the stop time
    else:
        assert summary["reason"].endswith("category 2, controlled stop, power kept (holding): "
                                          "held to the end of the run")
        assert arrays["tick"][-1] == round(cfg.sim.duration / cfg.sim.dt)
        assert np.abs(qd[resting]).max() < AT_REST       # at rest within the stop time ...
        assert np.ptp(arrays["q"][resting], axis=0).max() < 1e-4   # ... and held there


def test_category_0_is_what_hil_estop_always_did(tmp_path):
    cfg, result, (arrays, events, _, summary) = _run_with_estop(tmp_path, 0)
    stopping, _, stop = _stop_rows(arrays, events, 0)
    assert summary["reason"] == "e-stop from the CLI (hil estop)"
    assert not stopping.any()                             # no tick from the e-stop on


@pytest.mark.system
@pytest.mark.parametrize("category", [1, 2])
def test_controlled_stops_of_the_zeromq_emulator_under_hil_control(tmp_path, category):
    """`hil estop --category N` to a `hil control` of `hil emulate`: the emulator's drives
    bring the plant to rest within the stop time; 1 then removes the power (zero input),
    2 holds until the controller leaves."""
    ep = endpoint(tmp_path)
    estop = f"ipc:///tmp/hil-estop-{uuid.uuid4().hex[:8]}"
    # lockstep: one plant step per command, the drives' stop the same on any host (free,
    # paced by the emulator's own clock, a category 1 stop left 3-7 mrad/s at the stop
    # time in 1 run of 4 under a busy loop on each core, and once in CI)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep",
                          *LENIENT_EMULATOR)
    # moving all the time (a sinusoid about 0, the joints a third of a period apart: one
    # of them always faster than 0.15 rad/s), for up to 60 s: the e-stop ends the run,
    # however long a busy host takes to start `hil estop`
    sets = ["--set", f"safety.stop_time={STOP_TIME}", "--set", "sim.duration=60.0",
            "--set", "controller.reference='sinusoid'", "--set", "controller.target=[0.0, 0.0, 0.0]",
            "--set", "controller.amplitude=0.1", "--set", "controller.frequency=0.5",
            "--set", "controller.phase=[0.0, 2.09, 4.19]", *LENIENT_CONTROL]
    log = tmp_path / "ctl.mcap"
    ctl = subprocess.Popen(hil("control", str(ROOT / "configs" / "rig_zmq.toml"), "--connect",
                               ep, "--log", str(log), "--estop-endpoint", estop, *sets),
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # 1 s of ticks logged: the arm is well into its move
        wait_for(lambda: ctl.poll() is not None or ticks_logged(log) > 1000, 300,
                 "the controller's rows")
        assert ctl.poll() is None, ctl.stderr.read()
        stop = estop_running_controller(estop, ctl, "--category", str(category))
        assert f"began a category {category} stop" in stop.stdout
        if category == 2:     # holding until the controller leaves: it leaves (Ctrl-C) once
            # its log holds the stop time and as long again after the e-stop's answer
            held = ticks_logged(log) + 2 * int(round(STOP_TIME / 1e-3))
            wait_for(lambda: ctl.poll() is not None or ticks_logged(log) > held, 120,
                     "the controller's rows while it holds")
            ctl.send_signal(signal.SIGINT)
        ctl.communicate(timeout=60)
    finally:
        if ctl.poll() is None:
            ctl.kill()
    emu.stop()
    assert ctl.returncode == 130
    arrays, events, _, _ = read_complete(tmp_path / "emu.mcap")
    began = next(e for e in events if e["kind"] == "controlled_stop")
    k = int(np.searchsorted(arrays["tick"], began["tick"]))
    rest = k + int(round(STOP_TIME / 1e-3))
    qd = arrays["qd"]
    assert np.abs(qd[k]).max() > 0.05                              # it was moving
    safe = [e for e in events if e["kind"] == "safe_state"]
    if category == 1:     # power removed at the stop time: by the drives, or the BYE
        assert safe[0]["reason"] in ("category 1 stop: the joints at rest, power removed",
                                     "controller said BYE")
        assert rest - 50 <= safe[0]["tick"] <= rest + 50
        assert np.abs(qd[rest - 30:rest - 1]).max() < AT_REST
    else:
        end = int(np.searchsorted(arrays["tick"], safe[0]["tick"]))   # the controller's BYE
        assert np.abs(qd[rest:end]).max() < AT_REST
        assert np.ptp(arrays["q"][rest:end], axis=0).max() < 1e-4


@pytest.mark.parametrize("category", [1, 2])
def test_controlled_stops_of_the_emulated_packet_serial_drives(category):
    """SerialLink.controlled_stop: SpeedAccelM1/M2 to speed 0 at the deceleration that ramps
    each motor from its speed to rest in 0.7 stop_time: the drives' speed set-points reach 0
    then, and their velocity PIDs (stepped at rig_serial's 10 ms, so lagging by about
    0.1 s) bring the joints to rest and hold them with power kept; category 1 then ends
    with safe_stop (zero duty: power removed), as the loop does after the stop time."""
    cfg = config("rig_serial", "emulator.mode=lockstep", "link.serial.timeout=0.5",
                 "link.serial.budget=2.0", "link.timeout=5.0", f"safety.stop_time={STOP_TIME}")
    with RoboClawEmulator(cfg) as emu:
        cfg = replaced(cfg, "link.serial", port=emu.port)
        link = SerialLink.from_config(cfg)
        link.configure()
        link.activate()
        law = controller_from_config(cfg, link.command_unit)
        meas, u = Measurement(3), np.zeros(3)
        for _ in range(200):                     # toward the target: moving
            assert link.read(meas)
            law(meas.t, meas.pos, meas.vel, meas.current, u)
            link.write(u)
        moving = meas.vel.copy()
        accel = np.abs(meas.vel) / link.rad_per_count / (0.7 * STOP_TIME)
        link.controlled_stop(category, STOP_TIME)
        assert link._stop_accel == [max(1, round(a)) for a in accel]
        loops = [emu.controllers[a].velocity[c - 1] for a, c in cfg.link.serial.axes]
        q, qd, setpoints = [], [], []
        for _ in range(int(round(1.5 / cfg.sim.dt))):   # one plant step per tick
            assert link.read(meas)
            link.write(u)                        # not used: the drives stop themselves
            q.append(meas.pos.copy())
            qd.append(meas.vel.copy())
            setpoints.append([loop.setpoint for loop in loops])
        if category == 1:
            link.safe_stop()
        duties = [emu.controllers[a].duty[c - 1] for a, c in cfg.link.serial.axes]
        link.close()
    q, qd, setpoints = np.array(q), np.array(qd), np.array(setpoints)
    assert np.abs(moving).max() > 0.1
    ramp = int(np.ceil(0.7 * STOP_TIME / cfg.sim.dt))
    assert np.all(setpoints[ramp:] == 0.0)                  # the drives' ramps are over
    assert np.all(np.abs(setpoints[ramp // 2]) > 0.2 * np.abs(moving / link.rad_per_count))
    rest = int(round(1.0 / cfg.sim.dt))
    # at rest and held: the PIDs hunt by a few counts/s (3.1e-4 rad/s each at joint 1)
    assert np.abs(qd[rest:]).max() < 1e-2 < 0.1 * np.abs(moving).max()
    assert np.ptp(q[rest:], axis=0).max() < 2e-3
    if category == 1:
        assert duties == [0, 0, 0]                         # power removed
    else:
        assert any(duties)                                 # the PIDs hold against gravity


@pytest.mark.parametrize("category", [1, 2])
def test_controlled_stops_of_the_emulated_cia402_drives(request, category):
    """CanopenLink.controlled_stop: 0x605A = 2 (category 1) or 6 (2) and quick stop; the
    emulated drives ramp the joints to rest within the stop time, then 1 disables the
    drives (SWITCH ON DISABLED), 2 holds them in QUICK STOP ACTIVE."""
    cfg = config("rig_canopen", "link.canopen.interface='virtual'",
                 f"link.canopen.channel='{request.node.name}'", "link.canopen.tpdo_timeout=0.5",
                 "link.canopen.heartbeat_timeout=2.0", f"safety.stop_time={STOP_TIME}")
    with EmulatedDrives(cfg) as drives, CanopenLink.from_config(cfg) as link:
        law = controller_from_config(cfg, link.command_unit)
        meas, u = Measurement(3), np.zeros(3)
        for _ in range(100):                     # 0.2 s toward the target: moving
            link.read(meas)
            law(meas.t, meas.pos, meas.vel, meas.current, u)
            link.write(u)
        moving = np.abs(meas.vel).max()
        link.controlled_stop(category, STOP_TIME)
        n_rest = int(round(STOP_TIME / cfg.sim.dt))
        q, qd = [], []
        for _ in range(n_rest + 100):           # one plant step per SYNC
            fresh = link.read(meas)              # (a stale read on a busy host: a NaN row)
            link.write(u)                        # not used: the drives stop themselves
            q.append(meas.pos.copy() if fresh else np.full(3, np.nan))
            qd.append(meas.vel.copy() if fresh else np.full(3, np.nan))
        states = [drives.state(axis) for axis in (1, 2, 3)]
    q, qd = np.array(q), np.array(qd)
    assert moving > 0.1
    # at rest by the stop time (quantised: 1.5e-4 rad/s per encoder count/s)
    assert np.nanmax(np.abs(qd[n_rest - 10:n_rest])) < 2e-3
    if category == 1:      # then power removed: without a brake the arm sinks under gravity
        assert states == [State.SWITCH_ON_DISABLED] * 3
    else:
        assert np.nanmax(np.abs(qd[n_rest:])) < 2e-3
        assert states == [State.QUICK_STOP_ACTIVE] * 3
        held = q[n_rest:][~np.isnan(q[n_rest:, 0])]
        assert np.ptp(held, axis=0).max() < 2e-3          # held (encoder: 1.5e-4 rad)


def test_a_link_without_a_controlled_stop_stops_at_once_saying_why(tmp_path):
    """A packet-serial drive whose velocity PID is not tuned (QPPS 0) cannot ramp to rest:
    a category 1 e-stop is refused by the link and the loop stops with category 0, the
    reason naming both."""
    cfg = config("rig_serial", "emulator.mode=lockstep", "link.serial.timeout=0.5",
                 "link.serial.budget=2.0", "link.timeout=5.0", "safety.watchdog_ticks=1000",
                 "loop.overrun='catch_up'")
    with RoboClawEmulator(cfg) as emu:
        emu.controllers[0x80].velocity[0].qpps = 0            # the drive as shipped: untuned
        cfg = replaced(cfg, "link.serial", port=emu.port)
        estop = f"ipc:///tmp/hil-estop-{uuid.uuid4().hex[:8]}"
        hook = _EStopAt(estop, 50, 1)
        result = LinkLoop(cfg, SerialLink.from_config(cfg), tmp_path / "ctl.mcap", estop,
                          hooks=[hook]).run()
    assert result.status == "interrupted"
    assert result.reason == ("e-stop from the CLI (hil estop): category 1 refused (RoboClaw at "
                             "0x80 M1: its velocity PID is not tuned (QPPS 0), so it cannot ramp "
                             "to rest): category 0, power removed at once")
    arrays = read_complete(tmp_path / "ctl.mcap")[0]
    assert arrays["tick"][-1] == hook.tick - 1            # no tick from the e-stop on
