"""Command limits of a run: the drives' range by default, widened only on purpose.

Every run clamps each command after the law: |u| at most ``safety.max_command`` and
its change at most ``safety.max_slew`` per second. Unset, ``max_command`` is the range
of the drives the command goes to: their supply voltage for a voltage command
(``emulator.supply_voltage``, V) and their peak torque for a torque command
(``emulator.max_torque``, N m at the joint). A user widens it by giving a larger
value, or removes it with ``inf`` (a warning line says so). ``max_slew`` unset is no
slew limit.
"""
from __future__ import annotations

import logging
import math

import numpy as np
from hilrig.schema import Config

log = logging.getLogger("hil.safety")

# rows of the limits array
L_MAX, L_SLEW = 0, 1


def drive_range(cfg: Config, unit: str) -> float:
    """The drives' physical range for commands in ``unit`` ("V" or "N m")."""
    return cfg.emulator.supply_voltage if unit == "V" else cfg.emulator.max_torque


def command_limits(cfg: Config, nact: int, unit: str) -> np.ndarray:
    """(2, nact): max |u| (``unit``) and max slew (``unit``/s) per axis.

    max |u| is ``safety.max_command`` if set, else ``drive_range``; a non-finite
    ``safety.max_command`` or ``safety.max_slew`` (``inf``) is logged once as a warning.
    """
    safety = cfg.safety
    limits = np.full((2, nact), np.inf)
    if safety.max_command is None:
        limits[L_MAX] = drive_range(cfg, unit)
    else:
        limits[L_MAX] = safety.max_command
        if not all(math.isfinite(v) for v in safety.max_command):
            log.warning("safety.max_command = inf: commands are not clamped (the drives' "
                        "range is +-%g %s)", drive_range(cfg, unit), unit)
    if safety.max_slew is not None:
        limits[L_SLEW] = safety.max_slew
    return limits
