"""CAN bus-load budget of the CiA 402 cycle: frame times and how many axes fit.

Classic CAN, 11-bit identifiers. A data frame with n data bytes takes 47 + 8 n
bit times (SOF, arbitration, control, data, CRC, ACK, EOF, intermission), plus
stuff bits: at most one per 4 bits of the 34 + 8 n bits from SOF to the CRC,
i.e. floor((33 + 8 n) / 4) in the worst case. Each cycle carries one SYNC (no
data) and, per axis, the PDOs of ``cia402.AXIS_PDO_BYTES`` (RPDO1, TPDO1,
TPDO2). Heartbeats (1 byte every heartbeat period per node) and EMCYs are
sporadic and left to the margin.
"""
from __future__ import annotations

from hilrig.drivers.cia402 import AXIS_PDO_BYTES


def frame_bits(data_bytes: int, worst_case: bool = True) -> int:
    """Bit times of one standard-ID data frame with ``data_bytes`` (0..8) bytes."""
    bits = 47 + 8 * data_bytes
    return bits + ((33 + 8 * data_bytes) // 4 if worst_case else 0)


def cycle_bits(n_axes: int, worst_case: bool = True) -> int:
    """Bit times of one SYNC cycle for ``n_axes`` axes (SYNC + their PDOs)."""
    return frame_bits(0, worst_case) + n_axes * sum(frame_bits(b, worst_case)
                                                    for b in AXIS_PDO_BYTES)


def bus_load(n_axes: int, period: float, bitrate: int, worst_case: bool = True) -> float:
    """Fraction of the bus the cycle takes (1.0 = full) at ``period`` s and ``bitrate`` bit/s."""
    return cycle_bits(n_axes, worst_case) / (bitrate * period)


def max_axes(period: float, bitrate: int, worst_case: bool = True) -> int:
    """How many axes fit in one cycle of ``period`` s at ``bitrate`` bit/s."""
    per_axis = sum(frame_bits(b, worst_case) for b in AXIS_PDO_BYTES)
    return max(0, int((bitrate * period - frame_bits(0, worst_case)) // per_axis))
