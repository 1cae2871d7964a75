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
    FAULT_PARAMS,
    MessageType,
    WireError,
    decode,
    encode,
    encode_fault,
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


def send_fault(endpoint: str, kind: str, joint: int, duration: float | None = None,
               timeout: float = 2.0, params: dict | None = None,
               channel: str = "position") -> FaultAck:
    """Start the fault ``kind`` (plant.faults.KINDS: jam, clear, an actuator or sensor kind)
    on ``joint`` (1-based) of the emulator at ``endpoint`` for ``duration`` s (None: a jam's
    0.1 s jamming phase, else until cleared), with ``params`` by name and a sensor fault's
    ``channel``. ValueError for a kind or parameter this tool cannot send; FaultError when
    the emulator refuses (its reason) or does not answer."""
    from hilrig.plant.faults import CHANNELS, KINDS

    spec = KINDS.get(kind)
    if spec is None:
        raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(KINDS)})")
    unknown = set(params or {}) - set(spec.params)
    if unknown:
        raise ValueError(f"{kind}: unknown parameter {sorted(unknown)[0]!r} (known: "
                         f"{', '.join(spec.params) or 'none'})")
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {', '.join(CHANNELS)}, got {channel!r}")
    if duration is None:
        duration = 0.1 if kind == "jam" else 0.0
    values = [(params or {}).get(name) for name in spec.params]
    values += [None] * (FAULT_PARAMS - len(values))
    wire_duration = 0.0 if duration == float("inf") else duration
    answer, _, _, ack = _request(
        endpoint, encode_fault(spec.code, joint, wire_duration, CHANNELS[channel], values),
        {MessageType.FAULT_ACK: 6, MessageType.ERROR: 1}, timeout, "an emulator")
    if answer == MessageType.ERROR or ack[0] != 0:
        given = {"duration": duration} if kind == "jam" else (params or {})
        raise FaultError(f"emulator refused the fault: "
                         f"{_refusal(answer, ack, kind, joint, given)}")
    return FaultAck(int(ack[1]), float(ack[2]))


def _refusal(answer: MessageType, values, kind: str, joint: int, params: dict) -> str:
    """Why the emulator refused the fault ``kind`` on ``joint`` (1-based) with ``params``,
    from its answer: an ERROR's code, or a FAULT_ACK's status and the joints its plant's
    faults may name (0: not a chain, which takes sensor faults only), or what
    plant.faults.check_row says of the parameters."""
    generic = f"{ERROR_TEXT.get(int(values[0]), 'error')} (see its log)"
    if answer == MessageType.ERROR:
        return generic
    from hilrig.plant.faults import KINDS, SENSOR, check_row

    joints = int(values[5])
    if joints == 0 and KINDS[kind].family != SENSOR:
        return (f"{kind}: this plant has no joint that can take it (jams and actuator faults "
                "are modelled for chains only)")
    if joints and not 1 <= joint <= joints:
        return f"joint {joint}: this plant has {joints} joints (1..{joints})"
    return check_row(kind, params) or generic


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
