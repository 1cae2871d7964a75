"""Link faults in the emulated packet-serial drives (devices.roboclaw_drive) against the real
SerialLink on a pty: CRC errors counted and recovered from (or stopping the link, as
``link.serial.on_crc_error`` says), a stalled line, dropped and delayed replies."""
import logging

import numpy as np
import pytest
from hilrig.devices.roboclaw_drive import RoboClawEmulator
from hilrig.drivers.link import LinkError, LinkTimeout, Measurement
from hilrig.drivers.serial_link import SerialLink
from hilrig.errors import ConfigError
from conftest import config, replaced

LOCKSTEP = ("emulator.mode=lockstep", "link.serial.timeout=0.1", "link.serial.budget=1.0",
            "link.timeout=5.0")


def _rig(*overrides):
    return config("rig_serial", *LOCKSTEP, *overrides)


@pytest.fixture
def running():
    """running(*overrides) -> (emulator serving in a thread, open SerialLink to it)."""
    made = []

    def make(*overrides):
        cfg = _rig(*overrides)
        emu = RoboClawEmulator(cfg).start()
        link = SerialLink.from_config(replaced(cfg, "link.serial", port=emu.port))
        made.append((emu, link))
        link.open()
        return emu, link
    yield make
    for emu, link in made:
        link.safe_stop()
        link.close()
        emu.stop()
        assert emu.error is None


def _ticks(link, n):
    """n ticks of read, then zero duty: whether each read was complete."""
    meas, fresh = Measurement(3), []
    for _ in range(n):
        fresh.append(link.read(meas))
        link.write(np.zeros(3))
    return fresh


def test_crc_errors_are_counted_and_the_link_recovers_in_one_line(running, caplog):
    """3 plant steps of bad CRCs on joint 3's controller (0x81): the reads of those ticks
    are stale (the retry is corrupted too), then the link recovers and says so once."""
    emu, link = running()
    assert _ticks(link, 3) == [True] * 3
    emu.inject("crc_error", {}, 0.03, joint=3)
    with caplog.at_level(logging.WARNING, "hil.link.serial"):
        fresh = _ticks(link, 8)
    assert fresh == [False] * 3 + [True] * 5
    # each stale tick: ReadEncM1 of 0x81 and its retry, then the DutyM1 ACK and its retry
    assert link.crc_errors == 3 * 4 and link.stale_reads == 3
    said = [r.getMessage() for r in caplog.records if "bad CRC" in r.getMessage()]
    assert len(said) == 1 and "12 replies with a bad CRC, retried: the link recovered" in said[0]
    assert emu.controllers[0x80].duty == [0, 0]          # 0x80 was never hit


def test_a_crc_error_stops_the_link_when_configured(running):
    emu, link = running("link.serial.on_crc_error='stop'")
    assert _ticks(link, 2) == [True] * 2
    emu.inject("corrupt", {}, float("inf"), joint=1)
    with pytest.raises(LinkError, match=r"ReadEncM1 \(cmd 16\) at 0x80: bad CRC.*\(link\.serial"
                                        r"\.on_crc_error = 'stop'\)"):
        _ticks(link, 3)


def test_a_stalled_line_loses_the_link_after_link_timeout(running):
    emu, link = running("link.timeout=0.3")
    assert _ticks(link, 2) == [True] * 2
    emu.inject("stall", {}, float("inf"))
    with pytest.raises(LinkTimeout, match=r"no (complete measurement|acknowledged duty command) "
                                          r"for \d\.\d+ s \(link\.timeout = 0\.3 s\); last "
                                          r"error: .* no reply within"):
        for _ in range(100):
            _ticks(link, 1)
    assert emu.stats["stalled"] > 0


def test_scheduled_drops_make_reads_stale_and_delays_only_slow_the_replies(running):
    """faults.drop of 5 % of the replies from t = 0.02 s (a read is 10 exchanges, no
    retry): some reads go stale, the link goes on; a delay of 1 ms leaves every read
    complete. (That the draws are seeded: test_link_faults.py, on the schedule itself; here
    a reply late on a busy host would change which requests the draws meet.)"""
    emu, link = running("faults.drop={t1=0.02, probability=0.05, seed=7}",
                        "link.serial.retries=0")
    fresh = _ticks(link, 40)
    assert fresh[:2] == [True] * 2 and 3 < fresh.count(False) < 30
    assert emu.stats["dropped"] > 0 and link.stale_reads == fresh.count(False)
    emu, link = running("faults.delay={t1=0.0, delay=0.001}")
    assert _ticks(link, 10) == [True] * 10


def test_a_serial_fault_the_drives_cannot_take_is_refused():
    with pytest.raises(ConfigError, match="faults.sync_loss: the emulated serial device has "
                                          "no link fault 'sync_loss'"):
        RoboClawEmulator(_rig("faults.sync_loss={t1=0.0}"))
