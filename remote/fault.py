"""Live fault injection and e-stop from another process: ``hil fault``, ``hil estop``.

``send_fault`` sends one FAULT frame (drivers.wire) to a running emulator and waits for
its FAULT_ACK, which names the tick and plant time at which the fault took effect.
``send_estop`` stops a running ``hil control`` in a stop category of IEC 60204-1 (0: drives
disabled at once; 1, 2: brought to rest by the drives first, then disabled or holding).
"""
from __future__ import annotations

from dataclasses import dataclass

import zmq
from hilrig.drivers import endpoint as endpoints
from hilrig.drivers.wire import (
    ERROR_TEXT,
    FAULT_CLEAR,
    FAULT_JAM,
    MessageType,
    WireError,
    decode,
    encode,
)


class FaultError(RuntimeError):
    """The emulator refused the fault or did not answer."""


@dataclass(frozen=True)
class FaultAck:
    tick: int       # the emulator tick at whose boundary the fault took effect
    time: float     # its plant time, s


def _request(endpoint: str, frame: bytes, expected: dict, timeout: float, who: str):
    """Send one frame on a fresh DEALER and return the decoded answer (type, seq, t, values).

    The endpoint is checked (ConfigError); over tcp the socket uses this user's CURVE keys.
    """
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        endpoints.connect(socket, endpoint, who.split()[-1])
        socket.send(frame)
        if not socket.poll(int(timeout * 1000)):
            raise FaultError(f"no answer from {who} at {endpoint} within {timeout} s")
        try:
            return decode(socket.recv(), expected)
        except WireError as exc:
            raise FaultError(f"bad answer from {endpoint}: {exc}") from None
    finally:
        socket.close(0)


def send_fault(endpoint: str, kind: str, joint: int, duration: float = 0.1,
               timeout: float = 2.0) -> FaultAck:
    """Jam (over ``duration`` s) or clear ``joint`` (1-based) of the emulator at ``endpoint``."""
    if kind not in ("jam", "clear"):
        raise ValueError(f"fault kind must be 'jam' or 'clear', got {kind!r}")
    code = FAULT_JAM if kind == "jam" else FAULT_CLEAR
    answer, _, _, values = _request(
        endpoint, encode(MessageType.FAULT, 0, 0.0, [code, joint, duration]),
        {MessageType.FAULT_ACK: 6, MessageType.ERROR: 1}, timeout, "an emulator")
    if answer == MessageType.ERROR or values[0] != 0:
        raise FaultError(f"emulator refused the fault: {_refusal(answer, values, joint, duration)}")
    return FaultAck(int(values[1]), float(values[2]))


def _refusal(answer: MessageType, values, joint: int, duration: float) -> str:
    """Why the emulator refused a fault on ``joint`` (1-based) of ``duration`` s, from its
    answer: an ERROR's code, or a FAULT_ACK's status and the plant's joints."""
    if answer == MessageType.ERROR:
        return f"{ERROR_TEXT.get(int(values[0]), 'error')} (see its log)"
    joints = int(values[5])
    if joints == 0:
        return "this plant has no joint that can jam (jams are modelled for chains only)"
    if not 1 <= joint <= joints:
        return f"joint {joint}: this plant has {joints} joints (1..{joints})"
    from hilrig.plant.jam import jam_duration_error

    return jam_duration_error(duration) or \
        f"{ERROR_TEXT.get(int(values[0]), 'error')} (see its log)"


STOP_CATEGORIES = {0: "power removed at once", 1: "controlled stop, then power removed",
                   2: "controlled stop, power kept (holding)"}   # IEC 60204-1, 9.2.2


def send_estop(endpoint: str, timeout: float = 2.0, category: int = 0) -> int:
    """Stop the controller (``hil control --estop-endpoint``) with IEC 60204-1 stop
    ``category`` (STOP_CATEGORIES; 0, what ``hil estop`` always did: the drives disabled at
    once); returns the tick at which the stop began."""
    if category not in STOP_CATEGORIES:
        raise ValueError(f"stop category must be 0, 1 or 2, got {category!r}")
    _, _, _, values = _request(endpoint, encode(MessageType.ESTOP, 0, 0.0, [category]),
                               {MessageType.ESTOP_ACK: 1}, timeout, "a controller")
    return int(values[0])
