"""Declarations of config keys (``Key``), importable from every layer.

Each part declares the keys it owns (a plant model its ``[plant]`` keys, a link its
``[link.NAME]`` table, ...); hilrig.rt.config validates a whole config against the
declarations it collects from the registries.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Key:
    """Declaration of one config key.

    kind: "float", "int", "bool", "str", "floats" (list of numbers, or one number
    broadcast when ``scalar_ok``), "ints", "pairs" (list of [int, int]). length: None,
    an int, or the name of a size resolved from the plant ("nq" coordinates, "nact"
    actuated joints). doc: what the value means, with its unit.
    """

    kind: str
    default: Any = None
    length: Any = None
    choices: tuple = ()
    minimum: float | None = None
    positive: bool = False
    scalar_ok: bool = False
    required: bool = False
    doc: str = ""
