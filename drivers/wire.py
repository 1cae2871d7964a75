"""The ZeroMQ wire format between controller, emulator and fault tool (docs/WIRE.md).

Every message is one ZeroMQ frame: a 28-byte little-endian header, then
``count`` float64 values (little-endian). No pickle, no text parsing: a frame
is accepted only if its magic, version, type, length and count check out.

Header (``struct`` format ``<4sHHQdI``):
    magic   4 bytes  b"HILR"
    version uint16   WIRE_VERSION
    type    uint16   one of MessageType
    seq     uint64   sender's sequence number (tick for STATE and COMMAND)
    time    float64  plant time the message refers to, s
    count   uint32   number of float64 values that follow (<= MAX_VALUES)
"""
from __future__ import annotations

import enum
import struct

import numpy as np

MAGIC = b"HILR"
# 2: the FAULT frame carries any fault kind (plant.faults.KINDS); 3: FAULT_ACK says why a
# fault was refused (FAULT_REFUSALS) and which link kinds the device takes
WIRE_VERSION = 3
HEADER = struct.Struct("<4sHHQdI")
MAX_VALUES = 1024


class MessageType(enum.IntEnum):
    HELLO = 1       # controller -> emulator: [n_axes]
    WELCOME = 2     # emulator -> controller: [mode (0 free, 1 lockstep), n_axes, dt (s), voltage (1) or torque (0)]
    COMMAND = 3     # controller -> emulator: u per axis (V or N m); seq = controller tick
    STATE = 4       # emulator -> controller: [t, pos (n), vel (n), current (n)]; seq = emulator tick
    FAULT = 5       # tool -> emulator: FAULT_VALUES values (encode_fault)
    FAULT_ACK = 6   # emulator -> tool: FAULT_ACK_VALUES values: [status (0 ok, else a FAULT_REFUSALS code), tick, plant time (s), kind, joint, joints of the plant (0: none can jam), link kinds the device takes (bit i: kind code 30 + i)]
    BYE = 7         # controller -> emulator: the session ends; the plant goes to its safe state
    ERROR = 8       # emulator -> peer: [ERROR_* code] for a message it rejected
    ESTOP = 9       # tool -> controller (hil control --estop-endpoint): [] or [stop category 0, 1, 2 (IEC 60204-1)]; none: 0
    ESTOP_ACK = 10  # controller -> tool: [tick at which the stop began]
    TAKEOVER = 11   # controller -> emulator: [n_axes]; a HELLO that replaces a live controller
    STOP = 12       # controller -> emulator: [stop category 1 or 2 (IEC 60204-1), stop time (s)]: the drives bring the joints to rest, then 1 removes the power, 2 holds; COMMANDs no longer move the plant


# FAULT: [kind code (plant.faults.KINDS: 1 jam, 2 clear, 10-17 actuator, 20-26 sensor,
# 30-37 link, reserved for the emulated devices), joint (1-based), duration (s; 0: until
# cleared; a jam's: its jamming phase), channel (0 position, 1 rate, 2 current), mask (bit i:
# parameter i given, else the kind's default), parameters 0..3 (the kind's, in order)]
FAULT_VALUES = 9
FAULT_PARAMS = 4
FAULT_ACK_VALUES = 7
LINK_CODE0 = 30      # kind code of the first link fault (bit 0 of a FAULT_ACK's link kinds)


def encode_fault(code: int, joint: int, duration: float, channel: int, params) -> bytes:
    """A FAULT frame: ``params`` a sequence of FAULT_PARAMS values, None where not given."""
    mask = sum(1 << i for i, v in enumerate(params) if v is not None)
    values = [code, joint, duration, channel, mask] + [0.0 if v is None else v for v in params]
    return encode(MessageType.FAULT, 0, 0.0, values)


def decode_fault(values) -> tuple[int, int, float, int, list]:
    """(kind code, joint, duration s (inf: until cleared), channel, parameters with None
    where not given) of a FAULT frame's values; WireError (ERROR_VALUE) naming a field that
    is not a whole number in range or a negative duration."""
    code, joint, duration, channel, mask = (float(v) for v in values[:5])
    for name, value, top in (("kind", code, 99), ("joint", joint, MAX_VALUES),
                             ("channel", channel, 2), ("mask", mask, 2 ** FAULT_PARAMS - 1)):
        if value != int(value) or not 0 <= value <= top:
            raise WireError(ERROR_VALUE, f"FAULT {name} {value!r}: a whole number 0..{top}")
    if duration < 0.0:
        raise WireError(ERROR_VALUE, f"FAULT duration {duration!r} s: must be >= 0")
    params = [float(values[5 + i]) if int(mask) >> i & 1 else None for i in range(FAULT_PARAMS)]
    return int(code), int(joint), duration if duration > 0.0 or code == 1 else float("inf"), \
        int(channel), params

ERROR_MALFORMED = 1
ERROR_VERSION = 2
ERROR_TYPE = 3
ERROR_SIZE = 4
ERROR_VALUE = 5
ERROR_STATE = 6
ERROR_BUSY = 7
ERROR_TEXT = {ERROR_MALFORMED: "malformed message", ERROR_VERSION: "wrong wire version",
              ERROR_TYPE: "unknown or unexpected message type", ERROR_SIZE: "wrong payload size",
              ERROR_VALUE: "invalid value", ERROR_STATE: "not allowed in this state",
              ERROR_BUSY: "another controller commands this plant (take it over explicitly: "
                          "hil control --takeover, hilrig.connect(..., takeover=True))"}
# why a FAULT was refused: a FAULT_ACK's status (besides ERROR_VALUE, a field out of range)
REFUSED_KIND = 20       # this device does not take this kind (the ACK's last value: what it takes)
REFUSED_JOINT = 21      # no such joint (the ACK's joints value: how many there are)
REFUSED_CHAIN = 22      # a jam or actuator fault the plant does not model (plant.faults.plant_refusal)
REFUSED_MOTOR = 23      # a winding or supply fault on a plant without a motor model
REFUSED_PARAM = 24      # a parameter out of its range
REFUSED_FULL = 25       # no room for another live fault
FAULT_REFUSALS = {REFUSED_KIND: "the device does not take this kind",
                  REFUSED_JOINT: "no such joint",
                  REFUSED_CHAIN: "the plant does not model this jam or actuator fault",
                  REFUSED_MOTOR: "the fault needs a motor model (plant.drive voltage or "
                                 "voltage_full)",
                  REFUSED_PARAM: "a parameter out of its range",
                  REFUSED_FULL: "no room for another live fault",
                  ERROR_VALUE: "a FAULT field out of range"}


class WireError(ValueError):
    """A frame that does not follow the wire format; ``code`` is an ERROR_* value."""

    def __init__(self, code: int, detail: str):
        super().__init__(f"{ERROR_TEXT[code]}: {detail}")
        self.code = code
        self.detail = detail


def encode(kind: MessageType, seq: int, time: float, values=()) -> bytes:
    """One frame. ``values``: float64-convertible sequence (at most MAX_VALUES)."""
    payload = np.ascontiguousarray(values, dtype="<f8").ravel()
    if len(payload) > MAX_VALUES:
        raise WireError(ERROR_SIZE, f"{len(payload)} values > {MAX_VALUES}")
    return HEADER.pack(MAGIC, WIRE_VERSION, int(kind), int(seq), float(time),
                       len(payload)) + payload.tobytes()


def decode(frame: bytes, expected: dict | None = None):
    """(type, seq, time, values) of a frame, or WireError naming what is wrong.

    ``expected``: optional {type: payload count} — a type not in it, or with
    another count, is rejected.
    """
    if len(frame) < HEADER.size:
        raise WireError(ERROR_MALFORMED, f"{len(frame)} bytes, shorter than the "
                                         f"{HEADER.size}-byte header")
    magic, version, kind, seq, time, count = HEADER.unpack_from(frame)
    if magic != MAGIC:
        raise WireError(ERROR_MALFORMED, f"bad magic {magic!r}")
    if version != WIRE_VERSION:
        raise WireError(ERROR_VERSION, f"version {version}, this end speaks {WIRE_VERSION}")
    if count > MAX_VALUES:
        raise WireError(ERROR_SIZE, f"count {count} > {MAX_VALUES}")
    if len(frame) != HEADER.size + 8 * count:
        raise WireError(ERROR_SIZE, f"{len(frame)} bytes for count {count} (expected "
                                    f"{HEADER.size + 8 * count})")
    try:
        kind = MessageType(kind)
    except ValueError:
        raise WireError(ERROR_TYPE, f"type {kind}") from None
    if expected is not None:
        if kind not in expected:
            raise WireError(ERROR_TYPE, f"{kind.name} not expected here")
        if expected[kind] is not None and count != expected[kind]:
            raise WireError(ERROR_SIZE, f"{kind.name} with {count} values, expected "
                                        f"{expected[kind]}")
    values = np.frombuffer(frame, dtype="<f8", count=count, offset=HEADER.size)
    if not np.all(np.isfinite(values)):
        raise WireError(ERROR_VALUE, f"{kind.name} carries a non-finite value")
    return kind, seq, time, values
