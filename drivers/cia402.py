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
ABORT_CONNECTION = 0x6007        # I16, abort connection option code: reaction to a lost link
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
    0x8100: "communication error: the drive lost its SYNC (none within its SYNC timeout)",
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

ERROR_HISTORY = 0x1003           # pre-defined error field: sub0 count, sub1 newest
DEVICE_NAME, HARDWARE_VERSION, SOFTWARE_VERSION = 0x1008, 0x1009, 0x100A
QUICK_STOP_OPTION = 0x605A       # I16
QUICK_STOP_DECELERATION = 0x6085  # U32, increments/s^2 (0: the emulated drive's own ramp)
MAX_CURRENT = 0x6073             # U16, per-mille of the rated current
ERROR_HISTORY_DEPTH = 8
DEVICE_NAME_TEXT = "hilrig emulated CiA 402 drive"
HARDWARE_VERSION_TEXT = "emulated"
SOFTWARE_VERSION_TEXT = "hilrig"
VENDOR_ID = 0                    # no CiA vendor-id: an emulator
PRODUCT_CODE = 0x402

# Supported modes 0x6502: bit m-1 for mode m (CiA 402); the emulated drive has CST only.
SUPPORTED_MODE_BITS = 1 << (MODE_CST - 1)

# The drive's default PDO mapping (what it has after a reset, before any master remaps):
# event-driven (transmission type 255: TPDOs sent on the event timer and when the
# statusword changes, RPDO data applied on reception), so a master that sends no SYNC
# still sees the arm move. COB-IDs of the predefined connection set; PDOs 3 and 4 off.
DEFAULT_RPDOS = {1: RPDO1_LAYOUT}
DEFAULT_TPDOS = {1: TPDO1_LAYOUT, 2: ((VELOCITY_ACTUAL, 0, 32), (TORQUE_ACTUAL, 0, 16))}
EVENT_DRIVEN = 255               # transmission type: manufacturer-specific event
_PDO_MAPPABLE_RX = {CONTROLWORD, MODES_OF_OPERATION, TARGET_TORQUE, MAX_TORQUE}
_PDO_MAPPABLE_TX = {STATUSWORD, MODES_DISPLAY, POSITION_ACTUAL, VELOCITY_ACTUAL,
                    TORQUE_ACTUAL, CURRENT_ACTUAL, ERROR_CODE, ERROR_REGISTER}


def _var(name: str, index: int, subindex: int, data_type: int, access: str = "rw",
         default=0, mappable: bool = False) -> od.ODVariable:
    var = od.ODVariable(name, index, subindex)
    var.data_type, var.access_type, var.default = data_type, access, default
    var.pdo_mappable = mappable
    return var


def _record(name: str, index: int, members, kind=od.ODRecord):
    rec = kind(name, index)
    for var in members:
        rec.add_member(var)
    return rec


def object_dictionary(node_id: int, rated_torque_mnm: int = 1000, rated_current_ma: int = 1000,
                      max_torque: int = 3000, heartbeat_ms: int = 0,
                      event_timer_ms: int = 10) -> od.ObjectDictionary:
    """The object dictionary of a CST drive at ``node_id`` (the role of its EDS file).

    Args:
        node_id: 1..127; the default PDO COB-IDs follow the predefined connection set.
        rated_torque_mnm: 0x6076, motor rated torque, mN m.
        rated_current_ma: 0x6075, motor rated current, mA.
        max_torque: 0x6072, torque limit, per-mille of the rated torque.
        heartbeat_ms: 0x1017 at power-on, ms (0: no heartbeat until a master writes it).
        event_timer_ms: event timer (sub-index 5) of the default TPDOs, ms.

    Objects a master may map into PDOs carry ``pdo_mappable`` (``PDOMapping=1`` in the
    EDS): 0x6040, 0x6060, 0x6071, 0x6072 into RPDOs, the actual values, statusword, mode
    display and error code into TPDOs.
    """
    d = od.ObjectDictionary()
    d.node_id = node_id
    info = d.device_information
    info.vendor_name, info.vendor_number = "hilrig", VENDOR_ID
    info.product_name, info.product_number = DEVICE_NAME_TEXT, PRODUCT_CODE
    info.revision_number, info.order_code = 1, "emulated"
    info.simple_boot_up_master, info.simple_boot_up_slave = False, True
    info.granularity = 8                         # PDO mapping in whole bytes
    info.dynamic_channels_supported, info.group_messaging = False, False
    info.nr_of_RXPDO, info.nr_of_TXPDO = N_PDO, N_PDO
    info.LSS_supported = False
    info.allowed_baudrates = {125e3, 250e3, 500e3, 1000e3}
    U8, U16, U32, I8, I16, I32, TEXT = (od.UNSIGNED8, od.UNSIGNED16, od.UNSIGNED32,
                                        od.INTEGER8, od.INTEGER16, od.INTEGER32,
                                        od.VISIBLE_STRING)
    rx, tx = _PDO_MAPPABLE_RX, _PDO_MAPPABLE_TX
    for index, name, data_type, access, default in (
            (DEVICE_TYPE, "Device type", U32, "ro", DEVICE_TYPE_SERVO),
            (ERROR_REGISTER, "Error register", U8, "ro", 0),
            (SYNC_COB_ID, "COB-ID SYNC", U32, "rw", 0x80),
            (CYCLE_PERIOD, "Communication cycle period", U32, "rw", 0),
            (DEVICE_NAME, "Manufacturer device name", TEXT, "const", DEVICE_NAME_TEXT),
            (HARDWARE_VERSION, "Manufacturer hardware version", TEXT, "const",
             HARDWARE_VERSION_TEXT),
            (SOFTWARE_VERSION, "Manufacturer software version", TEXT, "const",
             SOFTWARE_VERSION_TEXT),
            (HEARTBEAT_PRODUCER, "Producer heartbeat time", U16, "rw", heartbeat_ms),
            (ERROR_CODE, "Error code", U16, "ro", 0),
            (CONTROLWORD, "Controlword", U16, "rw", 0),
            (STATUSWORD, "Statusword", U16, "ro", 0),
            (QUICK_STOP_OPTION, "Quick stop option code", I16, "rw", 2),
            (QUICK_STOP_DECELERATION, "Quick stop deceleration", U32, "rw", 0),
            (ABORT_CONNECTION, "Abort connection option code", I16, "rw", 1),
            (MODES_OF_OPERATION, "Modes of operation", I8, "rw", 0),
            (MODES_DISPLAY, "Modes of operation display", I8, "ro", 0),
            (POSITION_ACTUAL, "Position actual value", I32, "ro", 0),
            (VELOCITY_ACTUAL, "Velocity actual value", I32, "ro", 0),
            (TARGET_TORQUE, "Target torque", I16, "rw", 0),
            (MAX_TORQUE, "Max torque", U16, "rw", max_torque),
            (MAX_CURRENT, "Max current", U16, "rw", max_torque),
            (RATED_CURRENT, "Motor rated current", U32, "rw", rated_current_ma),
            (RATED_TORQUE, "Motor rated torque", U32, "rw", rated_torque_mnm),
            (TORQUE_ACTUAL, "Torque actual value", I16, "ro", 0),
            (CURRENT_ACTUAL, "Current actual value", I16, "ro", 0),
            (SUPPORTED_MODES, "Supported drive modes", U32, "ro", SUPPORTED_MODE_BITS)):
        mappable = index in (rx if access == "rw" else tx)
        d.add_object(_var(name, index, 0, data_type, access, default, mappable))
    history = [_var("Number of errors", ERROR_HISTORY, 0, U8, "rw", 0)]
    history += [_var(f"Standard error field {s}", ERROR_HISTORY, s, U32, "ro", 0)
                for s in range(1, ERROR_HISTORY_DEPTH + 1)]
    d.add_object(_record("Pre-defined error field", ERROR_HISTORY, history, od.ODArray))
    d.add_object(_record("Consumer heartbeat time", HEARTBEAT_CONSUMER, (
        _var("Number of entries", HEARTBEAT_CONSUMER, 0, U8, "ro", 1),
        _var("Consumer heartbeat time 1", HEARTBEAT_CONSUMER, 1, U32)), od.ODArray))
    d.add_object(_record("Identity object", IDENTITY, (
        _var("Highest sub-index", IDENTITY, 0, U8, "ro", 4),
        _var("Vendor-ID", IDENTITY, 1, U32, "ro", VENDOR_ID),
        _var("Product code", IDENTITY, 2, U32, "ro", PRODUCT_CODE),
        _var("Revision number", IDENTITY, 3, U32, "ro", 1),
        _var("Serial number", IDENTITY, 4, U32, "ro", node_id))))
    d.add_object(_record("Interpolation time period", INTERPOLATION_PERIOD, (
        _var("Highest sub-index", INTERPOLATION_PERIOD, 0, U8, "ro", 2),
        _var("Interpolation time period value", INTERPOLATION_PERIOD, 1, U8, "rw", 1),
        _var("Interpolation time index", INTERPOLATION_PERIOD, 2, I8, "rw", -3))))
    for k in range(N_PDO):
        for com, mapping, base, kind, defaults in (
                (RPDO_COM, RPDO_MAP, 0x200, "RPDO", DEFAULT_RPDOS),
                (TPDO_COM, TPDO_MAP, 0x180, "TPDO", DEFAULT_TPDOS)):
            layout = defaults.get(k + 1, ())
            cob_id = base + 0x100 * k + node_id | (0 if layout else PDO_DISABLED)
            com_vars = [_var("Highest sub-index", com + k, 0, U8, "ro",
                             6 if kind == "TPDO" else 5),
                        _var("COB-ID", com + k, 1, U32, "rw", cob_id),
                        _var("Transmission type", com + k, 2, U8, "rw", EVENT_DRIVEN),
                        _var("Inhibit time", com + k, 3, U16),
                        _var("Event timer", com + k, 5, U16, "rw",
                             event_timer_ms if kind == "TPDO" and layout else 0)]
            if kind == "TPDO":
                com_vars.append(_var("SYNC start value", com + k, 6, U8))
            d.add_object(_record(f"{kind}{k + 1} communication parameter", com + k, com_vars))
            entries = [index << 16 | subindex << 8 | bits for index, subindex, bits in layout]
            d.add_object(_record(f"{kind}{k + 1} mapping parameter", mapping + k,
                                 [_var("Number of mapped objects", mapping + k, 0, U8, "rw",
                                       len(entries))]
                                 + [_var(f"Mapped object {s}", mapping + k, s, U32, "rw",
                                         entries[s - 1] if s <= len(entries) else 0)
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
