"""The one interface between a controller and a plant, emulated or real.

A link goes through two steps before its first command, as ros2_control's
lifecycle does: ``configure`` (communication up, states readable, the drives
not powered) and ``activate`` (the drives enabled: from here ``write`` moves
the motors). ``open`` does both, for callers with nothing to do in between;
``hil control`` (rt.loop) configures, compiles and warms its kernels, then
activates and ticks at once, so no drive sits powered while numba compiles.
Then it exchanges one command for one measurement per tick, and can always be
brought to a safe state. The real-time loop calls, per tick: ``read`` (the read
phase), the controller, ``write`` (the write phase).

Order: ``activate`` before ``configure`` and ``write`` before ``activate`` raise
``LinkError``; ``write`` after ``safe_stop`` sends nothing (or zero) and does
not raise. ``enabled_at_ns`` is the ``time.monotonic_ns()`` at which the link
saw its drives enabled (rt.loop reports the time from it to the first command).

Units, whatever the wire carries: positions in rad and velocities in rad/s at
the joint (after the gear), currents in A, commands in the controller's output
unit, V (voltage-driven motors) or N m (joint torques). Conversion to counts,
per-mille or duty cycles is the link's job.

Errors: a link raises ``LinkError`` (or a subclass) naming the cause; the loop
then calls ``safe_stop`` and ``close``, which must not raise.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


class LinkError(RuntimeError):
    """The link cannot go on: peer gone, protocol violation, drive fault."""


class LinkTimeout(LinkError):
    """No fresh measurement (or acknowledgement) within the allowed time."""


class DriveFault(LinkError):
    """A drive reported a fault; ``code`` is the drive's own error code."""

    def __init__(self, axis: int, code: int, message: str):
        super().__init__(f"axis {axis}: drive fault 0x{code:04X}: {message}")
        self.axis, self.code, self.message = axis, code, message


def not_configured(where: str) -> LinkError:
    """The error of ``activate`` called on a link that is not configured."""
    return LinkError(f"{where}: activate() before configure(): the link is not configured "
                     "(call configure() first, or open())")


def not_active(where: str) -> LinkError:
    """The error of ``write`` called before ``activate``."""
    return LinkError(f"{where}: write() before activate(): the drives are not enabled, "
                     "commands are not accepted yet")


class Measurement:
    """What a controller may see, in one preallocated float64 buffer.

    ``buffer`` = [t, pos (n), vel (n), current (n)]; the attributes are views
    into it, so numba kernels can take ``buffer`` or the views without copies.
    t is the link's timestamp of the sample in s (plant time for an emulated
    plant); currents the link cannot measure are NaN.
    """

    def __init__(self, n_axes: int):
        self.n_axes = n_axes
        self.buffer = np.full(1 + 3 * n_axes, np.nan)
        self.pos = self.buffer[1:1 + n_axes]
        self.vel = self.buffer[1 + n_axes:1 + 2 * n_axes]
        self.current = self.buffer[1 + 2 * n_axes:]

    @property
    def t(self) -> float:
        return float(self.buffer[0])

    @t.setter
    def t(self, value: float) -> None:
        self.buffer[0] = value


class Link(abc.ABC):
    """A connection to n_axes actuated joints.

    Attributes:
        n_axes: number of actuated joints.
        command_unit: "V" or "N m", what ``write`` takes.
        enabled_at_ns: ``time.monotonic_ns()`` when ``activate`` saw the drives enabled
            (CANopen: the first statusword showing OPERATION ENABLED); None before.
    """

    n_axes: int
    command_unit: str
    enabled_at_ns: int | None = None

    @abc.abstractmethod
    def configure(self) -> None:
        """Connect and make the states readable, the drives NOT powered.

        After it ``read`` works and ``write`` raises LinkError. On failure it releases
        what it took and raises LinkError; ``close`` afterwards does not raise.
        """

    @abc.abstractmethod
    def activate(self) -> None:
        """Power the drives (enable them); from here ``write`` moves the motors.

        Sets ``enabled_at_ns``. Raises LinkError if the link is not configured.
        """

    def open(self) -> None:
        """``configure`` then ``activate``: for callers with nothing to prepare in between.

        If ``activate`` fails, the link is stopped and closed before the error propagates.
        """
        self.configure()
        try:
            self.activate()
        except BaseException:
            self.safe_stop()
            self.close()
            raise

    @abc.abstractmethod
    def read(self, meas: Measurement) -> bool:
        """Fill ``meas`` in place with this tick's measurement.

        Returns False when no fresh measurement arrived this tick (``meas`` then
        keeps the previous one); raises LinkError when the link is lost.
        """

    @abc.abstractmethod
    def write(self, command: np.ndarray) -> None:
        """Send one command per axis (``command_unit``) for the coming period.

        Raises LinkError before ``activate``; sends nothing (or zero) after ``safe_stop``.
        """

    @abc.abstractmethod
    def safe_stop(self) -> None:
        """Zero the commands and disable (or brake) the drives. Idempotent; never raises."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the link's resources. Idempotent; never raises."""

    def __enter__(self) -> "Link":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.safe_stop()
        self.close()


@dataclass(frozen=True)
class LinkSpec:
    """A link as the config and the registry see it (entry-point group ``hilrig.links``).

    name: what ``link.type`` says. implementation: "module:Class" of the Link, with
    ``from_config(cfg) -> Link`` (cfg a hilrig.schema.Config), imported only when a run uses
    the link. keys: its ``[link.NAME]`` table (hilrig.schema.Key), typed attributes of
    ``cfg.link.NAME``. check(cfg, sizes): on the resolved dict before it is typed, fills
    the table's plant-dependent defaults and checks what one key alone cannot (raise ConfigError);
    sizes = {"nq": ..., "nact": ...}. command_unit: what the link's drives take whatever
    drives the plant ("N m" for torque-mode drives), or None (as the plant's drive).
    """

    name: str
    implementation: str
    keys: dict = field(default_factory=dict)
    check: Callable[[dict, dict], None] | None = None
    command_unit: str | None = None
