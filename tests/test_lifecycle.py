"""configure / activate on every link, against real emulated devices, and in `hil control`'s loop.

After ``configure`` the drives answer and ``read`` gives the true positions, but nothing is
powered: CiA 402 drives stay in SWITCH ON DISABLED, packet-serial motors get zero duty, the
ZeroMQ emulator gets no COMMAND, the in-process plant does not step. ``write`` raises until
``activate``; ``activate`` raises before ``configure``. In the loop the drives are enabled
only after the kernels are warm. Only the order of timestamps is asserted, never a duration.
"""
import threading

import numpy as np
import pytest
from conftest import config, replaced
from hilrig.devices.cia402_drive import EmulatedDrives
from hilrig.devices.roboclaw_drive import RoboClawEmulator
from hilrig.devices.zmq_plant import Emulator
from hilrig.drivers.canopen_link import CanopenLink
from hilrig.drivers.cia402 import State
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import LinkError, LinkTimeout, Measurement
from hilrig.drivers.serial_link import SerialLink
from hilrig.drivers.zmq_link import ZmqLink
from hilrig.rt.loop import LinkLoop
from rt_helpers import endpoint, read_complete

Q0 = [0.1, -0.2, 0.3]          # rad, away from every rig's zero


def canopen_rig(channel, *overrides):
    return config("rig_canopen", "link.canopen.interface='virtual'",
                  f"link.canopen.channel='{channel}'",
                  "link.canopen.tpdo_timeout=0.5", "link.canopen.heartbeat_timeout=2.0",
                  f"plant.q0={Q0}", *overrides)


def serial_rig(port, *overrides):
    return config("rig_serial", f"link.serial.port='{port}'", "emulator.mode=lockstep",
                  "link.serial.timeout=0.5", "link.serial.budget=2.0", "link.timeout=5.0",
                  f"plant.q0={Q0}", *overrides)


def quantised(q, counts_per_rad):
    return np.round(np.asarray(q) * counts_per_rad) / counts_per_rad


# -- CANopen ----------------------------------------------------------------------------------

def test_canopen_configure_reads_the_drives_without_enabling_them_activate_enables():
    cfg = canopen_rig("lifecycle-canopen")
    with EmulatedDrives(cfg) as emu:
        emu.inject_fault(2, 0x4310)                    # a drive left in FAULT: reset, not enabled
        link = CanopenLink.from_config(cfg)
        try:
            link.configure()
            assert [emu.state(a) for a in (1, 2, 3)] == [State.SWITCH_ON_DISABLED] * 3
            meas = Measurement(3)
            assert link.read(meas)
            assert np.allclose(meas.pos, quantised(Q0, 4096 * 10 / (2 * np.pi)), rtol=0,
                               atol=1e-12)
            assert [emu.state(a) for a in (1, 2, 3)] == [State.SWITCH_ON_DISABLED] * 3
            with pytest.raises(LinkError, match=r"write\(\) before activate\(\)"):
                link.write(np.array([30.0, -12.0, 0.0]))
            assert link.enabled_at_ns is None
            link.activate()
            assert [emu.state(a) for a in (1, 2, 3)] == [State.OPERATION_ENABLED] * 3
            assert link.enabled_at_ns is not None
            link.write(np.array([30.0, -12.0, 0.0]))   # N m at the joint
            link.read(meas)                            # the drives apply it at this SYNC
            link.read(meas)
            assert [a.target for a in emu.axes] == [500, -200, 0]
        finally:
            link.safe_stop()
            link.close()


def test_canopen_activate_before_configure_raises_and_close_after_a_failed_configure_is_quiet():
    cfg = canopen_rig("lifecycle-nobody", "link.canopen.boot_timeout=0.2")
    link = CanopenLink.from_config(cfg)
    with pytest.raises(LinkError, match=r"activate\(\) before configure\(\)"):
        link.activate()
    with pytest.raises(LinkTimeout, match="no boot-up"):
        link.configure()
    link.safe_stop()
    link.close()
    with pytest.raises(LinkError, match=r"activate\(\) after close\(\)"):
        link.activate()


# -- packet serial ----------------------------------------------------------------------------

def test_serial_configure_zeroes_every_duty_and_reads_activate_lets_duties_through():
    cfg = serial_rig("unused")
    with RoboClawEmulator(cfg) as emu:
        cfg = replaced(cfg, "link.serial", port=emu.port)
        emu.controllers[0x80].duty = [4000, -4000]    # the link's motors, left running by
        emu.controllers[0x81].duty = [4000, 0]        # a previous master (0x81 M2: no joint)
        link = SerialLink.from_config(cfg)
        try:
            link.configure()
            assert [c.duty for c in emu.controllers.values()] == [[0, 0], [0, 0]]
            meas = Measurement(3)
            assert link.read(meas)
            assert np.allclose(meas.pos, quantised(Q0, 2048 * 10 / (2 * np.pi)), rtol=0,
                               atol=1e-12)
            with pytest.raises(LinkError, match=r"write\(\) before activate\(\)"):
                link.write(np.array([12.0, -6.0, 3.0]))
            assert [c.duty for c in emu.controllers.values()] == [[0, 0], [0, 0]]
            link.activate()
            link.write(np.array([12.0, -6.0, 3.0]))    # V, of the 24 V battery
            assert emu.controllers[0x80].duty == [16384, -8192]
            assert emu.controllers[0x81].duty == [4096, 0]
        finally:
            link.safe_stop()
            link.close()
    assert emu.error is None


def test_serial_activate_before_configure_raises_and_close_after_a_failed_configure_is_quiet():
    link = SerialLink.from_config(serial_rig("/nonexistent/hilrig-pty"))
    with pytest.raises(LinkError, match=r"activate\(\) before configure\(\)"):
        link.activate()
    with pytest.raises(LinkError, match="cannot open serial port"):
        link.configure()
    link.safe_stop()
    link.close()


# -- ZeroMQ -----------------------------------------------------------------------------------

@pytest.fixture
def zmq_emulator(tmp_path):
    """The rig's plant behind a lockstep ZeroMQ emulator, served by a thread of this process."""
    ep = endpoint(tmp_path)
    cfg = config("rig_zmq", f"link.endpoint='{ep}'", "emulator.mode='lockstep'", "link.timeout=5.0",
                 f"plant.q0={Q0}")
    emu = Emulator(cfg, ep)
    stop = threading.Event()
    server = threading.Thread(target=emu.serve, kwargs={"stop": stop.is_set})
    server.start()
    yield cfg, emu
    stop.set()
    server.join()
    emu.close()


def test_zmq_configure_says_hello_without_a_command_activate_lets_commands_through(zmq_emulator):
    cfg, emu = zmq_emulator
    link = ZmqLink.from_config(cfg)
    try:
        link.configure()
        meas = Measurement(3)
        assert link.read(meas)                          # the STATE that answers HELLO
        assert meas.t == 0.0 and np.array_equal(meas.pos, Q0)
        with pytest.raises(LinkError, match=r"write\(\) before activate\(\)"):
            link.write(np.array([1.0, 1.0, 1.0]))
        assert emu.safe and emu.tick == 0                # no COMMAND reached the emulator
        link.activate()
        link.write(np.array([1.0, -1.0, 0.5]))
        assert link.read(meas)                          # lockstep: the answer to that COMMAND
        assert meas.t == pytest.approx(cfg.sim.dt)
        assert not emu.safe and emu.tick == 1
        assert np.array_equal(emu.command, [1.0, -1.0, 0.5])
    finally:
        link.safe_stop()
        link.close()


def test_zmq_activate_before_configure_raises_and_close_after_a_failed_configure_is_quiet(
        tmp_path):
    cfg = config("rig_zmq", f"link.endpoint='{endpoint(tmp_path)}'", "link.timeout=0.05")
    link = ZmqLink.from_config(cfg)
    with pytest.raises(LinkError, match=r"activate\(\) before configure\(\)"):
        link.activate()
    with pytest.raises(LinkTimeout, match="no emulator answered"):
        link.configure()
    assert link.socket is None
    link.safe_stop()
    link.close()


# -- in-process -------------------------------------------------------------------------------

def test_in_process_plant_does_not_step_before_activate():
    cfg = config("rig_inprocess", f"plant.q0={Q0}")
    link = PlantLink.from_config(cfg)
    with pytest.raises(LinkError, match=r"activate\(\) before configure\(\)"):
        link.activate()
    link.configure()
    meas = Measurement(3)
    assert link.read(meas) and meas.t == 0.0 and np.array_equal(meas.pos, Q0)
    with pytest.raises(LinkError, match=r"write\(\) before activate\(\)"):
        link.write(np.ones(3))
    assert link.plant.t == 0.0
    link.activate()
    link.write(np.ones(3))
    assert link.read(meas) and meas.t == pytest.approx(cfg.sim.dt)
    assert not np.array_equal(meas.vel, np.zeros(3))


# -- the loop of `hil control` ----------------------------------------------------------------

class StatesAtWarmUp(LinkLoop):
    """LinkLoop that records the CiA 402 states of the drives when its warm-up is done."""

    def __init__(self, *args, drives: EmulatedDrives):
        super().__init__(*args)
        self.drives = drives
        self.states_at_warm_up = None

    def warm_up(self) -> None:
        super().warm_up()
        self.states_at_warm_up = [self.drives.state(a) for a in (1, 2, 3)]


def test_hil_control_loop_enables_the_drives_after_the_kernels_are_warm(tmp_path):
    cfg = canopen_rig("lifecycle-loop", "sim.duration=0.1", "safety.watchdog_ticks=1000",
                      "loop.overrun='catch_up'")
    with EmulatedDrives(cfg) as emu:
        link = CanopenLink.from_config(cfg)
        loop = StatesAtWarmUp(cfg, link, tmp_path / "ctl.mcap", drives=emu)
        result = loop.run()
    assert result.status == "ok", result.reason
    assert loop.states_at_warm_up == [State.SWITCH_ON_DISABLED] * 3
    assert loop.configured_at_ns < loop.warmed_at_ns < link.enabled_at_ns < loop.first_command_ns
    summary = read_complete(tmp_path / "ctl.mcap")[3]
    for key in ("warm_up_s", "warm_to_enable_s", "enable_to_first_command_s"):
        assert summary[key] > 0.0


def test_a_loop_that_fails_to_configure_reports_no_enable(tmp_path):
    cfg = canopen_rig("lifecycle-loop-nobody", "link.canopen.boot_timeout=0.2")
    link = CanopenLink.from_config(cfg)
    result = LinkLoop(cfg, link, tmp_path / "ctl.mcap").run()
    assert result.status == "error" and "no boot-up" in result.reason
    assert link.enabled_at_ns is None and "enable_to_first_command_s" not in result.summary
