"""Frames that the emulator must reject, of every kind, from a seeded generator.

Shared by the fuzz test (tests/test_control_plane.py) and bench/bench_flood.py. Each
item is a list of frames forming one ZeroMQ message (all but "several frames" have
one); every one of them is rejected by an emulator whose controller is another peer.
"""
from __future__ import annotations

import numpy as np
from hilrig.drivers.wire import HEADER, MAGIC, WIRE_VERSION, MessageType, encode


def _header(kind: int, count: int, version: int = WIRE_VERSION, magic: bytes = MAGIC) -> bytes:
    return HEADER.pack(magic, version, kind, 0, 0.0, count)


def malformed_kinds(nact: int) -> dict:
    """{name: function(rng) -> list of frames}: one message of each malformed kind, plus
    well-formed frames whose values are out of range or that a non-controller may not send."""
    hello = encode(MessageType.HELLO, 0, 0.0, [nact])
    return {
        "random bytes": lambda rng: [rng.bytes(int(rng.integers(0, 200)))],
        "truncated header": lambda rng: [hello[:int(rng.integers(0, HEADER.size))]],
        "bad magic": lambda rng: [rng.bytes(4).replace(b"H", b"h") + hello[4:]],
        "wrong version": lambda rng: [_header(1, 1, version=int(rng.integers(WIRE_VERSION + 1, 65535)))
                                      + bytes(8)],
        "count over the maximum": lambda rng: [_header(3, int(rng.integers(1025, 2**32)))],
        "length not matching the count": lambda rng: [hello + bytes(8 * int(rng.integers(1, 9)))],
        "unknown type": lambda rng: [_header(int(rng.integers(12, 65535)), 0)],
        "unexpected type": lambda rng: [encode(MessageType(int(rng.choice([2, 4, 6, 8, 9, 10]))),
                                               0, 0.0, [])],
        "wrong payload size": lambda rng: [encode(MessageType.COMMAND, 1, 0.0,
                                                  rng.normal(size=nact + 1))],
        "non-finite value": lambda rng: [
            _header(3, nact) + np.array([np.nan, np.inf, -np.inf][:1] * nact, "<f8").tobytes()],
        "several frames": lambda rng: [hello, hello],
        "HELLO for the wrong number of axes": lambda rng: [
            encode(MessageType.HELLO, 0, 0.0, [nact + int(rng.integers(1, 100))])],
        "COMMAND of 1e300 from a non-controller": lambda rng: [
            encode(MessageType.COMMAND, 1, 0.0, np.full(nact, 1e300))],
        "BYE from a non-controller": lambda rng: [encode(MessageType.BYE, 1, 0.0)],
        "jam of a joint that does not exist": lambda rng: [
            encode(MessageType.FAULT, 0, 0.0, [1, int(rng.integers(nact + 1, 1000)), 0.1])],
        "jam of duration 1e-320": lambda rng: [encode(MessageType.FAULT, 0, 0.0, [1, 1, 1e-320])],
        "jam of duration 1e9": lambda rng: [encode(MessageType.FAULT, 0, 0.0, [1, 1, 1e9])],
        "negative fault kind": lambda rng: [encode(MessageType.FAULT, 0, 0.0, [-3, 1, 0.1])],
    }


def malformed_messages(seed: int, n: int, nact: int) -> list:
    """``n`` messages (lists of frames), every kind about equally often, in a seeded order."""
    rng = np.random.default_rng(seed)
    makers = list(malformed_kinds(nact).values())
    return [makers[i % len(makers)](rng) for i in rng.permutation(n)]
