"""Command limits of a run: the drives' range by default, widened only on purpose; and the
joints' position and rate limits, whose breach stops the run.

Every run clamps each command after the law: |u| at most ``safety.max_command`` and
its change at most ``safety.max_slew`` per second. Unset, ``max_command`` is the range
of the drives the command goes to (``EmulatorTable.drive_range``: their supply voltage,
``emulator.supply_voltage``, V, for a voltage command; their peak torque,
``emulator.max_torque``, N m at the joint, for a torque command), or for a torque
command the plant's own effort limit where that is lower (a URDF's ``<limit effort>``,
plant.factory.joint_limits; a voltage command keeps the supply's range). A user widens
it by giving a larger value, or removes it with ``inf`` (a warning line says so).
``max_slew`` unset is no slew limit.

Every tick also compares each measured joint position with ``safety.position_min`` and
``position_max`` and each measured rate with ``+-safety.max_rate`` (unset: the plant's
own, a URDF's ``<limit lower upper velocity>``, else none): one compare per joint and
bound (``outside``), and a breach ends the run as a non-finite command does, with one line
(``violation``) naming the joint, its position or rate and the limit.
"""
from __future__ import annotations

import logging
import math

import numpy as np
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.factory import joint_limits
from hilrig.schema import Config, SafetyTable

log = logging.getLogger("hil.safety")

# rows of the limits array: the command's (live changes may lower them), then the joints'
L_MAX, L_SLEW, L_POS_MIN, L_POS_MAX, L_RATE = 0, 1, 2, 3, 4
LIMIT_ROWS = 5
# rows of a plant's own limits (plant.factory.joint_limits): max |command| in the
# command's unit, max |rate|, lower and upper position
J_COMMAND, J_RATE, J_LOWER, J_UPPER = 0, 1, 2, 3


def command_limits(safety: SafetyTable, nact: int, drive_range: float,
                   unit: str, joints: np.ndarray | None = None) -> np.ndarray:
    """(LIMIT_ROWS, nact): max |u| (``unit``, "V" or "N m"), max slew (``unit``/s), the
    lowest and highest position (rad or m) and the largest |rate| (rad/s) per axis.

    max |u| is ``safety.max_command`` if set, else ``drive_range`` (the drives' range in
    ``unit``: ``cfg.emulator.drive_range(unit)``) or the plant's own limit where lower;
    a non-finite ``safety.max_command`` (``inf``) is logged once as a warning. ``joints``:
    the plant's own limits (rows J_*, plant.factory.joint_limits), the defaults of the
    unset keys; None: none.
    """
    limits = np.full((LIMIT_ROWS, nact), np.inf)
    limits[L_POS_MIN] = -np.inf
    if joints is not None:
        limits[L_MAX] = joints[J_COMMAND]
        limits[L_RATE] = joints[J_RATE]
        limits[L_POS_MIN] = joints[J_LOWER]
        limits[L_POS_MAX] = joints[J_UPPER]
    if safety.max_command is None:
        limits[L_MAX] = np.minimum(limits[L_MAX], drive_range)
    else:
        limits[L_MAX] = safety.max_command
        if not all(math.isfinite(v) for v in safety.max_command):
            log.warning("safety.max_command = inf: commands are not clamped (the drives' "
                        "range is +-%g %s)", drive_range, unit)
    if safety.max_slew is not None:
        limits[L_SLEW] = safety.max_slew
    for row, given in ((L_POS_MIN, safety.position_min), (L_POS_MAX, safety.position_max),
                       (L_RATE, safety.max_rate)):
        if given is not None:
            limits[row] = given
    return limits


def config_limits(cfg: Config, nact: int, unit: str) -> np.ndarray:
    """``command_limits`` of a resolved config for commands in ``unit``: its [safety], its
    drives' range, its plant's own limits (plant.factory.joint_limits)."""
    return command_limits(cfg.safety, nact, cfg.emulator.drive_range(unit), unit,
                          joint_limits(cfg, unit))


@inline_kernel
def outside(limits, pos, vel):
    """Whether a measured position (rad, m) or rate (rad/s, m/s) is outside its limits
    (a NaN is not: the loops' own checks catch it)."""
    for j in range(pos.shape[0]):
        if pos[j] < limits[L_POS_MIN, j] or pos[j] > limits[L_POS_MAX, j] \
                or abs(vel[j]) > limits[L_RATE, j]:
            return True
    return False


@kernel
def outside_measured(limits, pos, vel):
    """``outside`` as one call from Python (rt.loop's Python loop)."""
    return outside(limits, pos, vel)


def violation(limits: np.ndarray, pos: np.ndarray, vel: np.ndarray) -> str:
    """The one line that names the first joint (1-based) outside its limits, its position
    or rate and the limit; ``pos``, ``vel``: the measurement the loop stopped on."""
    for j in range(len(pos)):
        low, high, rate = limits[L_POS_MIN, j], limits[L_POS_MAX, j], limits[L_RATE, j]
        if pos[j] < low or pos[j] > high:
            side, bound = ("position_min", low) if pos[j] < low else ("position_max", high)
            return (f"joint {j + 1} at {pos[j]:.6g} (rad or m) left its position limits "
                    f"[{low:.6g}, {high:.6g}] (safety.{side} = {bound:.6g}): run stopped")
        if abs(vel[j]) > rate:
            return (f"joint {j + 1} at {vel[j]:.6g} (rad/s or m/s) exceeded its rate limit "
                    f"+-{rate:.6g} (safety.max_rate): run stopped")
    return "a joint left its limits: run stopped"
