"""The one interface between a controller and a plant, emulated or real.

A link is opened once, then exchanges one command for one measurement per
tick, and can always be brought to a safe state. The real-time loop calls, per
tick: ``read`` (the read phase), the controller, ``write`` (the write phase).

Units, whatever the wire carries: positions in rad and velocities in rad/s at
the joint (after the gear), currents in A, commands in the controller's output
unit, V (voltage-driven motors) or N m (joint torques). Conversion to counts,
per-mille or duty cycles is the link's job.

Errors: a link raises ``LinkError`` (or a subclass) naming the cause; the loop
then calls ``safe_stop`` and ``close``, which must not raise.
"""
from __future__ import annotations

import abc

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
    """

    n_axes: int
    command_unit: str

    @abc.abstractmethod
    def open(self) -> None:
        """Connect and bring the drives (or the emulated plant) to operation."""

    @abc.abstractmethod
    def read(self, meas: Measurement) -> bool:
        """Fill ``meas`` in place with this tick's measurement.

        Returns False when no fresh measurement arrived this tick (``meas`` then
        keeps the previous one); raises LinkError when the link is lost.
        """

    @abc.abstractmethod
    def write(self, command: np.ndarray) -> None:
        """Send one command per axis (``command_unit``) for the coming period."""

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
