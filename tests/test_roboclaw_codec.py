"""RoboClaw packet-serial codec: CRC16 vectors, frame round trips, parse errors, status words."""
import struct

import pytest
from hilrig.drivers import roboclaw_codec as rc


def crc16_bitwise(data: bytes) -> int:
    """The manual's bit-by-bit CRC16 (poly 0x1021, init 0, MSB first)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def test_crc16_check_value_and_empty_input():
    assert rc.crc16(b"123456789") == 0x31C3      # CRC-16/XMODEM check value
    assert rc.crc16(b"") == 0


def test_crc16_equals_the_manuals_bitwise_algorithm(rng):
    for n in range(1, 200):
        data = rng.integers(0, 256, n, dtype="uint8").tobytes()
        assert rc.crc16(data) == crc16_bitwise(data)


def test_duty_m1m2_matches_the_worked_example():
    # docs/PROTOCOLS.md §5.2: DutyM1M2(+50 %, -50 %) at 0x80
    frame = rc.encode_request(0x80, rc.DUTY_M1M2, 16384, -16384)
    assert frame == bytes.fromhex("80 22 40 00 C0 00 E0 DF")
    assert rc.decode_request(frame) == (0x80, rc.DUTY_M1M2, (16384, -16384))


def test_read_request_is_address_and_command_only():
    assert rc.encode_request(0x81, rc.READ_ENC_M2) == bytes((0x81, 17))
    assert rc.decode_request(bytes((0x81, 17))) == (0x81, rc.READ_ENC_M2, ())


@pytest.mark.parametrize("command, values", [
    (rc.DUTY_M1, (-32767,)), (rc.DUTY_M2, (32767,)), (rc.DUTY_M1M2, (-1, 1)),
    (rc.SET_SERIAL_TIMEOUT, (255,)), (rc.SET_M1_MAX_CURRENT, (400, 0)),
    (rc.SET_M2_MAX_CURRENT, (2 ** 32 - 1, 0)),
])
def test_write_requests_round_trip_and_are_acked(command, values):
    frame = rc.encode_request(0x87, command, *values)
    assert len(frame) == command.request_length
    assert rc.decode_request(frame) == (0x87, command, values)
    ack = rc.encode_reply(0x87, command, *values)
    assert ack == b"\xff" and len(ack) == command.reply_length
    assert rc.decode_reply(0x87, command, ack) == ()


@pytest.mark.parametrize("command, values", [
    (rc.READ_ENC_M1, (0, 0)), (rc.READ_ENC_M2, (2 ** 32 - 1, 2)),
    (rc.READ_SPEED_M1, (-2 ** 31, 1)), (rc.READ_SPEED_M2, (2 ** 31 - 1, 0)),
    (rc.READ_CURRENTS, (-32768, 32767)), (rc.READ_STATUS, (0x00020040,)),
    (rc.READ_MAIN_BATTERY, (240,)),
])
def test_read_replies_round_trip(command, values):
    reply = rc.encode_reply(0x80, command, *values)
    assert len(reply) == command.reply_length
    assert rc.decode_reply(0x80, command, reply) == values


def test_reply_fields_are_big_endian_with_crc_high_byte_first():
    reply = rc.encode_reply(0x80, rc.READ_ENC_M1, 0x01020304, 0x02)
    assert reply[:5] == bytes((1, 2, 3, 4, 2))
    crc = rc.crc16(bytes((0x80, 16, 1, 2, 3, 4, 2)))     # covers the sent address and command
    assert reply[5:] == struct.pack(">H", crc)


def test_reply_crc_covers_the_address_it_was_asked_at():
    reply = rc.encode_reply(0x80, rc.READ_STATUS, 0)
    with pytest.raises(rc.FrameError, match=r"ReadStatus \(cmd 90\) at 0x81: bad CRC"):
        rc.decode_reply(0x81, rc.READ_STATUS, reply)


def test_bad_crc_reply_names_both_crcs():
    reply = bytearray(rc.encode_reply(0x80, rc.READ_SPEED_M1, 1234, 0))
    reply[0] ^= 0x10
    good = rc.crc16(bytes((0x80, 18)) + bytes(reply[:-2]))
    with pytest.raises(rc.FrameError) as info:
        rc.decode_reply(0x80, rc.READ_SPEED_M1, bytes(reply))
    received = (reply[-2] << 8) | reply[-1]
    assert f"received 0x{received:04X}, computed 0x{good:04X}" in str(info.value)


def test_truncated_and_overlong_replies_say_how_many_bytes():
    reply = rc.encode_reply(0x80, rc.READ_ENC_M1, 5, 0)
    with pytest.raises(rc.FrameError, match=r"ReadEncM1 \(cmd 16\) at 0x80: truncated reply, "
                                            r"3 of 7 bytes"):
        rc.decode_reply(0x80, rc.READ_ENC_M1, reply[:3])
    with pytest.raises(rc.FrameError, match="truncated reply, 0 of 7 bytes \\(nothing\\)"):
        rc.decode_reply(0x80, rc.READ_ENC_M1, b"")
    with pytest.raises(rc.FrameError, match="overlong reply, 8 of 7 bytes"):
        rc.decode_reply(0x80, rc.READ_ENC_M1, reply + b"\x00")


def test_a_byte_other_than_ack_is_a_nack():
    with pytest.raises(rc.FrameError, match=r"DutyM1 \(cmd 32\) at 0x80: expected ACK 0xFF, "
                                            r"got 0x00"):
        rc.decode_reply(0x80, rc.DUTY_M1, b"\x00")


def test_request_parse_errors_name_the_cause():
    frame = bytearray(rc.encode_request(0x80, rc.DUTY_M1, 100))
    frame[2] ^= 1
    with pytest.raises(rc.FrameError, match=r"DutyM1 \(cmd 32\) at 0x80: bad CRC"):
        rc.decode_request(bytes(frame))
    with pytest.raises(rc.FrameError, match="request of 5 bytes, expected 6"):
        rc.decode_request(bytes(frame[:5]))
    with pytest.raises(rc.FrameError, match="unknown command 99 at 0x80"):
        rc.decode_request(bytes((0x80, 99)))
    with pytest.raises(rc.FrameError, match="truncated request, 1 bytes"):
        rc.decode_request(b"\x80")


def test_status_words_in_plain_language():
    assert rc.describe_status(0) == "normal"
    assert rc.describe_status(0x00000081) == "E-stop, M2 driver fault"
    assert rc.describe_status(0x00010000) == "M1 over-current warning"
    assert rc.describe_status(0x40000000) == "undocumented bits 0x40000000"
    for channel in (1, 2):
        assert rc.CHANNEL_ERRORS[channel] & ~rc.ERROR_MASK == 0
        assert rc.OVERCURRENT_WARNING[channel] & rc.ERROR_MASK == 0
        assert f"M{channel} over-current" in rc.describe_status(rc.OVERCURRENT_WARNING[channel])
