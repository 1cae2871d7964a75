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
    FAULT_ACK_VALUES,
    FAULT_PARAMS,
    FAULT_REFUSALS,
    REFUSED_CHAIN,
    REFUSED_JOINT,
    REFUSED_KIND,
    REFUSED_MOTOR,
    REFUSED_PARAM,
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
    tick: int       # the emulator tick at whose boundary the fault took effect; -1: emulated
                    # drives not stepping yet (it starts at their next tick)
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
    """Start the fault ``kind`` (plant.faults.KINDS: jam, clear, an actuator, sensor or link
    kind) on ``joint`` (1-based; a link fault's 0: the whole link) of the emulator at
    ``endpoint`` for ``duration`` s (None: a jam's 0.1 s jamming phase, else until
    cleared), with ``params`` by name (a link fault's: devices.link_faults.PARAMETERS) and
    a sensor fault's ``channel``. ValueError for a kind or parameter this tool cannot send;
    FaultError when the emulator refuses (its reason) or does not answer."""
    from hilrig.plant.faults import CHANNELS, KINDS

    spec = KINDS.get(kind)
    if spec is None:
        raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(KINDS)})")
    names = _param_names(kind)
    unknown = set(params or {}) - set(names)
    if unknown:
        raise ValueError(f"{kind}: unknown parameter {sorted(unknown)[0]!r} (known: "
                         f"{', '.join(names) or 'none'})")
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {', '.join(CHANNELS)}, got {channel!r}")
    if duration is None:
        duration = 0.1 if kind == "jam" else 0.0
    values = [(params or {}).get(name) for name in names]
    values += [None] * (FAULT_PARAMS - len(values))
    wire_duration = 0.0 if duration == float("inf") else duration
    answer, _, _, ack = _request(
        endpoint, encode_fault(spec.code, joint, wire_duration, CHANNELS[channel], values),
        {MessageType.FAULT_ACK: FAULT_ACK_VALUES, MessageType.ERROR: 1}, timeout,
        "an emulator")
    if answer == MessageType.ERROR or ack[0] != 0:
        given = {"duration": duration} if kind == "jam" else (params or {})
        raise FaultError(f"emulator refused the fault: "
                         f"{_refusal(answer, ack, kind, joint, given)}")
    return FaultAck(int(ack[1]), float(ack[2]))


def _param_names(kind: str) -> tuple:
    """The names of ``kind``'s parameters in the FAULT frame's order."""
    from hilrig.devices.link_faults import PARAMETERS
    from hilrig.plant.faults import KINDS, LINK

    return PARAMETERS[kind] if KINDS[kind].family == LINK else KINDS[kind].params


def _refusal(answer: MessageType, values, kind: str, joint: int, params: dict) -> str:
    """Why the emulator refused the fault ``kind`` on ``joint`` (1-based) with ``params``,
    in one line, from its answer: an ERROR's code, or a FAULT_ACK's status
    (drivers.wire.FAULT_REFUSALS) with the joints its plant's faults may name and the link
    kinds it takes."""
    from hilrig.devices.link_faults import check_params, devices_taking, mask_kinds
    from hilrig.plant.faults import KINDS, LINK, check_row

    status = int(values[0])
    if answer == MessageType.ERROR:
        return f"{ERROR_TEXT.get(status, f'error {status}')} (see its log)"
    link = KINDS[kind].family == LINK
    takes = ", ".join(mask_kinds(values[6])) or "none"
    if status == REFUSED_KIND:
        if link:
            return (f"{kind}: this emulator takes the link faults {takes}; {kind} is served "
                    f"by {devices_taking(kind)}")
        return (f"{kind}: these emulated drives take link faults only ({takes}); jams, "
                "actuator and sensor faults are the ZeroMQ plant server's and `hil run`'s")
    joints = int(values[5])
    if status == REFUSED_JOINT:
        if link and joints == 0:
            return f"{kind}: joint {joint}: this emulator has one link for every joint (joint 0)"
        if link:
            return f"{kind}: joint {joint}: these drives are 1..{joints} (0: every drive)"
        return f"joint {joint}: this plant has {joints} joints (1..{joints})"
    if status == REFUSED_CHAIN:
        return (f"{kind}: this plant has no joint that can take it (jams and brakes are "
                "modelled for chains only, the other actuator faults for chains, the 3RRR and "
                "the flexible chain)")
    if status == REFUSED_MOTOR:
        return (f"{kind}: this plant has no motor model (plant.drive is torque; the fault "
                "needs voltage or voltage_full)")
    if status == REFUSED_PARAM:
        if link and check_params(params):
            return f"{kind}: {check_params(params)}"
        if not link and check_row(kind, params):
            return check_row(kind, params)
    return f"{kind}: {FAULT_REFUSALS.get(status, f'status {status}')} (see its log)"


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
