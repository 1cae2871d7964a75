"""The hilrig_zmq python-can interface: frames between buses through the hub, the wire
format, and clear errors when there is no hub."""
import os
import stat

import can
import pytest
from hilrig.drivers import zmqcan


@pytest.fixture
def channel():
    return f"ipc:///tmp/hilrig-zmqcan-test-{os.getpid()}"


def test_frames_reach_every_other_bus_through_the_hub(channel):
    hub = can.Bus(interface="hilrig_zmq", channel=channel, hub=True)
    other = can.Bus(interface="hilrig_zmq", channel=channel)
    try:
        hub.send(can.Message(arbitration_id=0x185, data=[1, 2, 3], is_extended_id=False))
        other.send(can.Message(arbitration_id=0x1ABCDE, data=b"", is_extended_id=True))
        got = other.recv(5.0)
        assert (got.arbitration_id, bytes(got.data), got.is_extended_id) == (0x185, b"\1\2\3",
                                                                             False)
        got = hub.recv(5.0)
        assert (got.arbitration_id, got.dlc, got.is_extended_id) == (0x1ABCDE, 0, True)
        assert hub.recv(0.1) is None and other.recv(0.1) is None      # no own frames back
    finally:
        other.shutdown()
        hub.shutdown()


def test_wire_format_round_trip_and_rejects():
    msg = can.Message(arbitration_id=0x7FF, data=bytes(range(8)), is_extended_id=False,
                      timestamp=12.5)
    frame = zmqcan.encode(msg, sender=42)
    decoded, sender, probe = zmqcan.decode(frame)
    assert (decoded.arbitration_id, bytes(decoded.data), decoded.timestamp, sender, probe) == \
        (0x7FF, bytes(range(8)), 12.5, 42, False)
    assert zmqcan.decode(b"\x02" + frame[1:]) is None          # another version
    assert zmqcan.decode(frame[:-1]) is None                    # data shorter than the DLC
    assert zmqcan.decode(b"\x01\x00") is None                   # no header


def test_no_hub_and_bad_channels_fail_clearly(channel):
    with pytest.raises(can.CanInitializationError, match="no hub answered"):
        can.Bus(interface="hilrig_zmq", channel=channel + "-nobody", connect_timeout=0.2)
    with pytest.raises(can.CanInitializationError, match="expected ipc://PATH"):
        can.Bus(interface="hilrig_zmq", channel="can0")


def test_the_hubs_socket_files_are_owner_only_under_umask_000_and_never_taken_over(channel):
    """Under umask 000 the hub's ipc files were 0777 (anyone could drive the motors), and a
    second hub on the channel silently replaced the first: now 0600, a second hub is
    refused while the first lives, and the files go with the hub."""
    path = channel[len("ipc://"):]
    old = os.umask(0)
    try:
        hub = can.Bus(interface="hilrig_zmq", channel=channel, hub=True)
    finally:
        os.umask(old)
    try:
        for end in (".up", ".down"):
            assert stat.S_IMODE(os.stat(path + end).st_mode) == 0o600, end
        with pytest.raises(can.CanInitializationError, match="in use by a running process"):
            can.Bus(interface="hilrig_zmq", channel=channel, hub=True)
        other = can.Bus(interface="hilrig_zmq", channel=channel)     # the first hub serves
        other.shutdown()
    finally:
        hub.shutdown()
    assert not os.path.exists(path + ".up") and not os.path.exists(path + ".down")


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_tcp_hub_admits_only_holders_of_the_users_keys(tmp_path, monkeypatch):
    """On a tcp channel a stranger's frames drove the motors (no CURVE): now the hub is a
    CURVE server, as every hilrig endpoint, so a publisher without this user's keys never
    completes the handshake and none of its frames reaches a bus; buses with the keys
    talk; without keys the channel is refused with one line."""
    import zmq
    from hilrig.drivers import curve
    from hilrig.errors import ConfigError

    monkeypatch.setenv("HILRIG_KEYS", str(tmp_path / "none"))
    port = _free_port()
    channel = f"tcp://127.0.0.1:{port}"
    with pytest.raises(can.CanInitializationError, match="CURVE keys"):
        can.Bus(interface="hilrig_zmq", channel=channel, hub=True, connect_timeout=1.0)
    monkeypatch.setenv("HILRIG_KEYS", str(tmp_path / "keys"))
    curve.make_keys()
    hub = can.Bus(interface="hilrig_zmq", channel=channel, hub=True, connect_timeout=5.0)
    other = can.Bus(interface="hilrig_zmq", channel=channel, connect_timeout=5.0)
    stranger = zmq.Context.instance().socket(zmq.PUB)
    stranger.setsockopt(zmq.LINGER, 0)
    try:
        stranger.connect(f"tcp://127.0.0.1:{port}")          # the publishers' side, no keys
        frame = zmqcan.encode(can.Message(arbitration_id=0x201, data=b"\xff" * 8,
                                          is_extended_id=False), sender=7)
        hub.send(can.Message(arbitration_id=0x185, data=[1], is_extended_id=False))
        got = other.recv(5.0)
        assert got is not None and got.arbitration_id == 0x185        # keyed buses talk
        for _ in range(50):                                             # ~0.5 s of tries
            stranger.send(frame)
            assert other.recv(0.01) is None and hub.recv(0.0) is None
    finally:
        stranger.close(0)
        other.shutdown()
        hub.shutdown()
    monkeypatch.setenv("HILRIG_KEYS", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="CURVE keys"):
        zmqcan.ZmqCanBus(channel=f"tcp://127.0.0.1:{_free_port()}", connect_timeout=0.2)
