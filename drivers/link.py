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

**The base owns the lifecycle** (as python-can's ``BusABC`` owns a bus and a backend
writes ``_recv_internal``): ``Link`` keeps the state (``LinkState``), checks the order
of the calls and makes ``safe_stop`` and ``close`` idempotent; a link writes only its
protocol's part, in the protected hooks ``_configure``, ``_activate``, ``_read``,
``_write``, ``_safe_stop``, ``_close`` (and ``_write_stopped``), which the base calls
only in the states where they belong::

    UNCONFIGURED --configure--> CONFIGURED --activate--> ACTIVE --safe_stop--> STOPPED
                                  read                    read, write           write: safe
    CONFIGURED --safe_stop--> STOPPED;    any state --close--> CLOSED
    configure or activate raising (what it opened is stopped and released) --> FAILED

- ``configure`` only from UNCONFIGURED; ``activate`` only from CONFIGURED; ``read`` in
  CONFIGURED and ACTIVE; ``write`` in ACTIVE, and after ``safe_stop`` it sends nothing
  (or the safe command, ``_write_stopped``) and does not raise. Any other call raises
  one ``LinkError`` naming the link (``describe()``), the call and the state.
- A ``configure`` that raises leaves the link FAILED after the base called ``_close``
  (releasing what was half-opened); an ``activate`` that raises, after ``_safe_stop``
  and ``_close``. ``safe_stop`` and ``close`` afterwards do nothing.
- ``safe_stop`` and ``close`` are idempotent and never raise: an exception of
  ``_safe_stop`` or ``_close`` is logged (logger ``hil.link``), not raised. ``close``
  only releases: a link closed without ``safe_stop`` leaves its drives to their own
  watchdogs (heartbeat, serial timeout, the emulator's), as a controller that vanished
  would, so callers stop first (the loops, ``__exit__``). A closed link does not open
  again: make a new one (``from_config``).

``enabled_at_ns`` is the ``time.monotonic_ns()`` at which the link saw its drives
enabled (rt.loop reports the time from it to the first command): ``_activate`` may set
it (CANopen: the first statusword showing OPERATION ENABLED), else the base sets it
when ``_activate`` returns.

Units, whatever the wire carries: positions in rad and velocities in rad/s at the
joint (after the gear), currents in A, commands in the controller's output unit, V
(voltage-driven motors) or N m (joint torques). Conversion to counts, per-mille or
duty cycles is the link's job.

Errors: a link raises ``LinkError`` (or a subclass) naming the cause; the loop then
calls ``safe_stop`` and ``close``.

The per-tick cost of the base is one attribute test and one call per ``read`` or
``write``: 26-30 ns (bench/bench_link.py, "base" against the hooks called directly).

A link written before the base owned the lifecycle (overriding ``configure``, ``read``,
... itself) keeps working, bypassing the base's checks for what it overrides; defining
such a class emits a DeprecationWarning that names the hooks to write instead.
"""
from __future__ import annotations

import abc
import enum
import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

log = logging.getLogger("hil.link")


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
    """The error of ``activate`` called on a link that is not configured (the base's; a
    link that overrides ``activate`` itself may raise it too)."""
    return LinkError(f"{where}: activate() before configure(): the link is not configured "
                     "(call configure() first, or open())")


def not_active(where: str) -> LinkError:
    """The error of ``write`` called before ``activate`` (the base's; a link that
    overrides ``write`` itself may raise it too)."""
    return LinkError(f"{where}: write() before activate(): the drives are not enabled, "
                     "commands are not accepted yet")


class LinkState(enum.Enum):
    """Where a link is in its lifecycle (``Link.lifecycle``; the module docstring draws it)."""

    UNCONFIGURED = "unconfigured"   # made, nothing opened
    CONFIGURED = "configured"       # communication up, states readable, drives not powered
    ACTIVE = "active"               # drives enabled: write moves the motors
    STOPPED = "stopped"             # safe_stop done: commands blocked, resources still held
    CLOSED = "closed"               # resources released; the link does not open again
    FAILED = "failed"               # configure or activate raised; what it opened is released


_READABLE = frozenset((LinkState.CONFIGURED, LinkState.ACTIVE))
_HOLDING = frozenset((LinkState.CONFIGURED, LinkState.ACTIVE, LinkState.STOPPED))
_HOOKS = {"configure": "_configure", "activate": "_activate", "read": "_read",
          "write": "_write", "safe_stop": "_safe_stop", "close": "_close"}
STOP_CATEGORIES = (1, 2)     # IEC 60204-1 controlled stops (``Link.controlled_stop``)


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
    """A connection to n_axes actuated joints; the base of every link (module docstring).

    A link sets ``n_axes`` and ``command_unit`` and writes the hooks: ``_configure``,
    ``_read``, ``_write`` and ``_safe_stop`` (required), ``_activate``, ``_close`` and
    ``_write_stopped`` (optional: by default they do nothing). It needs no
    ``super().__init__()``, and it never checks the order of the calls: the public
    methods do, then call the hooks.

    Attributes:
        n_axes: number of actuated joints.
        command_unit: "V" or "N m", what ``write`` takes.
        enabled_at_ns: ``time.monotonic_ns()`` when ``activate`` saw the drives enabled
            (CANopen: the first statusword showing OPERATION ENABLED); None before.
        lifecycle: the LinkState (read-only).
    """

    n_axes: int
    command_unit: str
    enabled_at_ns: int | None = None
    _lifecycle = LinkState.UNCONFIGURED
    _readable = False          # read goes to _read (CONFIGURED, ACTIVE)
    _writable = False          # write goes to _write (ACTIVE)
    _failed_in = ""            # the call that raised, in state FAILED

    def __init_subclass__(cls, **kwargs) -> None:
        """Warn about public lifecycle methods a class overrides (the deprecation path),
        and let such a class leave the hooks they replace unwritten."""
        super().__init_subclass__(**kwargs)
        own = [name for name in _HOOKS if name in vars(cls)]
        if own:
            warnings.warn(
                f"{cls.__module__}.{cls.__qualname__} overrides "
                f"{', '.join(name + '()' for name in own)} of hilrig.drivers.link.Link: write "
                f"the hooks {', '.join(_HOOKS[name] + '()' for name in own)} instead, and the "
                "base keeps the lifecycle (order checks, idempotent safe_stop and close, "
                "release after a failed configure; docs/PLUGINS.md). Overriding the public "
                "methods is deprecated; until it goes, they bypass the base's checks.",
                DeprecationWarning, stacklevel=3)
        for name, hook in _HOOKS.items():
            if getattr(getattr(cls, hook), "__isabstractmethod__", False) \
                    and getattr(cls, name) is not getattr(Link, name):
                setattr(cls, hook, _bypassed(name, hook))

    @property
    def lifecycle(self) -> LinkState:
        """Where the link is in its lifecycle."""
        return self._lifecycle

    def describe(self) -> str:
        """The link as its errors name it (override to add the port, endpoint or bus)."""
        return type(self).__name__

    # -- the public calls: the lifecycle ----------------------------------------------------

    def configure(self) -> None:
        """Connect and make the states readable, the drives NOT powered (``_configure``).

        After it ``read`` works and ``write`` raises LinkError. If ``_configure`` raises,
        the base calls ``_close`` (what was half-opened is released), the link is FAILED
        and the error propagates.
        """
        if self._lifecycle is not LinkState.UNCONFIGURED:
            raise self._refused("configure")
        self.enabled_at_ns = None
        try:
            self._configure()
        except BaseException:
            self._fail("configure", stop=False)
            raise
        self._enter(LinkState.CONFIGURED)

    def activate(self) -> None:
        """Power the drives (enable them, ``_activate``); from here ``write`` moves the motors.

        Sets ``enabled_at_ns``. Raises LinkError unless the link is CONFIGURED. If
        ``_activate`` raises, the base calls ``_safe_stop`` and ``_close``, the link is
        FAILED and the error propagates.
        """
        if self._lifecycle is not LinkState.CONFIGURED:
            raise self._refused("activate")
        try:
            self._activate()
        except BaseException:
            self._fail("activate", stop=True)
            raise
        if self.enabled_at_ns is None:
            self.enabled_at_ns = time.monotonic_ns()
        self._enter(LinkState.ACTIVE)

    def open(self) -> None:
        """``configure`` then ``activate``: for callers with nothing to prepare in between.

        If ``activate`` fails, the link is stopped and closed before the error propagates.
        """
        self.configure()
        try:
            self.activate()
        except BaseException:
            self.safe_stop()      # for links that override activate(): the base has
            self.close()          # already released what a failed _activate opened
            raise

    def read(self, meas: Measurement) -> bool:
        """Fill ``meas`` in place with this tick's measurement (``_read``).

        Returns False when no fresh measurement arrived this tick (``meas`` then
        keeps the previous one); raises LinkError when the link is lost, and unless it
        is CONFIGURED or ACTIVE.
        """
        if self._readable:
            return self._read(meas)
        raise self._refused("read")

    def write(self, command: np.ndarray) -> None:
        """Send one command per axis (``command_unit``) for the coming period (``_write``).

        After ``safe_stop`` it calls ``_write_stopped`` (nothing, or the safe command) and
        does not raise; raises LinkError in any other state but ACTIVE.
        """
        if self._writable:
            self._write(command)
        elif self._lifecycle is LinkState.STOPPED:
            self._write_stopped()
        else:
            raise self._refused("write")

    def controlled_stop(self, category: int, stop_time: float) -> None:
        """An IEC 60204-1 controlled stop (``_controlled_stop``): the drives bring the
        joints to rest within ``stop_time`` s on their own; category 1 then removes the
        power (the caller ends with ``safe_stop`` after ``stop_time``), category 2 keeps
        it and holds the joints until ``safe_stop``. From here ``write`` no longer moves
        the joints by its command (the link sends what keeps the drives stopping);
        ``read`` goes on. Only on an ACTIVE link; LinkError when the link has no
        controlled stop (the caller then stops with ``safe_stop``: category 0).
        """
        if category not in STOP_CATEGORIES:
            raise ValueError(f"a controlled stop is category 1 or 2, got {category!r}")
        if self._lifecycle is not LinkState.ACTIVE:
            raise self._refused("controlled_stop")
        self._controlled_stop(category, stop_time)

    def safe_stop(self) -> None:
        """Zero the commands and disable (or brake) the drives (``_safe_stop``).

        Idempotent: only the first call on a CONFIGURED or ACTIVE link calls the hook.
        Never raises (an exception of ``_safe_stop`` is logged).
        """
        if self._lifecycle in _READABLE:
            self._enter(LinkState.STOPPED)
            self._quietly(self._safe_stop, "safe_stop")

    def close(self) -> None:
        """Release the link's resources (``_close``); it does not stop the drives (call
        ``safe_stop`` first). Idempotent; never raises (an exception of ``_close`` is logged).
        """
        holding = self._lifecycle in _HOLDING
        self._enter(LinkState.CLOSED)
        if holding:
            self._quietly(self._close, "close")

    def __enter__(self) -> "Link":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.safe_stop()
        self.close()

    # -- the hooks: what a link writes -------------------------------------------------------

    @abc.abstractmethod
    def _configure(self) -> None:
        """Open the communication and make the states readable, drives not powered.

        Raise LinkError naming the cause; the base then calls ``_close``, which must
        release whatever this opened before it raised.
        """

    def _activate(self) -> None:
        """Enable the drives (nothing by default). May set ``enabled_at_ns``; raise
        LinkError naming the drive and the step that failed."""

    @abc.abstractmethod
    def _read(self, meas: Measurement) -> bool:
        """Fill ``meas``; True if fresh, False if nothing new arrived (see ``read``)."""

    @abc.abstractmethod
    def _write(self, command: np.ndarray) -> None:
        """Send ``command`` (``command_unit``, one per axis)."""

    def _controlled_stop(self, category: int, stop_time: float) -> None:
        """Start a controlled stop of ``category`` (1, 2) over ``stop_time`` s in the drives
        (``controlled_stop``); by default there is none: LinkError."""
        raise LinkError(f"{self.describe()}: no controlled stop (stop category {category}) "
                        "on this link")

    def _write_stopped(self) -> None:
        """A ``write`` after ``safe_stop``: nothing by default; a link whose peer needs a
        steady stream (a plant clocked by writes, a drive's serial watchdog) sends its
        safe command. Raises only LinkError, for a link that is lost."""

    @abc.abstractmethod
    def _safe_stop(self) -> None:
        """Zero the commands and disable (or brake) the drives; called once, on a link
        that is CONFIGURED or ACTIVE (or whose ``_activate`` raised)."""

    def _close(self) -> None:
        """Release what ``_configure`` opened, also when it raised half-way (nothing by
        default); called once."""

    # -- the state machine ------------------------------------------------------------------

    def _enter(self, state: LinkState) -> None:
        self._lifecycle = state
        self._readable = state in _READABLE
        self._writable = state is LinkState.ACTIVE

    def _fail(self, call: str, stop: bool) -> None:
        """After ``call`` raised: stop (if ``stop``) and release, quietly; FAILED."""
        self._failed_in = call
        self._enter(LinkState.FAILED)
        if stop:
            self._quietly(self._safe_stop, f"safe_stop after the failed {call}")
        self._quietly(self._close, f"close after the failed {call}")

    def _quietly(self, hook: Callable[[], None], what: str) -> None:
        """``hook()``; an exception is logged with the link's name, not raised."""
        try:
            hook()
        except Exception as exc:  # noqa: BLE001 - safe_stop and close never raise
            log.error("%s: %s raised %s: %s", self.describe(), what, type(exc).__name__, exc)

    def _refused(self, call: str) -> LinkError:
        """The one error of ``call`` in the current state: the link, the call, the reason."""
        where, state = self.describe(), self._lifecycle
        if state is LinkState.UNCONFIGURED:
            if call == "activate":
                return not_configured(where)
            reason = "before configure(): the link is not configured (call configure() " \
                     "first, or open())"
        elif state is LinkState.CONFIGURED:
            if call == "write":
                return not_active(where)
            reason = "twice: the link is already configured"
        elif state is LinkState.ACTIVE:
            reason = "twice: the link is already active"
        elif state is LinkState.STOPPED:
            reason = "after safe_stop(): the link is stopped (close() it, and make a new one " \
                     "to go on)"
        elif state is LinkState.CLOSED:
            reason = "after close(): a closed link does not open again (make a new one)"
        else:
            reason = f"after a failed {self._failed_in}(): the link was stopped and released " \
                     "(make a new one)"
        return LinkError(f"{where}: {call}() {reason}")


def _bypassed(name: str, hook: str) -> Callable:
    """The ``hook`` of a class that overrides ``name`` itself: the base never calls it."""

    def bypassed(self, *args):
        raise NotImplementedError(f"{type(self).__name__} overrides {name}(), so the base "
                                  f"never calls {hook}()")
    bypassed.__name__ = hook
    return bypassed


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
