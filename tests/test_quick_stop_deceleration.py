"""The quick stop deceleration 0x6085 (issue 24, item 6, on CANopen): a controlled stop
(`hil estop --category 1|2`, CanopenLink.controlled_stop) writes it to every drive before
the quick stop, from ``link.canopen.quick_stop_deceleration`` or, unset, from
``safety.stop_time``; the emulated CiA 402 drives slow down on it (python-can's virtual
bus, the ``canopen`` master library)."""
import numpy as np
import pytest
from hilrig.controllers.factory import controller_from_config
from hilrig.devices.cia402_drive import EmulatedDrives
from hilrig.drivers import cia402
from hilrig.drivers.canopen_link import CanopenLink
from hilrig.drivers.cia402 import State
from hilrig.drivers.controlled_stop import RAMP
from hilrig.drivers.link import Measurement
from conftest import config

STOP_TIME = 0.3        # s, safety.stop_time


def stop(request, category, *overrides):
    """Drive rig_canopen's arm toward its target for 0.2 s, then a controlled stop of
    ``category``: (cfg, the rates at the stop (rad/s), the 0x6085 the link meant to write
    and each drive's 0x6085 after the stop, the rates of the cycles after the stop (NaN:
    a stale read), the drives' states at the end)."""
    cfg = config("rig_canopen", "link.canopen.interface='virtual'",
                 f"link.canopen.channel='{request.node.name}'", "link.canopen.tpdo_timeout=0.5",
                 "link.canopen.heartbeat_timeout=2.0", f"safety.stop_time={STOP_TIME}",
                 *overrides)
    with EmulatedDrives(cfg) as drives, CanopenLink.from_config(cfg) as link:
        law = controller_from_config(cfg, link.command_unit)
        meas, u = Measurement(3), np.zeros(3)
        for _ in range(100):
            link.read(meas)
            law(meas.t, meas.pos, meas.vel, meas.current, u)
            link.write(u)
        qd0 = meas.vel.copy()
        meant = link.quick_stop_decelerations(STOP_TIME)
        link.controlled_stop(category, STOP_TIME)
        written = [drive.node.sdo[cia402.QUICK_STOP_DECELERATION].raw for drive in drives.axes]
        qd = []
        for _ in range(int(round(1.0 / cfg.sim.dt))):
            fresh = link.read(meas)
            link.write(u)
            qd.append(meas.vel.copy() if fresh else np.full(3, np.nan))
        states = [drives.state(axis) for axis in (1, 2, 3)]
    return cfg, qd0, meant, written, np.array(qd), states


def test_unset_the_deceleration_brings_each_joint_to_rest_within_the_stop_time(request):
    """0x6085 = the joint's rate at the stop / (RAMP stop_time), in increments/s^2: the
    drives' ramps end at RAMP stop_time, and the joints rest by the stop time."""
    cfg, qd0, meant, written, qd, states = stop(request, 2)
    assert np.abs(qd0).max() > 0.1                              # the arm was moving
    assert written == meant
    wanted = np.abs(qd0) * CanopenLink.from_config(cfg).counts_per_rad / (RAMP * STOP_TIME)
    assert np.abs(np.array(meant) - np.maximum(wanted, 1.0)).max() <= 1.0
    n_rest = int(round(STOP_TIME / cfg.sim.dt))
    assert np.nanmax(np.abs(qd[n_rest - 10:])) < 2e-3
    assert states == [State.QUICK_STOP_ACTIVE] * 3


@pytest.mark.parametrize("category", [1, 2])
def test_the_drives_slow_down_on_the_configured_deceleration(request, category):
    """link.canopen.quick_stop_deceleration = 1.5 rad/s^2: each drive's 0x6085 is that in
    its increments/s^2, and each moving joint's rate falls linearly at 1.5 rad/s^2 (half
    its rate at half the ramp |qd0| / 1.5), at rest once its ramp is over; category 1
    then disables the drives, 2 holds them."""
    decel = 1.5
    cfg, qd0, meant, written, qd, states = stop(
        request, category, f"link.canopen.quick_stop_deceleration={decel}")
    link = CanopenLink.from_config(cfg)
    assert written == meant == [round(decel * c) for c in link.counts_per_rad]
    dt = cfg.sim.dt
    for j in np.flatnonzero(np.abs(qd0) > 0.1):
        ramp = abs(qd0[j]) / decel                                 # s
        half = int(round(0.5 * ramp / dt))
        assert qd[half, j] == pytest.approx(0.5 * qd0[j], rel=0.15), j
        assert np.sign(qd[half, j]) == np.sign(qd0[j])
        if category == 2:
            rest = int(round(ramp / RAMP / dt))                    # the ramp, then settled
            assert np.nanmax(np.abs(qd[rest:, j])) < 2e-3, j
    assert np.abs(qd0).max() / decel > STOP_TIME * RAMP * 1.2      # slower than the default
    expected = State.SWITCH_ON_DISABLED if category == 1 else State.QUICK_STOP_ACTIVE
    assert states == [expected] * 3
