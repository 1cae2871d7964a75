"""Communication faults of the emulated devices: what the real link code meets on a rig.

Each emulated device (devices.zmq_plant, devices.cia402_drive, devices.roboclaw_drive)
owns one ``LinkFaults``: the ``[[faults.KIND]]`` tables of the config for the link kinds
(schema.FaultsTable: ``drop``, ``delay``, ``corrupt``, ``bus_off``, ``heartbeat_loss``,
``sync_loss``, ``crc_error``, ``stall``) and the faults injected live through the device's
``inject(kind, params, duration)``. Every fault is a window of the device's plant time,
[t1, t1 + duration) (``duration`` inf: permanent), on one joint's drive or on all
(``joint`` 0). The device calls ``update(t)`` once per tick, with its plant time: it
starts and ends the windows that are due and returns what changed, for the device to
log (one line and one event each); then ``active(kind, joint)`` says whether a reply is
hit, drawing from the window's own generator (``seed``) when it has a ``probability``
below 1. With no fault configured or injected, ``update`` is one attribute test and the
device's reply path unchanged (``idle``).

Which kinds a device takes (``KINDS``) follows its wire; a table of another kind, a
probability outside 0..1 or a joint the plant does not have is a ConfigError naming the
table, raised when the device is made (``hil emulate`` says it in one line, exit 2).
"""
from __future__ import annotations

import math
import queue
from dataclasses import dataclass, field

import numpy as np
from hilrig.drivers.wire import LINK_CODE0
from hilrig.errors import ConfigError
from hilrig.schema import Config

# the parameters of each kind besides joint, t1 and duration (names as in the config)
PARAMETERS = {"drop": ("probability", "seed"), "delay": ("delay",),
              "corrupt": ("probability", "seed"), "bus_off": (), "heartbeat_loss": (),
              "sync_loss": (), "crc_error": ("probability", "seed"), "stall": ()}
# the kinds each emulated device takes, by link.type
KINDS = {"zmq": ("drop", "delay", "corrupt"),
         "canopen": ("drop", "delay", "corrupt", "bus_off", "heartbeat_loss", "sync_loss"),
         "serial": ("drop", "delay", "corrupt", "crc_error", "stall")}
DEFAULTS = {"probability": 1.0, "seed": 0}


@dataclass
class Window:
    """One link fault: ``kind`` on ``joint`` (1-based; 0: every drive) over plant time
    [t1, t2), with its parameters; ``live`` if injected rather than scheduled."""

    kind: str
    joint: int
    t1: float
    t2: float
    params: dict
    live: bool = False
    started: bool = False
    tick: int = -1               # the device's tick (step, SYNC) it started at, once started
    rng: np.random.Generator = field(default=None, repr=False)

    def hits(self) -> bool:
        """Whether this reply is hit: always, or with the window's probability."""
        p = self.params.get("probability", 1.0)
        return p >= 1.0 or self.rng.random() < p

    def describe(self) -> str:
        """e.g. ``drop (probability 0.5) on joint 2``."""
        params = ", ".join(f"{k} {v:g}" for k, v in self.params.items() if k != "seed")
        where = f"joint {self.joint}" if self.joint else "every joint"
        return f"{self.kind}{f' ({params})' if params else ''} on {where}"


class LinkFaults:
    """The link faults of one emulated device (module docstring).

    Args:
        cfg: the resolved config: its ``faults.KIND`` tables.
        link_type: "zmq", "canopen" or "serial": which kinds the device takes.
        n_joints: the plant's actuated joints (a table's ``joint`` is 0..n_joints).

    Times are compared with a tolerance of 1e-9 ``sim.dt`` (as the jams' schedule is), so
    a window of 0.2 s at 1 kHz lasts 200 ticks whatever the rounding of t1 + duration.
    """

    def __init__(self, cfg: Config, link_type: str, n_joints: int):
        self.link_type, self.n_joints = link_type, n_joints
        self.eps = 1e-9 * cfg.sim.dt
        self.kinds = KINDS[link_type]
        self.windows: list[Window] = []        # scheduled or injected, not yet ended
        self._injected: queue.SimpleQueue = queue.SimpleQueue()
        for kind in PARAMETERS:
            tables = getattr(cfg.faults, kind)
            for i, table in enumerate(tables):
                name = f"faults.{kind}[{i}]" if len(tables) > 1 else f"faults.{kind}"
                params = {p: getattr(table, p) for p in PARAMETERS[kind]}
                self.windows.append(self._window(kind, table.joint, table.t1, table.duration,
                                                 params, name))
        self.idle = not self.windows
        self.active_count = 0

    def _window(self, kind: str, joint: int, t1: float, duration: float, params: dict,
                name: str, live: bool = False) -> Window:
        """A checked window; ConfigError naming ``name`` for what this device cannot take."""
        if kind not in self.kinds:
            raise ConfigError(f"{name}: the emulated {self.link_type} device has no link fault "
                              f"'{kind}' (it takes {', '.join(self.kinds)})")
        unknown = set(params) - set(PARAMETERS[kind])
        if unknown:
            raise ConfigError(f"{name}: '{kind}' has no parameter {sorted(unknown)[0]!r} "
                              f"(its parameters: {', '.join(PARAMETERS[kind]) or 'none'})")
        params = {p: params.get(p, DEFAULTS.get(p)) for p in PARAMETERS[kind]}
        if None in params.values():
            missing = [p for p, v in params.items() if v is None]
            raise ConfigError(f"{name}: '{kind}' needs {missing[0]} (s)")
        error = check_params(params)
        if error is not None:
            raise ConfigError(f"{name}.{error}")
        if not 0 <= joint <= self.n_joints:
            raise ConfigError(f"{name}.joint: must be 0 (every drive) or 1..{self.n_joints}, "
                              f"got {joint}")
        if self.link_type == "zmq" and joint:
            raise ConfigError(f"{name}.joint: the ZeroMQ plant has one link for every joint: "
                              f"joint must be 0, got {joint}")
        if not duration >= 0.0:
            raise ConfigError(f"{name}.duration: must be >= 0 s (inf: permanent), got {duration}")
        seed = int(params.get("seed", 0))
        return Window(kind, int(joint), float(t1), float(t1) + float(duration), params, live,
                      rng=np.random.default_rng(seed))

    def inject(self, kind: str, params: dict, duration: float, joint: int = 0) -> Window:
        """A fault from now (the device's next tick) for ``duration`` s (inf: until
        cleared); thread-safe. Returns its window (``started`` and ``tick`` set once the
        device's tick took it). ConfigError (one line) for what this device cannot take."""
        window = self._window(kind, joint, 0.0, duration, dict(params), f"live fault {kind}",
                              live=True)
        self._injected.put(window)
        self.idle = False
        return window

    def update(self, t: float, tick: int = -1) -> list[tuple[str, Window]]:
        """Start and end the windows due at plant time ``t`` (s), the device's ``tick``;
        returns [("start" | "end", window), ...] for the device to report."""
        if self.idle:
            return []
        changes = []
        while True:
            try:
                window = self._injected.get_nowait()
            except queue.Empty:
                break
            window.t1, window.t2 = t, t + (window.t2 - window.t1)   # from this tick
            self.windows.append(window)
        t = t + self.eps
        for window in list(self.windows):
            if not window.started and t >= window.t1:
                window.tick = tick
                window.started = True
                self.active_count += 1
                changes.append(("start", window))
            if window.started and t >= window.t2:
                self.windows.remove(window)
                self.active_count -= 1
                changes.append(("end", window))
        self.idle = not self.windows and self._injected.empty()
        return changes

    def active(self, kind: str, joints: tuple = ()) -> Window | None:
        """The started window of ``kind`` on one of ``joints`` (1-based: those a reply
        concerns, a drive's or a serial controller's; empty: the device as a whole) that
        hits this reply (one draw per reply), or None."""
        if not self.active_count:
            return None
        for window in self.windows:
            if window.started and window.kind == kind and _covers(window, joints) \
                    and window.hits():
                return window
        return None

    def on(self, kind: str, joints: tuple = ()) -> bool:
        """Whether a started window of ``kind`` covers ``joints`` (no draw: for states such
        as bus-off or a stalled line, which hold for the whole window)."""
        return bool(self.active_count) and any(
            w.started and w.kind == kind and _covers(w, joints) for w in self.windows)


def check_params(params: dict) -> str | None:
    """Why a link fault's ``params`` (by name) cannot run, as ``key: why``, or None."""
    if not 0.0 <= params.get("probability", 1.0) <= 1.0:
        return f"probability: must be 0..1, got {params['probability']}"
    if params.get("delay", 0.0) < 0.0 or not math.isfinite(params.get("delay", 0.0)):
        return f"delay: must be a finite number >= 0 s, got {params['delay']}"
    if params.get("seed", 0) != int(params.get("seed", 0)) or params.get("seed", 0) < 0:
        return f"seed: must be a whole number >= 0, got {params['seed']}"
    return None


def parse_params(kind: str, pairs) -> dict:
    """A live link fault's ``PARAM=VALUE`` words (``hil fault drop probability=0.5``) as
    {name: float}; ValueError naming a bad one."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in PARAMETERS[kind]:
            raise ValueError(f"{kind}: unknown parameter {pair!r} (known: "
                             f"{', '.join(PARAMETERS[kind]) or 'none'})")
        try:
            out[name] = float(value)
        except ValueError:
            raise ValueError(f"{kind}: {name} must be a number, got {value!r}") from None
    error = check_params(out)
    if error is not None:
        raise ValueError(f"{kind}: {error}")
    return out


def link_kinds_mask(kinds) -> int:
    """A FAULT_ACK's link kinds (drivers.wire): bit i set for the kind of code 30 + i."""
    from hilrig.plant.faults import KINDS as ALL

    return sum(1 << (ALL[kind].code - LINK_CODE0) for kind in kinds)


def mask_kinds(mask: int) -> tuple:
    """The link kinds of a FAULT_ACK's ``mask`` (link_kinds_mask's inverse)."""
    from hilrig.plant.faults import NAMES

    return tuple(NAMES[LINK_CODE0 + i] for i in range(len(PARAMETERS)) if int(mask) >> i & 1)


DEVICES = {"zmq": "the ZeroMQ plant server (link.type zmq)",
           "canopen": "the emulated CiA 402 drives (link.type canopen)",
           "serial": "the emulated packet-serial drives (link.type serial)"}


def devices_taking(kind: str) -> str:
    """Which emulated devices take the link fault ``kind`` (for a refusal line)."""
    return " and ".join(DEVICES[t] for t, kinds in KINDS.items() if kind in kinds)


def _covers(window: Window, joints: tuple) -> bool:
    return window.joint == 0 or not joints or window.joint in joints


def corrupted(data: bytes) -> bytes:
    """``data`` with its first byte inverted (a header or address that no longer checks)."""
    return bytes((data[0] ^ 0xFF,)) + data[1:] if data else data
