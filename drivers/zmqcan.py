"""A python-can interface over ZeroMQ: one CAN bus shared by several processes on one host.

python-can's ``virtual`` bus reaches only its own process, and ``udp_multicast``
needs a multicast route on the loopback device (docs/PROTOCOLS.md §4.3). This
interface needs neither: a hub (an XSUB/XPUB proxy) relays every frame to every
bus on the same channel, like a CAN wire without arbitration or bit timing.
Delivery on one host is reliable and ordered per sender.

Use it like any python-can interface, once the package is installed (it is
registered under the ``can.interface`` entry point)::

    can.Bus(interface="hilrig_zmq", channel="ipc://$RUNTIME/can", hub=True)   # one process
    can.Bus(interface="hilrig_zmq", channel="ipc://$RUNTIME/can")             # the others

Exactly one bus per channel runs the hub (``hub=True``); the emulated drives
(``hil emulate``) do. A bus waits up to ``connect_timeout`` s until its own
probe frame came back through the hub, so no frame is lost to ZeroMQ's slow
joiner once the constructor returns.

Channels: ``ipc:///path`` (the hub binds ``/path.up`` and ``/path.down``) or
``tcp://127.0.0.1:PORT`` (ports PORT and PORT + 1). Bind to loopback only.

Wire format, one ZeroMQ message per CAN frame, little-endian::

    B version (1) | B flags (bit0 extended id, bit1 remote, bit2 error frame, bit3 probe) | B dlc |
    B reserved | I arbitration id | Q sender id | d timestamp (s, sender's clock) | data (dlc B)

Frames with another version or a bad length are dropped and counted in
``dropped_frames``.

``fifo_priority`` > 0 runs the bus' ZeroMQ I/O thread (and the hub's) at that
SCHED_FIFO priority (drivers.endpoint.context): give it the priority of the loop that
waits on the bus (the CANopen link does).
"""
from __future__ import annotations

import os
import struct
import threading
import time

import can
import zmq
from hilrig.drivers.endpoint import context
from hilrig.drivers import endpoint as control_plane
from hilrig.errors import ConfigError

VERSION = 1
_HEADER = struct.Struct("<BBBBIQd")
_PROBE = 8         # flags bit 3: a hub handshake probe, never delivered as a CAN frame


def endpoints(channel: str) -> tuple[str, str]:
    """The hub's (publishers' side, subscribers' side) endpoints for a channel."""
    if channel.startswith("ipc://"):
        return channel + ".up", channel + ".down"
    if channel.startswith("tcp://"):
        host, _, port = channel[len("tcp://"):].rpartition(":")
        if not port.isdigit():
            raise can.CanInitializationError(f"hilrig_zmq channel {channel!r}: expected "
                                             "tcp://HOST:PORT")
        return f"tcp://{host}:{port}", f"tcp://{host}:{int(port) + 1}"
    raise can.CanInitializationError(f"hilrig_zmq channel {channel!r}: expected ipc://PATH "
                                     "or tcp://HOST:PORT")


def encode(msg: can.Message, sender: int, probe: bool = False) -> bytes:
    """One CAN frame in the wire format above."""
    flags = (msg.is_extended_id | (msg.is_remote_frame << 1) | (msg.is_error_frame << 2)
             | (_PROBE if probe else 0))
    data = bytes(msg.data[:msg.dlc]) if not msg.is_remote_frame else b""
    return _HEADER.pack(VERSION, flags, msg.dlc, 0, msg.arbitration_id, sender,
                        msg.timestamp or time.time()) + data


def decode(frame: bytes) -> tuple[can.Message, int, bool] | None:
    """(message, sender id, is a probe), or None if ``frame`` is not a valid version-1 frame."""
    if len(frame) < _HEADER.size:
        return None
    version, flags, dlc, _, arb_id, sender, stamp = _HEADER.unpack_from(frame)
    data = frame[_HEADER.size:]
    remote = bool(flags & 2)
    if version != VERSION or dlc > 8 or len(data) != (0 if remote else dlc):
        return None
    msg = can.Message(arbitration_id=arb_id, is_extended_id=bool(flags & 1),
                      is_remote_frame=remote, is_error_frame=bool(flags & 4),
                      dlc=dlc, data=data, timestamp=stamp)
    return msg, sender, bool(flags & _PROBE)


class _Hub:
    """The relay: an XSUB socket the buses publish into, an XPUB socket they subscribe to."""

    def __init__(self, ctx: zmq.Context, up: str, down: str):
        self._control = f"inproc://hilrig-zmq-hub-{id(self)}"
        self._ctx = ctx
        ready = threading.Event()
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, args=(up, down, ready),
                                        name="hilrig_zmq hub", daemon=True)
        self._thread.start()
        ready.wait()
        if self._error is not None:
            raise can.CanInitializationError(f"hilrig_zmq hub cannot bind {up} / {down}: "
                                             f"{self._error}") from self._error
        self._stop = ctx.socket(zmq.PAIR)
        self._stop.connect(self._control)

    def _run(self, up: str, down: str, ready: threading.Event) -> None:
        xsub, xpub = self._ctx.socket(zmq.XSUB), self._ctx.socket(zmq.XPUB)
        control = self._ctx.socket(zmq.PAIR)
        bound = []
        try:
            for sock, where in ((xsub, up), (xpub, down), (control, self._control)):
                sock.setsockopt(zmq.LINGER, 0)
                if where.startswith(("ipc://", "tcp://")):
                    # as every control-plane socket: ipc never over a live hub's file, the
                    # file 0600 whatever the umask, removed at the end; tcp a CURVE server
                    # that admits only holders of this user's keys
                    control_plane.bind(sock, where, "CAN hub")
                else:
                    sock.bind(where)
                bound.append((sock, where))
        except (zmq.ZMQError, ConfigError) as exc:
            self._error = exc
            ready.set()
            _close_all(bound, (xsub, xpub, control))
            return
        ready.set()
        try:
            zmq.proxy_steerable(xsub, xpub, None, control)
        finally:
            _close_all(bound, (xsub, xpub, control))

    def close(self) -> None:
        self._stop.send(b"TERMINATE")
        self._thread.join(5.0)
        self._stop.close(linger=0)


def _close_all(bound: list, sockets: tuple) -> None:
    """Close the hub's sockets: those ``bound`` (socket, endpoint) through drivers.endpoint,
    so that their ipc files go too."""
    for sock, where in bound:
        control_plane.close(sock, where)
    for sock in sockets:
        sock.close()


class ZmqCanBus(can.BusABC):
    """A CAN bus whose frames travel through a ZeroMQ hub (see the module docstring).

    Args:
        channel: ``ipc:///path`` or ``tcp://127.0.0.1:PORT``.
        hub: this bus also runs the hub of the channel (exactly one bus per channel).
        connect_timeout: how long to wait for the hub, s.
        receive_own_messages: deliver this bus' own frames back to it.
        fifo_priority: SCHED_FIFO priority of the bus' ZeroMQ I/O thread (0: normal).
    Raises:
        can.CanInitializationError: bad channel, the hub's endpoints are taken, or no
            hub answered within ``connect_timeout``.
    """

    def __init__(self, channel: str = "ipc://$RUNTIME/can", hub: bool = False,
                 connect_timeout: float = 5.0, receive_own_messages: bool = False,
                 fifo_priority: int = 0, **kwargs):
        up, down = endpoints(control_plane.expand(str(channel)))
        self.channel_info = f"hilrig_zmq {channel}" + (" (hub)" if hub else "")
        self._channel = str(channel)
        self._own = receive_own_messages
        self._sender = int.from_bytes(os.urandom(8), "little")
        self._lock = threading.Lock()
        self.dropped_frames = 0
        self._ctx = context(int(fifo_priority))
        self._hub = None
        try:
            if hub:
                self._hub = _Hub(self._ctx, up, down)
            self._pub = self._ctx.socket(zmq.PUB)
            self._sub = self._ctx.socket(zmq.SUB)
            for sock in (self._pub, self._sub):
                sock.setsockopt(zmq.LINGER, 0)
            self._sub.setsockopt(zmq.SUBSCRIBE, b"")
            control_plane.connect(self._pub, up, "CAN hub")     # tcp: CURVE client keys
            control_plane.connect(self._sub, down, "CAN hub")
            self._await_hub(connect_timeout, channel)
        except BaseException:
            self._close_sockets()
            raise
        super().__init__(channel=channel, **kwargs)

    def _await_hub(self, timeout: float, channel: str) -> None:
        probe = encode(can.Message(arbitration_id=0, data=b"", timestamp=0.0), self._sender,
                       probe=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._pub.send(probe)
            if self._sub.poll(10):
                while self._sub.poll(0):
                    if self._sub.recv() == probe:
                        while self._sub.poll(20):   # later copies of the probe
                            self._sub.recv()
                        return
        raise can.CanInitializationError(
            f"hilrig_zmq: no hub answered on {channel} within {timeout} s; start the emulated "
            "drives (hil emulate) first, or open one bus with hub=True")

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        frame = encode(msg, self._sender)
        with self._lock:
            self._pub.send(frame)

    def _recv_internal(self, timeout: float | None):
        if not self._sub.poll(None if timeout is None else int(timeout * 1000)):
            return None, False
        decoded = decode(self._sub.recv())
        if decoded is None:
            self.dropped_frames += 1
            return None, False
        msg, sender, probe = decoded
        if probe or (sender == self._sender and not self._own):
            return None, False
        msg.channel = self._channel         # no spaces: log formats split on them
        return msg, False

    def _close_sockets(self) -> None:
        for name in ("_pub", "_sub"):
            sock = getattr(self, name, None)
            if sock is not None:
                sock.close(linger=0)
        if self._hub is not None:
            self._hub.close()
            self._hub = None
        self._ctx.term()

    def shutdown(self) -> None:
        if self._ctx.closed:
            return
        super().shutdown()
        self._close_sockets()
