"""A late reply is not a corrupted one (issue 28 item 7: rig_serial on a busy host).

On this VM a pty delivers its bytes through a kernel worker of normal priority: with a
CPU hog on every core a reply now and then comes milliseconds after its attempt gave up
(bench/bench_rigs.py, docs/RIGPC.md "Timeouts and the machine's floor"). Such a reply
then lands in a later exchange's wait. When that exchange's own reply did not come in
time, the link used to call the late bytes a bad CRC: counted in ``crc_errors``, said as
"the link recovered" from line corruption, and with ``on_crc_error = "stop"`` the rig
stopped for a reply that was merely late. Here the test is the drive: it answers on the
master end of a real pty, byte for byte as it chooses, after the emulated drives
brought the link up.
"""
from __future__ import annotations

import os
import threading
import tty

import pytest
from conftest import config, replaced
from hilrig.devices.roboclaw_drive import RoboClawEmulator
from hilrig.drivers import roboclaw_codec as rc
from hilrig.drivers.link import LinkError
from hilrig.drivers.serial_link import ExchangeTimeout, SerialLink

WAIT = 0.2           # s, the reply timeout of the exchanges below (the drive never answers
                     # the exchange under test: no timing decides the result)


@pytest.fixture(params=["retry", "stop"])
def wired(request):
    """(link, master fd): a SerialLink configured by the emulated drives, whose thread has
    then stopped, so that the test answers on the pty's master end itself."""
    master, slave = os.openpty()
    tty.setraw(slave)
    cfg = config("rig_serial", "emulator.mode=lockstep",
                 f"link.serial.on_crc_error='{request.param}'")
    emu = RoboClawEmulator(cfg, master_fd=master).start()
    link = SerialLink.from_config(replaced(cfg, "link.serial", port=os.ttyname(slave)))
    try:
        link.configure()
        emu.stop()                  # the master stays open: the test is the drive now
        assert emu.error is None
        yield link, master
    finally:
        emu.stop()
        link.close()
        os.close(master)
        os.close(slave)


def _drive(master: int, expect: bytes, answer: bytes) -> threading.Thread:
    """A drive that reads until the request ``expect`` has come (after any the link sent
    before it, unanswered) and then answers ``answer``, bytes of its choosing."""
    def serve():
        received = b""
        while not received.endswith(expect):
            received += os.read(master, 64)
        os.write(master, answer)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_late_reply_of_another_request_is_a_missing_reply_not_a_bad_crc(wired):
    link, master = wired
    with pytest.raises(ExchangeTimeout, match=r"ReadEncM1 \(cmd 16\) at 0x80: no reply"):
        link.exchange(0x80, rc.READ_ENC_M1, timeout=WAIT, attempts=1)
    # ReadSpeedM1's wait gets the reply to that ReadEncM1, late, and nothing of its own
    late = rc.encode_reply(0x80, rc.READ_ENC_M1, 1234, 0)
    thread = _drive(master, rc.encode_request(0x80, rc.READ_SPEED_M1), late)
    with pytest.raises(ExchangeTimeout) as info:
        link.exchange(0x80, rc.READ_SPEED_M1, timeout=WAIT, attempts=1)
    thread.join()
    assert str(info.value).startswith("ReadSpeedM1 (cmd 18) at 0x80: no reply within")
    assert f"{len(late)} late bytes" in str(info.value)
    assert link.crc_errors == 0 and link.late_bytes == len(late)


def test_a_late_read_reply_is_not_taken_for_a_corrupted_ack(wired):
    link, master = wired
    with pytest.raises(ExchangeTimeout):
        link.exchange(0x81, rc.READ_CURRENTS, timeout=WAIT, attempts=1)
    late = rc.encode_reply(0x81, rc.READ_CURRENTS, 150, 0)
    thread = _drive(master, rc.encode_request(0x81, rc.DUTY_M1, 0), late)
    with pytest.raises(ExchangeTimeout, match=r"DutyM1 \(cmd 32\) at 0x81: no reply within"):
        link.exchange(0x81, rc.DUTY_M1, 0, timeout=WAIT, attempts=1)
    thread.join()
    assert link.crc_errors == 0


def test_a_reply_corrupted_on_the_line_is_still_a_bad_crc(wired):
    link, master = wired
    good = rc.encode_reply(0x80, rc.READ_SPEED_M1, 40, 0)
    thread = _drive(master, rc.encode_request(0x80, rc.READ_SPEED_M1),
                    good[:-1] + bytes((good[-1] ^ 0x01,)))
    error = LinkError if link.on_crc_error == "stop" else rc.CrcError
    with pytest.raises(error, match=r"ReadSpeedM1 \(cmd 18\) at 0x80: bad CRC"):
        link.exchange(0x80, rc.READ_SPEED_M1, timeout=WAIT, attempts=1)
    thread.join()
    assert link.crc_errors == 1
