"""The CANopen CiA 402 link against emulated drives on python-can's virtual bus (and across
processes over hilrig_zmq): bring-up, PDO contents, SYNC timing, closed-loop tracking,
and the documented reaction to every fault. No mocks; no timed assertions (generous
deadlines only guarantee that nothing hangs)."""
import contextlib
import multiprocessing
import os
import time

import can
import canopen
import numpy as np
import pytest
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.layout import B_TARGET, HEADER
from hilrig.devices.cia402_drive import EmulatedDrives, serve
from hilrig.drivers import cia402
from hilrig.drivers.canopen_link import CanopenLink
from hilrig.drivers.cia402 import State
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import DriveFault, LinkError, LinkTimeout, Measurement
from hilrig.plant.factory import plant_from_config
from hilrig.settings.config import ConfigError

from conftest import config

# the test loop is not real-time, and a loaded machine can stall a process for 100s of ms
GENEROUS = ("link.canopen.tpdo_timeout=0.5", "link.canopen.heartbeat_timeout=2.0")
TRACKING_BOUND = 0.02    # rad, |q_CAN - q_in-process| over the whole run
SETTLED_BOUND = 0.1      # rad, |q - target| over the last second (the PD's gravity droop)


def rig(channel, *overrides):
    return config("rig_canopen", "link.canopen.interface='virtual'",
                  f"link.canopen.channel='{channel}'", *GENEROUS, *overrides)


@pytest.fixture
def bench(request):
    """Emulated drives and an open link on a virtual channel of the test's own name.

    Config overrides come from indirect parametrisation, if any.
    """
    cfg = rig(request.node.name, *getattr(request, "param", ()))
    with EmulatedDrives(cfg) as emu:
        link = CanopenLink.from_config(cfg)
        link.open()
        try:
            yield cfg, emu, link
        finally:
            link.safe_stop()
            link.close()


def loop(cfg, link, cycles, meas=None, gains=None):
    """read -> PD -> write for ``cycles``; the positions read, one row per cycle."""
    gains = controller_from_config(cfg, link.command_unit) if gains is None else gains
    meas = Measurement(link.n_axes) if meas is None else meas
    u = np.zeros(link.n_axes)
    q = np.zeros((cycles, link.n_axes))
    for k in range(cycles):
        assert link.read(meas)
        gains(meas.t, meas.pos, meas.vel, meas.current, u)
        link.write(u)
        q[k] = meas.pos
    return q


# -- closed loop ---------------------------------------------------------------------------

def test_pd_tracks_reference_over_can_like_in_process():
    cfg = rig("pd-tracking")
    n = round(cfg.sim.duration / cfg.sim.dt)
    with EmulatedDrives(cfg), CanopenLink.from_config(cfg) as link:
        q_can = loop(cfg, link, n)
    with PlantLink(plant_from_config(cfg), cfg.sim.dt) as inprocess:
        q_ref = loop(cfg, inprocess, n)
    target = np.array(cfg.controller.target)
    last_second = slice(n - round(1.0 / cfg.sim.dt), n)
    assert np.abs(q_can - q_ref).max() < TRACKING_BOUND
    assert np.abs(q_can[last_second] - target).max() < SETTLED_BOUND
    assert np.abs(q_ref[last_second] - target).max() < SETTLED_BOUND


# -- protocol: PDO contents, SYNC timing ----------------------------------------------------

def cycle_frames(spy, count):
    """The next ``count`` frames on the bus that are not heartbeats."""
    frames = []
    deadline = time.monotonic() + 10.0
    while len(frames) < count and time.monotonic() < deadline:
        frame = spy.recv(1.0)
        if frame is not None and frame.arbitration_id < 0x700:
            frames.append(frame)
    return frames


@pytest.mark.parametrize("bench", [("plant.q0=[0.1, -0.2, 0.3]",)], indirect=True)
def test_pdo_contents_and_sync_timing(bench, request):
    cfg, emu, link = bench
    spy = can.Bus(interface="virtual", channel=request.node.name)
    try:
        meas = Measurement(3)
        assert link.read(meas)
        frames = cycle_frames(spy, 7)
        assert frames[0].arbitration_id == 0x080 and frames[0].dlc == 0       # SYNC first
        by_id = {f.arbitration_id: bytes(f.data) for f in frames[1:]}
        counts = 4096 * 10 / (2 * np.pi)
        for axis, node in enumerate((1, 2, 3)):
            tpdo1, tpdo2 = by_id[0x180 + node], by_id[0x280 + node]
            assert len(tpdo1) == 6 and len(tpdo2) == 6
            assert int.from_bytes(tpdo1[:2], "little") == 0x1237                 # OE, CST
            position = int.from_bytes(tpdo1[2:], "little", signed=True)
            assert position == round(cfg.plant.q0[axis] * counts)
            assert meas.pos[axis] == pytest.approx(position / counts)
        assert meas.t == 0.0                                # the first SYNC samples t = 0
        link.write(np.array([30.0, -12.0, 0.0]))            # N m at the joint
        rpdos = cycle_frames(spy, 3)
        # 30 N m / r = 3 N m motor = 500 per-mille of 6 N m rated
        expected = [(0x201, 0x000F, 500), (0x202, 0x000F, -200), (0x203, 0x000F, 0)]
        assert [(m.arbitration_id, int.from_bytes(m.data[:2], "little"),
                 int.from_bytes(m.data[2:4], "little", signed=True)) for m in rpdos] == expected
        link.read(meas)                 # the drives apply the RPDOs at this SYNC, after its TPDOs
        assert meas.t == pytest.approx(cfg.sim.dt)
        link.read(meas)                 # (its handler has surely finished once this one answers)
        assert [a.target for a in emu.axes] == [500, -200, 0]
        for _ in range(2):
            link.read(meas)
        assert link.syncs == 5 and emu.syncs == 5 and link.stale_frames == 0
    finally:
        spy.shutdown()


def test_commands_are_clamped_to_max_torque(bench):
    _, emu, link = bench
    link.write(np.array([1e6, -1e6, 0.0]))
    link.read(Measurement(3))
    link.read(Measurement(3))
    assert [a.target for a in emu.axes[:2]] == [5000, -5000]


@pytest.mark.parametrize("bench", [("emulator.canopen.latency=0.02",)], indirect=True)
def test_measurements_are_quantised_encoder_counts_after_the_latency(bench):
    _, _, link = bench
    meas = Measurement(3)
    for _ in range(5):
        assert link.read(meas)                 # the drives answer 20 ms after SYNC
        link.write(np.array([40.0, -30.0, 20.0]))
    counts = meas.pos * link.counts_per_rad
    assert np.abs(meas.pos).min() > 0 and np.allclose(counts, np.round(counts), atol=1e-9)
    assert np.allclose(meas.current * 1000 / link.rated_current,
                       np.round(meas.current * 1000 / link.rated_current), atol=1e-9)


@pytest.mark.parametrize("bench", [("emulator.canopen.position_noise=0.01",
                                    "emulator.canopen.seed=7")], indirect=True)
def test_position_noise_from_the_config(bench):
    _, _, link = bench
    meas = Measurement(3)
    samples = []
    for _ in range(200):                       # hanging at rest: the true q stays 0
        link.read(meas)
        link.write(np.zeros(3))
        samples.append(meas.pos.copy())
    spread = np.std(samples, axis=0)
    assert np.all((spread > 0.007) & (spread < 0.013))


# -- faults ---------------------------------------------------------------------------------

def test_dropped_sync_gives_one_missed_cycle_then_recovers(bench):
    _, emu, link = bench
    meas = Measurement(3)
    assert link.read(meas)
    before = meas.buffer.copy()
    link.tpdo_timeout = 0.05
    emu.drop_syncs(1)
    assert link.read(meas) is False
    assert np.array_equal(meas.buffer, before)          # the previous measurement is kept
    assert link.read(meas) is True


def test_dropped_tpdos_time_out_naming_the_axis(bench):
    _, emu, link = bench
    link.tpdo_timeout = 0.05
    link.max_missed = 3
    emu.drop_tpdos(2, cycles=10)
    meas = Measurement(3)
    assert link.read(meas) is False and link.read(meas) is False
    with pytest.raises(LinkTimeout, match=r"3 cycles in a row; missing: axis 2 \(node 2\) TPDO1, "
                                          r"axis 2 \(node 2\) TPDO2"):
        link.read(meas)


def test_drive_fault_with_emcy_is_raised_with_code_and_text(bench):
    _, emu, link = bench
    meas = Measurement(3)
    link.read(meas)
    emu.inject_fault(2, 0x2310)
    with pytest.raises(DriveFault) as fault:
        for _ in range(10):
            link.read(meas)
    assert fault.value.axis == 2 and fault.value.code == 0x2310
    assert "over-current" in str(fault.value) and "node 2" in str(fault.value)


@pytest.mark.slow
def test_heartbeat_loss_times_out(bench):
    _, emu, link = bench
    emu.stop_heartbeat(3)
    meas = Measurement(3)
    deadline = time.monotonic() + 10.0
    with pytest.raises(LinkTimeout, match=r"axis 3 \(node 3\): heartbeat lost"):
        while time.monotonic() < deadline:
            link.read(meas)
            link.write(np.zeros(3))


def test_drive_leaving_operational_is_an_error(bench):
    _, emu, link = bench
    link.network.send_message(0x000, [cia402.NMT_STOP, 1])   # someone stops node 1
    meas = Measurement(3)
    with pytest.raises(LinkError, match=r"axis 1 \(node 1\) left NMT OPERATIONAL: its "
                                        r"heartbeat reports STOPPED"):
        for _ in range(400):
            link.read(meas)
    assert emu.state(1) == State.QUICK_STOP_ACTIVE


def test_drive_faults_when_the_controller_heartbeat_stops():
    cfg = rig("master-heartbeat")
    with EmulatedDrives(cfg) as emu:
        net = canopen.Network()
        net.NOTIFIER_CYCLE = 0.05
        net.connect(interface="virtual", channel="master-heartbeat")
        try:
            node = net.add_node(1, cia402.object_dictionary(1))
            emcys = []
            node.emcy.add_callback(emcys.append)
            node.sdo[cia402.HEARTBEAT_CONSUMER][1].raw = 127 << 16 | 50   # 50 ms
            net.send_message(0x77F, [cia402.OPERATIONAL])                 # one heartbeat only
            deadline = time.monotonic() + 10.0
            while emu.state(1) != State.FAULT and time.monotonic() < deadline:
                time.sleep(0.01)
            assert emu.state(1) == State.FAULT
            assert node.sdo[cia402.ERROR_CODE].raw == 0x8130
            while not emcys and time.monotonic() < deadline:
                time.sleep(0.01)
            assert [e.code for e in emcys] == [0x8130]
            assert emu.state(2) != State.FAULT           # node 2 consumes nobody
        finally:
            net.disconnect()


def test_jam_behind_the_drive_trips_its_i2t_protection():
    cfg = rig("jam", "emulator.canopen.i2t_time=0.1", "link.canopen.rated_current=4.0",
              "link.canopen.rated_torque=12.0", "plant.q0=[0.3, -0.2, 0.4]")
    with EmulatedDrives(cfg) as emu, CanopenLink.from_config(cfg) as link:
        gains = controller_from_config(cfg, link.command_unit)
        meas = Measurement(3)
        loop(cfg, link, 50, meas, gains)        # holding near the target: no trip
        emu.jam(2, duration=0.02)
        gains.params[HEADER + B_TARGET * 3 + 1] += 0.3   # the reference of joint 2 moves by 0.3 rad:
        # 150 N m at the joint, 5 A in the motor (rated 4 A): I2t trips after about 0.18 s
        positions = []
        with pytest.raises(DriveFault) as fault:
            for _ in range(1000):
                positions.append(loop(cfg, link, 1, meas, gains)[0, 1])
        assert fault.value.axis == 2 and fault.value.code == 0x2310
        assert "I2t" in str(fault.value)
        blocked = positions[10:]                # after the 20 ms jamming phase
        assert len(blocked) > 20 and max(blocked) - min(blocked) <= 1.0 / (4096 * 10 / (2 * np.pi))


def test_scheduled_jam_from_the_config_blocks_the_joint_at_t1():
    cfg = rig("scheduled-jam", "faults.jam.joint=3", "faults.jam.t1=0.1",
              "faults.jam.duration=0.01")
    with EmulatedDrives(cfg) as emu, CanopenLink.from_config(cfg) as link:
        q = loop(cfg, link, 150)                # 0.3 s at 2 ms
        assert emu.plant.plant.jammed_joints() == [3]
    moving, blocked = q[:50, 2], q[60:, 2]      # t < 0.1 s; t > 0.12 s
    assert np.ptp(moving) > 0.01 and np.ptp(blocked) <= 1.0 / (4096 * 10 / (2 * np.pi))


# -- commands, stop, bring-up errors ------------------------------------------------------------

def test_non_finite_command_is_refused(bench):
    _, _, link = bench
    link.read(Measurement(3))
    with pytest.raises(LinkError, match=r"axis 2 \(node 2\): command nan N m is not finite"):
        link.write(np.array([0.0, np.nan, 0.0]))


def cycle_frames_within(spy, seconds):
    """Every non-heartbeat frame seen on the bus within ``seconds``."""
    frames, end = [], time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        frame = spy.recv(left)
        if frame is not None and frame.arbitration_id < 0x700:
            frames.append(frame)
    return frames


def test_safe_stop_disables_every_drive_and_blocks_writes(bench, request):
    _, emu, link = bench
    link.read(Measurement(3))
    link.safe_stop()
    deadline = time.monotonic() + 10.0
    while any(emu.state(a) != State.SWITCH_ON_DISABLED for a in (1, 2, 3)) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(emu.state(a) == State.SWITCH_ON_DISABLED for a in (1, 2, 3))
    spy = can.Bus(interface="virtual", channel=request.node.name)
    try:
        link.write(np.array([10.0, 10.0, 10.0]))
        assert cycle_frames_within(spy, 0.2) == []
    finally:
        spy.shutdown()
    with pytest.raises(LinkError, match="stopped"):
        link.read(Measurement(3))
    link.safe_stop()
    link.close()
    link.close()


def test_open_without_drives_fails_clearly():
    cfg = rig("nobody-home", "link.canopen.boot_timeout=0.2")
    link = CanopenLink.from_config(cfg)
    with pytest.raises(LinkTimeout, match=r"axis 1 \(node 1\): no boot-up within 0.2 s"):
        link.open()
    link.close()


def test_open_recovers_a_faulted_drive():
    cfg = rig("faulted-at-start")
    with EmulatedDrives(cfg) as emu:
        emu.inject_fault(3, 0x4310)
        with CanopenLink.from_config(cfg) as link:     # NMT reset keeps the fault; reset it
            assert link.read(Measurement(3))
            assert emu.state(3) == State.OPERATION_ENABLED


@pytest.mark.parametrize("override, message", [
    ("sim.dt=0.001", "3 axes need 103% of a 1 Mbit/s bus"),
    ("controller.output='voltage'", "take torques"),
    ("link.canopen.node_ids=[1, 1, 2]", "distinct node-ids"),
    ("link.canopen.heartbeat_timeout=0.05", "must exceed heartbeat_period"),
    ("link.canopen.node_ids=[1, 2.5, 3]", r"node_ids\[1\]: expected an integer"),
    ("input.voltage=[1.0, 1.0, 1.0]", "give input.torque"),
])
def test_bad_canopen_configs_fail_at_load(override, message):
    with pytest.raises(ConfigError, match=message):
        config("rig_canopen", override)


# -- across processes -------------------------------------------------------------------------

@contextlib.contextmanager
def drives_in_another_process(name: str, *overrides: str):
    """The emulated drives of ``rig`` in a process of their own (``serve``), on a
    hilrig_zmq channel named after ``name``; yields the config. The process ends cleanly
    (exit 0) on leaving."""
    cfg = rig(f"ipc:///tmp/hilrig-test-{name}-{os.getpid()}",
              "link.canopen.interface='hilrig_zmq'", *overrides)
    ctx = multiprocessing.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Event()
    process = ctx.Process(target=serve, args=(cfg, None, stop, ready), daemon=True)
    process.start()
    try:
        assert ready.wait(60.0), "the emulator process did not start"
        yield cfg
    finally:
        stop.set()
        process.join(30.0)
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0


def _hold_the_gil(seconds: float) -> None:
    """Keep this process's other threads from running Python for at least ``seconds``: one
    C call (``sum`` over a range) that never lets the GIL go, sized from a short one."""
    start = time.perf_counter()
    sum(range(1_000_000))
    n = int(1_000_000 * seconds / max(time.perf_counter() - start, 1e-6))
    start = time.perf_counter()
    sum(range(n))
    assert time.perf_counter() - start >= seconds / 2    # the hold was long enough


@pytest.mark.system
def test_a_bring_up_that_keeps_the_heartbeat_sender_off_the_gil_does_not_fault_the_drives():
    """Between ``configure`` and ``activate`` the loop warms its kernels, holding the GIL
    for seconds on a busy host (numba's cache loading at normal priority), so the
    controller's heartbeat sender, a Python thread, falls silent. The drives (another
    process, over hilrig_zmq) must not take that for a lost controller: they supervise its
    heartbeat (0x1016) from ``activate`` on, when the loop runs at its own priority."""
    with drives_in_another_process("gil") as cfg:
        link = CanopenLink.from_config(cfg)
        link.configure()
        try:
            _hold_the_gil(2 * cfg.link.canopen.heartbeat_timeout)
            link.activate()                     # a DriveFault 0x8130 before the fix
            q = loop(cfg, link, 100)
        finally:
            link.safe_stop()
            link.close()
    assert np.isfinite(q).all()


@pytest.mark.system
def test_drives_in_another_process_over_zmq():
    with drives_in_another_process("zmq") as cfg:
        with CanopenLink.from_config(cfg) as link:
            q = loop(cfg, link, 300)
    target = np.array(cfg.controller.target)
    assert np.all(np.abs(q[-1] - target) < np.abs(q[0] - target))   # moving to the target
