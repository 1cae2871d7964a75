"""Live fault injection and e-stop from another process: ``hil fault``, ``hil estop``.

``send_fault`` sends one FAULT frame (rt.wire) to a running emulator and waits for
its FAULT_ACK, which names the tick and plant time at which the fault took effect.
``send_estop`` stops a running ``hil control`` (drives disabled, writes blocked).
"""
from __future__ import annotations

from dataclasses import dataclass

import zmq

from rt.wire import ERROR_TEXT, FAULT_CLEAR, FAULT_JAM, MessageType, WireError, decode, encode


class FaultError(RuntimeError):
    """The emulator refused the fault or did not answer."""


@dataclass(frozen=True)
class FaultAck:
    tick: int       # the emulator tick at whose boundary the fault took effect
    time: float     # its plant time, s


def send_fault(endpoint: str, kind: str, joint: int, duration: float = 0.1,
               timeout: float = 2.0) -> FaultAck:
    """Jam (over ``duration`` s) or clear ``joint`` (1-based) of the emulator at ``endpoint``."""
    if kind not in ("jam", "clear"):
        raise ValueError(f"fault kind must be 'jam' or 'clear', got {kind!r}")
    code = FAULT_JAM if kind == "jam" else FAULT_CLEAR
    context = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        socket.connect(endpoint)
        socket.send(encode(MessageType.FAULT, 0, 0.0, [code, joint, duration]))
        if not socket.poll(int(timeout * 1000)):
            raise FaultError(f"no answer from an emulator at {endpoint} within {timeout} s")
        try:
            kind_rx, _, _, values = decode(socket.recv(), {MessageType.FAULT_ACK: 5,
                                                           MessageType.ERROR: 1})
        except WireError as exc:
            raise FaultError(f"bad answer from {endpoint}: {exc}") from None
        if kind_rx == MessageType.ERROR:
            raise FaultError(f"emulator refused the fault: "
                             f"{ERROR_TEXT.get(int(values[0]), 'error')} (see its log)")
        return FaultAck(int(values[1]), float(values[2]))
    finally:
        socket.close(0)


def send_estop(endpoint: str, timeout: float = 2.0) -> int:
    """E-stop the controller (``hil control --estop-endpoint``); returns the tick it stopped at."""
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        socket.connect(endpoint)
        socket.send(encode(MessageType.ESTOP, 0, 0.0))
        if not socket.poll(int(timeout * 1000)):
            raise FaultError(f"no controller answered the e-stop at {endpoint} within {timeout} s")
        try:
            _, _, _, values = decode(socket.recv(), {MessageType.ESTOP_ACK: 1})
        except WireError as exc:
            raise FaultError(f"bad answer from {endpoint}: {exc}") from None
        return int(values[0])
    finally:
        socket.close(0)
