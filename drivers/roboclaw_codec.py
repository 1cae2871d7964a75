"""RoboClaw packet serial: frames, CRC16 and the commands this project uses.

Frames (docs/PROTOCOLS.md §5.1; all multi-byte fields big-endian, CRC high byte first):

- write request ``[address, command, data..., crc_hi, crc_lo]``, CRC over address,
  command and data; the reply is one byte ``0xFF`` (ACK) if the packet was valid,
  nothing at all if it was not.
- read request ``[address, command]`` (no CRC); the reply is ``[data..., crc_hi,
  crc_lo]`` with the CRC over the *sent* address and command followed by the data.

CRC16: CRC-16/XMODEM (polynomial 0x1021, initial 0, no reflection, no final XOR),
``binascii.crc_hqx(data, 0)``; crc16(b"123456789") = 0x31C3.

Both roles use this module: the link encodes requests and decodes replies, the
emulated drive decodes requests and encodes replies. Parsing errors raise
``FrameError`` naming the command, the address and the cause.
"""
from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass

from hilrig.drivers.link import LinkError

ACK = 0xFF
DUTY_FULL = 32767           # duty value of +100 %
ADDRESSES = range(0x80, 0x88)


class FrameError(LinkError):
    """A frame is malformed: bad CRC, truncated, wrong length, or not an ACK."""


class CrcError(FrameError):
    """A complete reply corrupted on the line: its CRC does not check, or a write's
    acknowledgement is a byte other than ACK (an ACK carries no CRC of its own)."""


@dataclass(frozen=True)
class Command:
    """One packet-serial command.

    request: struct format of the data sent after address and command ("" for none).
    reply: struct format of the data received before the CRC; None for a write,
    which is answered by a single ACK byte.
    """

    code: int
    name: str
    request: struct.Struct
    reply: struct.Struct | None

    @property
    def is_read(self) -> bool:
        return self.reply is not None

    @property
    def request_length(self) -> int:
        """Bytes of the request frame: 2 for a read, 2 + data + 2 (CRC) for a write."""
        return 2 if self.is_read else 4 + self.request.size

    @property
    def reply_length(self) -> int:
        """Bytes of the reply frame: data + 2 (CRC) for a read, 1 (ACK) for a write."""
        return self.reply.size + 2 if self.is_read else 1


def _command(code: int, name: str, request: str, reply: str | None) -> Command:
    return Command(code, name, struct.Struct(">" + request),
                   None if reply is None else struct.Struct(">" + reply))


# Units (docs/PROTOCOLS.md §5.2): counts, counts/s, duty ±32767 = ±100 %, currents in
# 10 mA, voltages in 0.1 V, temperatures in 0.1 degC, serial timeout in 100 ms. Request and
# reply layouts checked against the basicmicro library (2.0.10). Status byte of 16/17:
# bit0 underflow, bit1 backwards, bit2 overflow; of 18/19: 1 = backwards.
SET_SERIAL_TIMEOUT = _command(14, "SetSerialTimeout", "B", None)
GET_TIMEOUT = _command(15, "GetTimeout", "", "B")            # serial timeout, 0.1 s
RESET_ENCODERS = _command(20, "ResetEncoders", "", None)     # both channels to 0
# ReadVersion answers a text ending in "\n" and a NUL (at most 48 bytes); the emulated
# device's text is fixed, so its reply has a fixed length.
VERSION_TEXT = b"USB Roboclaw 2x15a v4.2.8 (hilrig emulated)\n\0"
READ_VERSION = _command(21, "ReadVersion", "", f"{len(VERSION_TEXT)}s")
SET_ENC_M1 = _command(22, "SetEncM1", "I", None)             # count (uint32)
SET_ENC_M2 = _command(23, "SetEncM2", "I", None)
READ_LOGIC_BATTERY = _command(25, "ReadLogicBatteryVoltage", "", "H")   # 0.1 V
# Velocity PID of a channel: gains in 16.16 fixed point, QPPS (counts/s at full duty).
# The set command sends D, P, I, QPPS; the read command answers P, I, D, QPPS.
SET_M1_VELOCITY_PID = _command(28, "SetM1VelocityPID", "IIII", None)
SET_M2_VELOCITY_PID = _command(29, "SetM2VelocityPID", "IIII", None)
SPEED_M1 = _command(35, "SpeedM1", "i", None)                # counts/s
SPEED_M2 = _command(36, "SpeedM2", "i", None)
SPEED_M1M2 = _command(37, "SpeedM1M2", "ii", None)
SPEED_ACCEL_M1 = _command(38, "SpeedAccelM1", "Ii", None)    # accel counts/s^2, speed
SPEED_ACCEL_M2 = _command(39, "SpeedAccelM2", "Ii", None)
SPEED_ACCEL_M1M2 = _command(40, "SpeedAccelM1M2", "Iii", None)
READ_M1_VELOCITY_PID = _command(55, "ReadM1VelocityPID", "", "IIII")
READ_M2_VELOCITY_PID = _command(56, "ReadM2VelocityPID", "", "IIII")
GET_ENCODERS = _command(78, "GetEncoders", "", "II")         # M1, M2 counts (uint32)
GET_ISPEEDS = _command(79, "GetISpeeds", "", "ii")           # instantaneous, counts/s
READ_TEMP = _command(82, "ReadTemp", "", "H")                # 0.1 degC
GET_SPEEDS = _command(108, "GetSpeeds", "", "ii")            # counts/s
READ_ENC_M1 = _command(16, "ReadEncM1", "", "IB")            # count (uint32), status
READ_ENC_M2 = _command(17, "ReadEncM2", "", "IB")
READ_SPEED_M1 = _command(18, "ReadSpeedM1", "", "iB")        # counts/s (int32), status
READ_SPEED_M2 = _command(19, "ReadSpeedM2", "", "iB")
READ_MAIN_BATTERY = _command(24, "ReadMainBattery", "", "H")  # 0.1 V
DUTY_M1 = _command(32, "DutyM1", "h", None)
DUTY_M2 = _command(33, "DutyM2", "h", None)
DUTY_M1M2 = _command(34, "DutyM1M2", "hh", None)
READ_CURRENTS = _command(49, "ReadCurrents", "", "hh")       # M1, M2 in 10 mA
READ_STATUS = _command(90, "ReadStatus", "", "I")            # 32-bit status word
SET_M1_MAX_CURRENT = _command(133, "SetM1MaxCurrent", "II", None)   # max, min (10 mA)
SET_M2_MAX_CURRENT = _command(134, "SetM2MaxCurrent", "II", None)
# The position mode and its companions (issue 26), as basicmicro 2.0.10 sends and parses
# them; the RoboClaw manual lists the same numbers and fields (GetStatus, 73, is only in
# the library: its layout is the library's).
GET_ISPEED_M1 = _command(30, "ReadISpeedM1", "", "iB")       # counts/s (int32), 1 = backwards
GET_ISPEED_M2 = _command(31, "ReadISpeedM2", "", "iB")
GET_BUFFERS = _command(47, "ReadBuffers", "", "BB")          # queued per channel; 0x80 idle
GET_PWMS = _command(48, "ReadPWMs", "", "hh")                # duty applied, +-32767
DUTY_ACCEL_M1 = _command(52, "DutyAccelM1", "hI", None)      # duty, accel (duty/s)
DUTY_ACCEL_M2 = _command(53, "DutyAccelM2", "hI", None)
# Position PID of a channel: gains in 22.10 fixed point (the library's scale, 1024); the
# set command sends D, P, I, MaxI, Deadzone, MinPos, MaxPos; the read answers P, I, D, ...
SET_M1_POSITION_PID = _command(61, "SetM1PositionPID", "IIIIIii", None)
SET_M2_POSITION_PID = _command(62, "SetM2PositionPID", "IIIIIii", None)
READ_M1_POSITION_PID = _command(63, "ReadM1PositionPID", "", "IIIIIii")
READ_M2_POSITION_PID = _command(64, "ReadM2PositionPID", "", "IIIIIii")
# accel (counts/s^2), speed (counts/s), deccel (counts/s^2), position (counts), buffer
# (0: after the command in progress, 1: at once)
SPEED_ACCEL_DECCEL_POSITION_M1 = _command(65, "SpeedAccelDeccelPositionM1", "IIIiB", None)
SPEED_ACCEL_DECCEL_POSITION_M2 = _command(66, "SpeedAccelDeccelPositionM2", "IIIiB", None)
SPEED_ACCEL_DECCEL_POSITION_M1M2 = _command(67, "SpeedAccelDeccelPositionM1M2", "IIIiIIIiB",
                                            None)
# tick (ms), status word, temperatures 1 and 2 (0.1 degC), main and logic battery (0.1 V),
# PWMs, currents (10 mA), encoders, speed set-points, speeds, speed errors, position errors
GET_STATUS = _command(73, "GetStatus", "", "IIHHHHhhhhIIiiiihhhh")

COMMANDS = {c.code: c for c in (SET_SERIAL_TIMEOUT, READ_ENC_M1, READ_ENC_M2, READ_SPEED_M1,
                                 READ_SPEED_M2, READ_MAIN_BATTERY, DUTY_M1, DUTY_M2, DUTY_M1M2,
                                 READ_CURRENTS, READ_STATUS, SET_M1_MAX_CURRENT,
                                 SET_M2_MAX_CURRENT, GET_TIMEOUT, RESET_ENCODERS, READ_VERSION,
                                 SET_ENC_M1, SET_ENC_M2, READ_LOGIC_BATTERY,
                                 SET_M1_VELOCITY_PID, SET_M2_VELOCITY_PID, SPEED_M1, SPEED_M2,
                                 SPEED_M1M2, SPEED_ACCEL_M1, SPEED_ACCEL_M2, SPEED_ACCEL_M1M2,
                                 READ_M1_VELOCITY_PID, READ_M2_VELOCITY_PID, GET_ENCODERS,
                                 GET_ISPEEDS, READ_TEMP, GET_SPEEDS, GET_ISPEED_M1,
                                 GET_ISPEED_M2, GET_BUFFERS, GET_PWMS, DUTY_ACCEL_M1,
                                 DUTY_ACCEL_M2, SET_M1_POSITION_PID, SET_M2_POSITION_PID,
                                 READ_M1_POSITION_PID, READ_M2_POSITION_PID,
                                 SPEED_ACCEL_DECCEL_POSITION_M1, SPEED_ACCEL_DECCEL_POSITION_M2,
                                 SPEED_ACCEL_DECCEL_POSITION_M1M2, GET_STATUS)}
PID_SCALE = 65536.0         # 16.16 fixed point of the velocity PID gains
POSITION_PID_SCALE = 1024.0  # 22.10 fixed point of the position PID gains
BUFFER_IDLE = 0x80          # ReadBuffers: nothing queued and the last command finished
BUFFER_SIZE = 64            # buffered position commands per channel
READ_ENC = {1: READ_ENC_M1, 2: READ_ENC_M2}
READ_SPEED = {1: READ_SPEED_M1, 2: READ_SPEED_M2}
DUTY = {1: DUTY_M1, 2: DUTY_M2}
SET_MAX_CURRENT = {1: SET_M1_MAX_CURRENT, 2: SET_M2_MAX_CURRENT}

# Status word of cmd 90 (firmware 4.x, 32 bit; older firmware answers 16 bits with
# another layout, which this module does not decode). Bits 0-15 are errors, 16-31
# warnings.
STATUS_BITS = {
    0x00000001: "E-stop",
    0x00000002: "temperature error",
    0x00000004: "temperature 2 error",
    0x00000008: "main battery voltage too high",
    0x00000010: "logic battery voltage too high",
    0x00000020: "logic battery voltage too low",
    0x00000040: "M1 driver fault",
    0x00000080: "M2 driver fault",
    0x00000100: "M1 speed error",
    0x00000200: "M2 speed error",
    0x00000400: "M1 position error",
    0x00000800: "M2 position error",
    0x00001000: "M1 current error",
    0x00002000: "M2 current error",
    0x00010000: "M1 over-current warning",
    0x00020000: "M2 over-current warning",
    0x00040000: "main battery voltage high warning",
    0x00080000: "main battery voltage low warning",
    0x00100000: "temperature warning",
    0x00200000: "temperature 2 warning",
    0x00400000: "S4 signal triggered",
    0x00800000: "S5 signal triggered",
    0x01000000: "speed error limit warning",
    0x02000000: "position error limit warning",
}
ERROR_MASK = 0x0000FFFF
CHANNEL_ERRORS = {1: 0x00000040 | 0x00000100 | 0x00000400 | 0x00001000,
                  2: 0x00000080 | 0x00000200 | 0x00000800 | 0x00002000}
OVERCURRENT_WARNING = {1: 0x00010000, 2: 0x00020000}


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM of ``data``."""
    return binascii.crc_hqx(data, 0)


def describe_status(word: int) -> str:
    """The set bits of a status word in plain language ("normal" when none is set)."""
    names = [text for bit, text in STATUS_BITS.items() if word & bit]
    unknown = word & ~sum(STATUS_BITS)
    if unknown:
        names.append(f"undocumented bits 0x{unknown:08X}")
    return ", ".join(names) or "normal"


# -- the controller's side: requests out, replies in --------------------------------

def encode_request(address: int, command: Command, *values: int) -> bytes:
    """The request frame for ``command`` at ``address`` (values per ``command.request``)."""
    frame = bytes((address, command.code)) + command.request.pack(*values)
    if command.is_read:
        return frame
    crc = crc16(frame)
    return frame + bytes((crc >> 8, crc & 0xFF))


def decode_reply(address: int, command: Command, reply: bytes) -> tuple:
    """Check a complete reply and return its values (empty for an acknowledged write).

    Raises FrameError: truncated or overlong reply; CrcError (a FrameError): bad CRC, or
    a byte other than ACK.
    """
    where = f"{command.name} (cmd {command.code}) at 0x{address:02X}"
    if len(reply) != command.reply_length:
        kind = "truncated" if len(reply) < command.reply_length else "overlong"
        raise FrameError(f"{where}: {kind} reply, {len(reply)} of {command.reply_length} bytes "
                         f"({reply.hex(' ') or 'nothing'})")
    if not command.is_read:
        if reply[0] != ACK:
            raise CrcError(f"{where}: expected ACK 0xFF, got 0x{reply[0]:02X}")
        return ()
    received = (reply[-2] << 8) | reply[-1]
    computed = binascii.crc_hqx(reply[:-2], binascii.crc_hqx(bytes((address, command.code)), 0))
    if received != computed:
        raise CrcError(f"{where}: bad CRC, received 0x{received:04X}, computed "
                       f"0x{computed:04X} over {reply[:-2].hex(' ')}")
    return command.reply.unpack_from(reply)


# -- the drive's side: requests in, replies out -------------------------------------

def decode_request(frame: bytes) -> tuple[int, Command, tuple]:
    """Parse one complete request frame into (address, command, values).

    Raises FrameError for an unknown command, a wrong length or a bad CRC.
    """
    if len(frame) < 2:
        raise FrameError(f"truncated request, {len(frame)} bytes ({frame.hex(' ')})")
    address, code = frame[0], frame[1]
    command = COMMANDS.get(code)
    if command is None:
        raise FrameError(f"unknown command {code} at 0x{address:02X}")
    where = f"{command.name} (cmd {code}) at 0x{address:02X}"
    if len(frame) != command.request_length:
        raise FrameError(f"{where}: request of {len(frame)} bytes, expected "
                         f"{command.request_length}")
    if command.is_read:
        return address, command, ()
    received = (frame[-2] << 8) | frame[-1]
    computed = crc16(frame[:-2])
    if received != computed:
        raise FrameError(f"{where}: bad CRC, received 0x{received:04X}, computed "
                         f"0x{computed:04X}")
    return address, command, command.request.unpack_from(frame, 2)


def encode_reply(address: int, command: Command, *values: int) -> bytes:
    """The reply frame: ACK for a write, data + CRC (over address, command, data) for a read."""
    if not command.is_read:
        return bytes((ACK,))
    data = command.reply.pack(*values)
    crc = binascii.crc_hqx(data, binascii.crc_hqx(bytes((address, command.code)), 0))
    return data + bytes((crc >> 8, crc & 0xFF))
