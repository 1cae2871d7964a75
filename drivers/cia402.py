"""The CiA 402 drive profile over CANopen (CiA 301): one object model for both roles.

What the master (drivers.canopen_link) and the emulated drive
(devices.cia402_drive) share: object indices, the device state machine
(states decoded from the statusword, controlword commands, the legal
transitions), plain-language texts for EMCY / error codes (0x603F), and the
object dictionary of a cyclic-synchronous-torque drive, built in code (it plays
the role of the drive's EDS file).

Units on the wire: position in encoder increments (motor side), velocity in
increments/s, torque in per-mille of the motor rated torque (0x6076, mN m),
current in per-mille of the motor rated current (0x6075, mA), periods in µs
(0x1006) or value * 10^index s (0x60C2), heartbeat times in ms. All multi-byte
values are little-endian.
"""
from __future__ import annotations

import enum

from canopen import objectdictionary as od

# -- object indices (CiA 301 communication profile) --------------------------------
DEVICE_TYPE = 0x1000
ERROR_REGISTER = 0x1001
SYNC_COB_ID = 0x1005
CYCLE_PERIOD = 0x1006            # U32, µs
HEARTBEAT_CONSUMER = 0x1016      # array of U32: node-id << 16 | time_ms
HEARTBEAT_PRODUCER = 0x1017      # U16, ms
IDENTITY = 0x1018
RPDO_COM, RPDO_MAP = 0x1400, 0x1600
TPDO_COM, TPDO_MAP = 0x1800, 0x1A00
N_PDO = 4                        # PDOs 1..4 of each direction
PDO_DISABLED = 1 << 31           # COB-ID bit 31: PDO not valid

# -- object indices (CiA 402 drive profile) -----------------------------------------
ERROR_CODE = 0x603F
CONTROLWORD = 0x6040
STATUSWORD = 0x6041
MODES_OF_OPERATION = 0x6060
MODES_DISPLAY = 0x6061
POSITION_ACTUAL = 0x6064         # I32, increments
VELOCITY_ACTUAL = 0x606C         # I32, increments/s
TARGET_TORQUE = 0x6071           # I16, per-mille of rated torque
MAX_TORQUE = 0x6072              # U16, per-mille of rated torque
RATED_CURRENT = 0x6075           # U32, mA
RATED_TORQUE = 0x6076            # U32, mN m
TORQUE_ACTUAL = 0x6077           # I16, per-mille of rated torque
CURRENT_ACTUAL = 0x6078          # I16, per-mille of rated current
INTERPOLATION_PERIOD = 0x60C2    # record: sub1 U8 value, sub2 I8 index (period = value 10^index s)
SUPPORTED_MODES = 0x6502

MODE_CST = 10                    # cyclic synchronous torque

# The cyclic PDO layout of one CST axis, as (index, subindex, bits) entries. Every PDO
# is synchronous (transmission type 1): TPDOs answer each SYNC, RPDOs apply at the next.
RPDO1_LAYOUT = ((CONTROLWORD, 0, 16), (TARGET_TORQUE, 0, 16))
TPDO1_LAYOUT = ((STATUSWORD, 0, 16), (POSITION_ACTUAL, 0, 32))
TPDO2_LAYOUT = ((VELOCITY_ACTUAL, 0, 32), (CURRENT_ACTUAL, 0, 16))
AXIS_PDO_BYTES = tuple(sum(bits for _, _, bits in layout) // 8
                       for layout in (RPDO1_LAYOUT, TPDO1_LAYOUT, TPDO2_LAYOUT))
DEVICE_TYPE_SERVO = 0x00020192   # profile 402, servo drive

# -- NMT (CiA 301) ------------------------------------------------------------------
NMT_START, NMT_STOP, NMT_PRE_OPERATIONAL = 0x01, 0x02, 0x80
NMT_RESET_NODE, NMT_RESET_COMMUNICATION = 0x81, 0x82
NMT_STATE_NAMES = {0x00: "BOOT-UP", 0x04: "STOPPED", 0x05: "OPERATIONAL",
                   0x7F: "PRE-OPERATIONAL"}
OPERATIONAL = 0x05


class State(enum.IntEnum):
    """The CiA 402 device states."""

    NOT_READY_TO_SWITCH_ON = 0
    SWITCH_ON_DISABLED = 1
    READY_TO_SWITCH_ON = 2
    SWITCHED_ON = 3
    OPERATION_ENABLED = 4
    QUICK_STOP_ACTIVE = 5
    FAULT_REACTION_ACTIVE = 6
    FAULT = 7

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


# (mask, value) on statusword bits 6..0, tested in this order (docs/PROTOCOLS.md §2.1)
_DECODE = ((0x4F, 0x00, State.NOT_READY_TO_SWITCH_ON), (0x4F, 0x40, State.SWITCH_ON_DISABLED),
           (0x6F, 0x21, State.READY_TO_SWITCH_ON), (0x6F, 0x23, State.SWITCHED_ON),
           (0x6F, 0x27, State.OPERATION_ENABLED), (0x6F, 0x07, State.QUICK_STOP_ACTIVE),
           (0x4F, 0x0F, State.FAULT_REACTION_ACTIVE), (0x4F, 0x08, State.FAULT))

# statusword bits 6..0 a drive shows in each state
_STATUS_BITS = {State.NOT_READY_TO_SWITCH_ON: 0x00, State.SWITCH_ON_DISABLED: 0x40,
                State.READY_TO_SWITCH_ON: 0x21, State.SWITCHED_ON: 0x23,
                State.OPERATION_ENABLED: 0x27, State.QUICK_STOP_ACTIVE: 0x07,
                State.FAULT_REACTION_ACTIVE: 0x0F, State.FAULT: 0x08}
SW_VOLTAGE_ENABLED = 1 << 4
SW_REMOTE = 1 << 9
SW_FOLLOWS_COMMAND = 1 << 12     # CST: the drive follows the target torque


def decode_state(statusword: int) -> State | None:
    """The device state a statusword shows, or None if no pattern matches."""
    for mask, value, state in _DECODE:
        if statusword & mask == value:
            return state
    return None


def statusword(state: State, follows_command: bool = False) -> int:
    """The statusword a drive in ``state`` sends (voltage enabled, remote)."""
    word = _STATUS_BITS[state] | SW_REMOTE
    if state != State.NOT_READY_TO_SWITCH_ON:
        word |= SW_VOLTAGE_ENABLED      # the supply is on
    if follows_command and state == State.OPERATION_ENABLED:
        word |= SW_FOLLOWS_COMMAND
    return word


# -- controlword commands (docs/PROTOCOLS.md §2.2) ----------------------------------
CW_SHUTDOWN = 0x0006
CW_SWITCH_ON = 0x0007            # also "disable operation" from OPERATION ENABLED
CW_ENABLE_OPERATION = 0x000F
CW_DISABLE_VOLTAGE = 0x0000
CW_QUICK_STOP = 0x0002
CW_FAULT_RESET = 0x0080          # acts on the rising edge of bit 7


def command_name(controlword: int) -> str:
    """The device-control command a controlword encodes (bits 7, 3..0)."""
    if controlword & 0x0080:
        return "fault reset"
    if controlword & 0x0002 == 0:
        return "disable voltage"
    if controlword & 0x0004 == 0:
        return "quick stop"
    if controlword & 0x0007 == 0x0006:
        return "shutdown"
    if controlword & 0x000F == 0x0007:
        return "switch on / disable operation"
    if controlword & 0x000F == 0x000F:
        return "enable operation"
    return "no command"


def next_state(state: State, controlword: int, previous: int = 0) -> tuple[State, int | None]:
    """Apply one controlword to the state machine (a drive's view).

    Args:
        state: current device state.
        controlword: the new controlword (0x6040).
        previous: the controlword before it (fault reset acts on a rising bit 7).
    Returns:
        (new state, CiA 402 transition number), or (state, None) when the
        command is not a legal transition from ``state`` (the drive ignores it).
    """
    cw = controlword
    disable_voltage = cw & 0x0002 == 0
    quick_stop = cw & 0x0006 == 0x0002
    shutdown = cw & 0x0087 == 0x0006
    switch_on = cw & 0x008F == 0x0007
    enable = cw & 0x008F == 0x000F
    if state == State.FAULT:
        if cw & 0x0080 and not previous & 0x0080:
            return State.SWITCH_ON_DISABLED, 15
        return state, None
    if state == State.SWITCH_ON_DISABLED:
        return (State.READY_TO_SWITCH_ON, 2) if shutdown else (state, None)
    if state == State.READY_TO_SWITCH_ON:
        if switch_on:
            return State.SWITCHED_ON, 3
        if enable:
            return State.OPERATION_ENABLED, 3   # 3 + 4 in one go
        if disable_voltage or quick_stop:
            return State.SWITCH_ON_DISABLED, 7
        return state, None
    if state == State.SWITCHED_ON:
        if enable:
            return State.OPERATION_ENABLED, 4
        if shutdown:
            return State.READY_TO_SWITCH_ON, 6
        if disable_voltage or quick_stop:
            return State.SWITCH_ON_DISABLED, 10
        return state, None
    if state == State.OPERATION_ENABLED:
        if switch_on:
            return State.SWITCHED_ON, 5
        if shutdown:
            return State.READY_TO_SWITCH_ON, 8
        if disable_voltage:
            return State.SWITCH_ON_DISABLED, 9
        if quick_stop:
            return State.QUICK_STOP_ACTIVE, 11
        return state, None
    if state == State.QUICK_STOP_ACTIVE:
        if disable_voltage:
            return State.SWITCH_ON_DISABLED, 12
        if enable:
            return State.OPERATION_ENABLED, 16
        return state, None
    return state, None   # NOT READY, FAULT REACTION: automatic transitions only


# -- error codes (EMCY, 0x603F) in plain language ----------------------------------
ERROR_TEXTS = {
    0x0000: "no error (error reset)",
    0x1000: "generic error",
    0x2310: "continuous over-current: the motor current stayed above its rating (I2t limit)",
    0x2320: "short circuit at the motor terminals",
    0x3210: "DC-link over-voltage",
    0x3220: "DC-link under-voltage: the supply is too low or missing",
    0x4310: "drive over-temperature",
    0x5000: "drive hardware error",
    0x6100: "internal software error of the drive",
    0x6320: "parameter error: a configuration value was rejected",
    0x7121: "motor blocked",
    0x7300: "position sensor (encoder) error",
    0x8110: "CAN overrun: the drive lost frames",
    0x8120: "CAN error passive: the bus has errors",
    0x8130: "heartbeat of the controller lost (life guard error): the drive stopped itself",
    0x8140: "the drive recovered from bus-off",
    0x8250: "RPDO timeout: set-points stopped arriving",
    0x8611: "following error too large",
}
_ERROR_CLASSES = ((0xF000, 0x2000, "current"), (0xF000, 0x3000, "voltage"),
                  (0xF000, 0x4000, "temperature"), (0xFF00, 0x5000, "drive hardware"),
                  (0xF000, 0x6000, "drive software"), (0xFF00, 0x7000, "additional module"),
                  (0xF000, 0x8000, "monitoring (communication or control)"),
                  (0xFF00, 0x9000, "external error"), (0xFF00, 0xFF00, "manufacturer-specific"))


def describe_error(code: int) -> str:
    """A plain-language text for an EMCY / 0x603F error code."""
    if code in ERROR_TEXTS:
        return ERROR_TEXTS[code]
    for mask, value, text in _ERROR_CLASSES:
        if code & mask == value:
            return f"{text} error (code not in the profile table; see the drive manual)"
    return "unknown error code (see the drive manual)"


# -- the object dictionary -----------------------------------------------------------

def _var(name: str, index: int, subindex: int, data_type: int, access: str = "rw",
         default: int = 0) -> od.ODVariable:
    var = od.ODVariable(name, index, subindex)
    var.data_type, var.access_type, var.default = data_type, access, default
    return var


def _record(name: str, index: int, members) -> od.ODRecord:
    rec = od.ODRecord(name, index)
    for var in members:
        rec.add_member(var)
    return rec


def object_dictionary(node_id: int, rated_torque_mnm: int = 1000, rated_current_ma: int = 1000,
                      max_torque: int = 3000) -> od.ObjectDictionary:
    """The object dictionary of a CST drive at ``node_id`` (the role of its EDS file).

    Args:
        node_id: 1..127; the default PDO COB-IDs follow the predefined connection set.
        rated_torque_mnm: 0x6076, motor rated torque, mN m.
        rated_current_ma: 0x6075, motor rated current, mA.
        max_torque: 0x6072, torque limit, per-mille of the rated torque.
    """
    d = od.ObjectDictionary()
    U8, U16, U32, I8, I16, I32 = (od.UNSIGNED8, od.UNSIGNED16, od.UNSIGNED32, od.INTEGER8,
                                  od.INTEGER16, od.INTEGER32)
    for var in (_var("Device type", DEVICE_TYPE, 0, U32, "ro", DEVICE_TYPE_SERVO),
                _var("Error register", ERROR_REGISTER, 0, U8, "ro"),
                _var("COB-ID SYNC", SYNC_COB_ID, 0, U32, "rw", 0x80),
                _var("Communication cycle period", CYCLE_PERIOD, 0, U32),
                _var("Producer heartbeat time", HEARTBEAT_PRODUCER, 0, U16),
                _var("Error code", ERROR_CODE, 0, U16, "ro"),
                _var("Controlword", CONTROLWORD, 0, U16),
                _var("Statusword", STATUSWORD, 0, U16, "ro"),
                _var("Modes of operation", MODES_OF_OPERATION, 0, I8),
                _var("Modes of operation display", MODES_DISPLAY, 0, I8, "ro"),
                _var("Position actual value", POSITION_ACTUAL, 0, I32, "ro"),
                _var("Velocity actual value", VELOCITY_ACTUAL, 0, I32, "ro"),
                _var("Target torque", TARGET_TORQUE, 0, I16),
                _var("Max torque", MAX_TORQUE, 0, U16, "rw", max_torque),
                _var("Motor rated current", RATED_CURRENT, 0, U32, "rw", rated_current_ma),
                _var("Motor rated torque", RATED_TORQUE, 0, U32, "rw", rated_torque_mnm),
                _var("Torque actual value", TORQUE_ACTUAL, 0, I16, "ro"),
                _var("Current actual value", CURRENT_ACTUAL, 0, I16, "ro"),
                _var("Supported drive modes", SUPPORTED_MODES, 0, U32, "ro", 1 << 9)):
        d.add_object(var)
    consumer = od.ODArray("Consumer heartbeat time", HEARTBEAT_CONSUMER)
    consumer.add_member(_var("Number of entries", HEARTBEAT_CONSUMER, 0, U8, "ro", 1))
    consumer.add_member(_var("Consumer heartbeat time 1", HEARTBEAT_CONSUMER, 1, U32))
    d.add_object(consumer)
    d.add_object(_record("Identity object", IDENTITY, (
        _var("Highest sub-index", IDENTITY, 0, U8, "ro", 4),
        _var("Vendor-ID", IDENTITY, 1, U32, "ro", 0),
        _var("Product code", IDENTITY, 2, U32, "ro", 0x402),
        _var("Revision number", IDENTITY, 3, U32, "ro", 1),
        _var("Serial number", IDENTITY, 4, U32, "ro", node_id))))
    d.add_object(_record("Interpolation time period", INTERPOLATION_PERIOD, (
        _var("Highest sub-index", INTERPOLATION_PERIOD, 0, U8, "ro", 2),
        _var("Interpolation time period value", INTERPOLATION_PERIOD, 1, U8, "rw", 1),
        _var("Interpolation time index", INTERPOLATION_PERIOD, 2, I8, "rw", -3))))
    for k in range(N_PDO):
        for com, mapping, base, kind in ((RPDO_COM, RPDO_MAP, 0x200, "RPDO"),
                                         (TPDO_COM, TPDO_MAP, 0x180, "TPDO")):
            cob_id = base + 0x100 * k + node_id | (PDO_DISABLED if k else 0)
            com_vars = [_var("Highest sub-index", com + k, 0, U8, "ro", 6 if kind == "TPDO" else 5),
                        _var("COB-ID", com + k, 1, U32, "rw", cob_id),
                        _var("Transmission type", com + k, 2, U8, "rw", 255),
                        _var("Inhibit time", com + k, 3, U16),
                        _var("Event timer", com + k, 5, U16)]
            if kind == "TPDO":
                com_vars.append(_var("SYNC start value", com + k, 6, U8))
            d.add_object(_record(f"{kind}{k + 1} communication parameter", com + k, com_vars))
            d.add_object(_record(f"{kind}{k + 1} mapping parameter", mapping + k,
                                 [_var("Number of mapped objects", mapping + k, 0, U8)]
                                 + [_var(f"Mapped object {s}", mapping + k, s, U32)
                                    for s in range(1, 9)]))
    return d


def interpolation_period(period: float) -> tuple[int, int]:
    """0x60C2 (value, index) with value * 10^index = period s exactly (value <= 255).

    Raises ValueError if no such pair exists (e.g. 0.3333 ms).
    """
    for index in range(0, -7, -1):
        value = period / 10.0 ** index
        if 1 <= round(value) <= 255 and abs(value - round(value)) < 1e-6 * value:
            return int(round(value)), index
    raise ValueError(f"a period of {period} s has no exact 0x60C2 form value * 10^index "
                     "(value 1..255, index 0..-6)")
