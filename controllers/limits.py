"""Command limits of a run: the drives' range by default, widened only on purpose.

Every run clamps each command after the law: |u| at most ``safety.max_command`` and
its change at most ``safety.max_slew`` per second. Unset, ``max_command`` is the range
of the drives the command goes to (``EmulatorTable.drive_range``: their supply voltage,
``emulator.supply_voltage``, V, for a voltage command; their peak torque,
``emulator.max_torque``, N m at the joint, for a torque command). A user widens it by
giving a larger value, or removes it with ``inf`` (a warning line says so).
``max_slew`` unset is no slew limit.
"""
from __future__ import annotations

import logging
import math

import numpy as np
from hilrig.schema import SafetyTable

log = logging.getLogger("hil.safety")

# rows of the limits array
L_MAX, L_SLEW = 0, 1


def command_limits(safety: SafetyTable, nact: int, drive_range: float,
                   unit: str) -> np.ndarray:
    """(2, nact): max |u| (``unit``, "V" or "N m") and max slew (``unit``/s) per axis.

    max |u| is ``safety.max_command`` if set, else ``drive_range`` (the drives' range in
    ``unit``: ``cfg.emulator.drive_range(unit)``); a non-finite ``safety.max_command``
    (``inf``) is logged once as a warning.
    """
    limits = np.full((2, nact), np.inf)
    if safety.max_command is None:
        limits[L_MAX] = drive_range
    else:
        limits[L_MAX] = safety.max_command
        if not all(math.isfinite(v) for v in safety.max_command):
            log.warning("safety.max_command = inf: commands are not clamped (the drives' "
                        "range is +-%g %s)", drive_range, unit)
    if safety.max_slew is not None:
        limits[L_SLEW] = safety.max_slew
    return limits
