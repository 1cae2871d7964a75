"""``--live``: watch a running rig in Foxglove, and tune it from Foxglove's parameter panel.

A Foxglove WebSocket server (the Foxglove SDK's, behind live.ws_shim so that clients
offering either handshake name of the protocol, ``foxglove.websocket.v1`` or
``foxglove.sdk.v1``, connect; docs/LIVE.md) with one JSON channel per signal (CHANNELS:
topic, JSON schema). A publisher thread reads the loop's telemetry ring (the rows the loop
publishes for the MCAP writer, read again, never written) every PERIOD s, computes what
the loop does not record (live.signals) and logs, to the channels a client subscribed to,
one message per channel for every row at that channel's rate (``--live-rate``: every
``step``-th tick; DEFAULT_RATE Hz, every row on request). A block of rows is encoded
at once (``Encoder``: one format template per channel, no JSON encoder per message).
Messages are stamped with the run's wall-clock time (the wall clock when the loop
started plus the row's plant time ``t``, which the message also carries, as the log does).
Where the model has frames, the robot in 3D goes out as in the log (telemetry.scene):
``/hil/frames`` (foxglove.FrameTransforms) at its ``--live-rate``, ``/hil/scene``
(foxglove.SceneUpdate) every SCENE_PERIOD and when a jam, another fault or a contact changes a colour.

It never touches the loop: a slow or stuck client makes the SDK drop that client's
oldest messages (its queue holds about BACKLOG_SECONDS of the configured rates), and if
the publisher falls behind by more than MAX_ROWS rows it skips to the newest rows
(counted in ``skipped``, said in one line when the view stops). The view is not the
record: the log keeps every row. Events (faults, overruns, live changes, the stop and
its reason) come from the telemetry's event listeners.

With live parameters (live.params) the server has the Parameters capability: the
live keys are parameters named as in the config (``controller.kp``, ...), a set is
validated and applied as ``hil set``'s, and the new values reach every subscribed
client once (a set from Foxglove: the SDK publishes the values the set returns; a
``hil set``: the publisher publishes them once the loop took them); a refused set
leaves the values unchanged and sends the reason as an error status. The protocol has
no authentication and any local user can open the view, so changes come only from a
client that first set the parameter ``hil.token`` to the run's token: a per-run secret
the run prints on its own terminal (stderr) when the view starts, compared in constant
time. Other clients watch, and their sets are refused.
"""
from __future__ import annotations

import collections
import hmac
import ipaddress
import json
import logging
import secrets
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
from hilrig.errors import ConfigError
from hilrig.telemetry.scene import FRAMES_TOPIC, SCENE_TOPIC
from hilrig.timing.sched import apply_thread, helper_priority, spawning

if TYPE_CHECKING:
    from hilrig.live.params import LiveParameters

DEFAULT_ADDRESS = "127.0.0.1:8765"
DEFAULT_RATE = 100.0      # Hz per signal channel (--live-rate): what a plot needs
PERIOD = 0.005            # s between the publisher's wake-ups
MAX_ROWS = 2000           # rows per wake-up at most (more: skip to the newest)
BACKLOG_SECONDS = 2.0     # s of messages at the configured rates queued per client (at least
                          # 1024 messages); then the SDK drops that client's oldest
TOKEN_PARAMETER = "hil.token"   # a client sets it to the run's token before it may change
SCENE_PERIOD = 1.0        # s between repeats of the robot's shape (a client that subscribes
                          # late gets it within this; a colour change goes at once)

log = logging.getLogger("hil.live")

_NUM = {"type": "number"}
_INT = {"type": "integer"}
# items of one type: Foxglove Studio 1.x and Lichtblick refuse a channel whose schema has a
# type union such as ["number", "null"] ("Unsupported type ... for array item"), and plot
# none of it; a value that is not finite is sent as null all the same (JSON has no NaN)
_ARR = {"type": "array", "items": {"type": "number"},
        "description": "null where a value is not finite"}


def _schema(title: str, **fields) -> dict:
    return {"title": title, "type": "object",
            "properties": {"t": _NUM, "tick": _INT, **fields}, "required": ["t", "tick"]}


# topic -> (JSON schema, row groups it carries); t in s, tick the tick index
CHANNELS = {
    "/hil/joint_state": (_schema("hilrig.JointState", q=_ARR, qd=_ARR), ("q", "qd")),
    "/hil/command": (_schema("hilrig.Command", u=_ARR, i=_ARR), ("u", "i")),
    "/hil/reference": (_schema("hilrig.Reference", r=_ARR, rd=_ARR),
                       ("reference", "reference_rate")),
    "/hil/tracking_error": (_schema("hilrig.TrackingError", e=_ARR, norm=_NUM),
                            ("tracking_error",)),
    "/hil/timing": (_schema("hilrig.Timing", lateness=_NUM, compute_read=_NUM,
                            compute_control=_NUM, compute_write=_NUM, compute_tick=_NUM),
                    ("lateness", "compute_read", "compute_control", "compute_write",
                     "compute_tick")),
    "/hil/diagnostics": (_schema("hilrig.Diagnostics", residual=_NUM, det_phi_theta=_NUM,
                                 det_phi_x=_NUM, energy=_NUM, com=_ARR),
                         ("residual", "det_phi_theta", "det_phi_x", "energy", "com")),
}
EVENT_TOPIC = "/hil/event"
EVENT_SCHEMA = {"title": "hilrig.Event", "type": "object",
                "properties": {"kind": {"type": "string"}, "t": _NUM}, "required": ["kind", "t"]}
# message field names where they differ from the row group's name
FIELD = {"reference": "r", "reference_rate": "rd", "tracking_error": "e"}


def parse_address(text: str, allow_remote: bool) -> tuple[str, int]:
    """``HOST:PORT`` of ``--live``; ConfigError for a bad one, or a non-loopback host
    without ``--live-allow-remote``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--live {text!r}: expected HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    host = host.strip("[]") or "127.0.0.1"
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise ConfigError(f"--live {text!r}: {host} is not a loopback address; anyone who "
                          "reaches it could change the gains: add --live-allow-remote to "
                          "serve it anyway")
    return host, int(port)


def parse_rates(items: list[str] | None) -> dict:
    """``--live-rate`` values, each ``HZ`` (every signal channel) or ``TOPIC=HZ`` (that one),
    as {topic or None: Hz}; ConfigError for a bad one."""
    rates = {None: DEFAULT_RATE}
    for item in items or []:
        topic, sep, value = item.rpartition("=")
        topic = topic if sep else None
        if topic is not None and topic not in (*CHANNELS, FRAMES_TOPIC):
            raise ConfigError(f"--live-rate {item!r}: no channel {topic!r} (channels: "
                              f"{', '.join((*CHANNELS, FRAMES_TOPIC))})")
        try:
            hz = float(value)
        except ValueError:
            hz = float("nan")
        if not hz > 0 or hz == float("inf"):
            raise ConfigError(f"--live-rate {item!r}: expected a rate in Hz > 0, e.g. 100 or "
                              "/hil/timing=1000 (the loop's rate or more: every row)")
        rates[topic] = hz
    return rates


def rate_step(hz: float, dt: float) -> int:
    """Every how many ticks (period ``dt``, s) a channel of ``hz`` publishes: the nearest
    whole number, at least 1 (a rate at or above the loop's: every row)."""
    return max(1, int(round(1.0 / (hz * dt))))


class Encoder:
    """JSON messages of one channel for a block of rows, without a JSON encoder per message:
    the fields' values (``t``, ``tick``, then each field's numbers) go through one format
    template, ``%r`` being Python's shortest round-trip float text, as json's. A row
    with a non-finite value (JSON has none) is encoded by json with null there."""

    def __init__(self, fields: list[tuple[str, int | None]]):
        """``fields``: (message key, number of values; None for a scalar), in order."""
        self.fields = fields
        parts = ['"t":%r', '"tick":%d']
        for key, width in fields:
            parts.append(f'"{key}":' + ("%r" if width is None else
                                       "[" + ",".join(["%r"] * width) + "]"))
        self.template = "{" + ",".join(parts) + "}"

    def __call__(self, t: np.ndarray, tick: np.ndarray, columns: list) -> list[bytes]:
        """Messages of the rows: t (s), tick, and per field its (n,) or (n, width) array."""
        block = np.column_stack([t, tick] + columns)
        finite = np.isfinite(block).all(axis=1)
        template = self.template
        out = [(template % tuple(row)).encode() for row in block.tolist()]
        for k in np.flatnonzero(~finite):
            message = {"t": float(t[k]), "tick": int(tick[k])}
            for (key, width), column in zip(self.fields, columns):
                value = np.where(np.isfinite(column[k]), column[k], None)
                message[key] = value.tolist()
            out[k] = json.dumps(message).encode()
        return out


class LiveView:
    """The Foxglove server of one run: a hook (``start(run)``, ``stop()``).

    ``run`` has ``cfg`` and ``telemetry`` (a telemetry.recorder.Telemetry whose ring the
    loop fills), and optionally ``controller`` (its live params) and ``limits``.
    """

    def __init__(self, host: str, port: int, live: LiveParameters | None = None,
                 rates: dict | None = None):
        """``rates``: parse_rates' {topic or None: Hz} (default: DEFAULT_RATE everywhere)."""
        self.host, self.port = host, port
        self.live = live
        self.rates = rates or {None: DEFAULT_RATE}
        self.server = None
        self.shim = None
        self.origin_ns = 0          # wall clock (ns since the epoch) at plant time 0: set
                                    # from the first row seen (see _publish)
        self.published = 0          # rows published
        self.skipped = 0            # rows the publisher skipped, behind (never published)
        self._events = collections.deque()
        self.scene = None           # telemetry.scene.SceneMessages of a model with frames
        self.scene_channels = {}    # FRAMES_TOPIC, SCENE_TOPIC -> its channel
        self.frames_step = 1        # ticks between frames
        self._scene_sent = 0.0      # monotonic s when the shape last went
        self._params_changed = False
        self._setting = threading.local()   # .active: in a set from Foxglove (this thread)
        self._stop = threading.Event()
        self._thread = None
        self.token = secrets.token_hex(4)   # the run's secret for changes (8 hex digits)
        self.trusted: set = set()           # ids of the clients that gave it
        self.last_untrusted = 0.0           # monotonic s of the last refusal logged

    def start(self, run) -> None:
        import foxglove        # here: a command without --live never loads the SDK
        from foxglove.websocket import Capability
        from hilrig.live.signals import RowSignals   # (kernels: here, not at `hil --help`)

        self.telemetry = run.telemetry
        controller = getattr(run, "controller", None)
        u = run.telemetry.columns["u"]
        nact = u.stop - u.start
        params = getattr(controller, "params", None)   # (the emulator has none)
        self.signals = RowSignals(run.cfg, run.telemetry.columns, params, nact)
        self.signals.block(run.telemetry.ring[:1].copy())   # load its kernels now, not at
                                                            # the first rows (~1 s late)
        self.context = foxglove.Context()
        groups = set(run.telemetry.columns) | ({"reference", "reference_rate", "tracking_error"}
                                               if self.signals.has_reference else set())
        self.channels = {}          # topic -> (channel, row groups, step in ticks)
        dt = run.cfg.sim.dt
        per_second = 10.0           # messages a second of all channels (events: a few)
        for topic, (schema, names) in CHANNELS.items():
            present = [n for n in names if n in groups]
            if present:
                step = rate_step(self.rates.get(topic, self.rates[None]), dt)
                per_second += 1.0 / (step * dt)
                self.channels[topic] = (foxglove.Channel(topic, schema=schema,
                                                         context=self.context), present, step)
        self.encoders = {}          # topic -> Encoder (made at its first block)
        self.event_channel = foxglove.Channel(EVENT_TOPIC, schema=EVENT_SCHEMA,
                                              context=self.context)
        self._start_scene(run.cfg, dt)
        if self.scene is not None:
            per_second += 1.0 / (self.frames_step * dt)
        capabilities = [Capability.Parameters] if self.live is not None else []
        listener = _listener(self) if self.live is not None else None
        self.priority = view_priority(run)
        with spawning(self.priority):   # the shim's threads and the SDK's are born with it
            self._serve(capabilities, listener, per_second)
        self.port = self.shim.port
        if self.live is not None:
            self.live.listeners.append(self._changed)
        self.telemetry.listeners.append(self._event)
        self._seen = int(self.telemetry.head[0])
        self._thread = threading.Thread(target=self._run, name="hil-live", daemon=True)
        self._thread.start()
        log.info("live view: foxglove ws://%s:%d (Foxglove: Open connection, Foxglove "
                 "WebSocket)", self.host, self.port)
        if self.live is not None:
            log.info("live view: to change parameters from Foxglove, set %s to %s in its "
                     "parameter panel first", TOKEN_PARAMETER, self.token)

    def _serve(self, capabilities: list, listener, per_second: float) -> None:
        """The SDK's server on a free loopback port (its queue per client: BACKLOG_SECONDS
        of ``per_second`` messages), then the shim on the view's address in front of it: a
        client is accepted only once there is a server to pass it to (a shim listening
        first dropped a client that came in between unanswered). ConfigError if either
        cannot start."""
        import foxglove
        from hilrig.live.ws_shim import Shim

        try:
            self.server = foxglove.start_server(
                name="hilrig", host="127.0.0.1", port=0, capabilities=capabilities,
                server_listener=listener, context=self.context,
                message_backlog_size=max(1024, int(BACKLOG_SECONDS * per_second)))
        except Exception as exc:  # noqa: BLE001 -- the SDK's bind errors are not typed
            raise ConfigError(f"--live: the Foxglove server cannot start: {exc}") from None
        try:
            self.shim = Shim(self.host, self.port, self.server.port)
        except OSError as exc:
            self.server.stop()
            raise ConfigError(f"--live {self.host}:{self.port}: cannot serve: {exc}") from None

    def _start_scene(self, cfg, dt: float) -> None:
        """The robot's 3D channels (telemetry.scene), where its model has frames: the
        frames at their rate (``--live-rate``, FRAMES_TOPIC), the shape every SCENE_PERIOD."""
        import foxglove
        from hilrig.telemetry.scene import SceneMessages, schemas, skeleton_of

        skeleton = skeleton_of(cfg, self.telemetry.columns)
        if skeleton is None:
            return
        self.scene = SceneMessages(skeleton, self.telemetry.columns["q"])
        self.frames_step = rate_step(self.rates.get(FRAMES_TOPIC, self.rates[None]), dt)
        for topic, (name, encoding, data) in schemas().items():
            self.scene_channels[topic] = foxglove.Channel(
                topic, message_encoding=encoding,
                schema=foxglove.Schema(name=name, encoding=encoding, data=data),
                context=self.context)

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(5.0)
        self._publish(last=True)        # the last rows and the stop event
        self.shim.drain()               # (the SDK's stop drops what it has not sent yet)
        self.server.stop()              # (its close frames pass the shim, then the shim ends)
        self.shim.close()
        self._thread = None
        if self.skipped:
            log.info("live view: %d rows were not shown (its publisher fell behind; the "
                     "log has them)", self.skipped)

    # -- any thread ---------------------------------------------------------------
    def _event(self, kind: str, fields: dict) -> None:
        self._events.append({"kind": kind, **fields})

    def _changed(self, ack) -> None:
        """A change the loop took: published by the publisher thread (not from a callback
        of the server's), unless it is a set from Foxglove, whose returned values the SDK
        publishes itself (publishing them here too sent every update twice)."""
        if not getattr(self._setting, "active", False):
            self._params_changed = True

    def parameters(self, names=None) -> list:
        """The live parameters (all, or those named) as Foxglove parameters; an unset one
        (safety limits, controller.start) as an empty array (set [] to unset it again)."""
        from foxglove import Parameter, ParameterType

        out = [] if names and TOKEN_PARAMETER not in names else \
            [Parameter(TOKEN_PARAMETER, value="")]      # never shows the token
        for name, value in self.live.values().items():
            if names and name not in names:
                continue
            if isinstance(value, list):
                out.append(Parameter(name, value=[float(v) for v in value],
                                     type=ParameterType.Float64Array))
            elif isinstance(value, float):
                out.append(Parameter(name, value=value, type=ParameterType.Float64))
            elif value is None:
                out.append(Parameter(name, value=[], type=ParameterType.Float64Array))
            else:
                out.append(Parameter(name, value=value))
        return out

    # -- the publisher thread -------------------------------------------------------
    def _run(self) -> None:
        if self.priority > 0:
            apply_thread(-1, self.priority)
        while not self._stop.wait(PERIOD):
            try:
                self._publish()
            except Exception:  # noqa: BLE001 -- the view must never take the run down
                log.exception("live view: publishing failed")

    def _publish(self, last: bool = False) -> None:
        tel = self.telemetry
        head = int(tel.head[0])
        if not self.origin_ns:
            # The wall clock of plant time 0: now less the newest row's t, at the first
            # wake-up that sees a row (late by this wake-up's delay, a few ms; the loop
            # starts its clock only once its kernel is loaded, after the hooks start).
            if not head and not last:
                return
            t = float(tel.ring[(head - 1) % tel.capacity, tel.columns["t"]]) if head else 0.0
            self.origin_ns = time.time_ns() - int(round(t * 1e9))
        subscribed = [(topic, *entry) for topic, entry in self.channels.items()
                      if entry[0].has_sinks()]
        robot = self.scene is not None and any(c.has_sinks()
                                               for c in self.scene_channels.values())
        if head - self._seen > min(MAX_ROWS, tel.capacity // 2):
            if subscribed or robot:         # (rows nobody watches are not missed)
                self.skipped += head - min(MAX_ROWS, tel.capacity // 2) - self._seen
            self._seen = head - min(MAX_ROWS, tel.capacity // 2)
        if (subscribed or robot) and head > self._seen:
            first = self._seen
            index = np.arange(first, head) % tel.capacity
            rows = tel.ring[index]
            if int(tel.head[0]) - tel.capacity >= first:      # lapped while copying
                keep = int(tel.head[0]) - tel.capacity - first + 1
                rows = rows[keep:]
                self.skipped += keep
            if subscribed:
                self._send(rows, subscribed)
            if robot:
                try:
                    self._send_robot(rows)
                except Exception:  # noqa: BLE001 -- a model's frames (a user's code)
                    log.exception("live view: the robot's frames failed; the view goes on "
                                  "without the 3D channels")
                    self.scene = None
        self._seen = head
        if self._params_changed:
            self._params_changed = False
            self.server.publish_parameter_values(self.parameters())
        while self._events:
            event = self._events.popleft()
            if self.scene is not None:
                self.scene.event(event["kind"], event)
            self.event_channel.log(json.dumps(event, default=_plain).encode(),
                                   log_time=self.stamp(event.get("t", 0.0)))

    def _send_robot(self, rows: np.ndarray) -> None:
        """The frames of ``rows`` at their rate, and the shape where a colour changed
        (or SCENE_PERIOD has passed: for the clients that subscribed since)."""
        now = time.monotonic()
        if now - self._scene_sent >= SCENE_PERIOD:
            self.scene.dirty = True
        columns = self.telemetry.columns
        t = rows[:, columns["t"]]
        stamps = self.origin_ns + np.rint(np.nan_to_num(t) * 1e9).astype(np.int64)
        for topic, stamp, data in self.scene.rows(rows, rows[:, columns["tick"]], stamps,
                                                  self.frames_step):
            if topic == SCENE_TOPIC:
                self._scene_sent = now
            self.scene_channels[topic].log(data, log_time=stamp)

    def stamp(self, t: float) -> int:
        """The log time (ns since the epoch, wall clock) of plant time ``t`` (s)."""
        return self.origin_ns + int(round(t * 1e9)) if np.isfinite(t) else self.origin_ns

    def _send(self, rows: np.ndarray, subscribed) -> None:
        """Log the messages of ``rows`` on the ``subscribed`` channels (topic, channel,
        row groups, step), each at its rate: the rows whose tick is a multiple of its step."""
        tick = rows[:, self.telemetry.columns["tick"]]
        wanted = np.zeros(len(rows), bool)
        for _, _, _, step in subscribed:
            wanted |= tick % step == 0
        if not wanted.any():
            return
        signals = self.signals.block(rows[wanted])
        t, tick = signals["t"], signals["tick"]
        stamps = self.origin_ns + np.rint(np.nan_to_num(t) * 1e9).astype(np.int64)
        for topic, channel, names, step in subscribed:
            keep = np.flatnonzero(tick % step == 0)
            if not keep.size:
                continue
            columns = [signals[n][keep] for n in names]
            keys = [FIELD.get(n, n) for n in names]
            if "tracking_error" in names:
                columns.append(np.linalg.norm(signals["tracking_error"][keep], axis=1))
                keys.append("norm")
            encoder = self.encoders.get(topic)
            if encoder is None:
                encoder = self.encoders[topic] = Encoder(
                    [(k, None if c.ndim == 1 else c.shape[1]) for k, c in zip(keys, columns)])
            for message, stamp in zip(encoder(t[keep], tick[keep], columns),
                                      stamps[keep].tolist()):
                channel.log(message, log_time=stamp)
            time.sleep(0)   # between channels: a loop thread in Python (hil control) waits
        self.published += len(t)


def view_priority(run) -> int:
    """SCHED_FIFO priority of the view's threads (its publisher, the shim's, the SDK's
    server's; 0: normal scheduling): timing.sched.helper_priority (1, the lowest) wherever
    the loop runs at SCHED_FIFO above it, ``hil run``'s too, whose loop needs no Python
    lock: at normal priority the publisher waited for a CPU behind every busy process of
    a shared host (measured: 15 ms median, 40-60 ms p99 from a row's publication to its
    messages leaving, at load 8 on 2 CPUs, against 4 and 7 ms at priority 1; docs/LIVE.md).
    Never above the loop, so never where it runs at normal priority (``--fast``)."""
    priority = getattr(run, "helper_priority", None)   # hil control, hil emulate: theirs
    if priority is None:
        priority = 0 if getattr(run, "fast", False) else helper_priority(
            run.cfg.loop.fifo_priority)
    return priority


def _listener(view: LiveView):
    """The SDK's server listener of ``view``: get and set of the live parameters."""
    from foxglove import StatusLevel
    from foxglove.websocket import ServerListener
    from hilrig.live.params import LiveError

    class Listener(ServerListener):
        def on_get_parameters(self, client, param_names, request_id=None):
            return view.parameters(param_names)

        def on_set_parameters(self, client, parameters, request_id=None):
            changes = {p.name: p.get_value() for p in parameters}
            token = changes.pop(TOKEN_PARAMETER, None)
            if token is not None:
                if isinstance(token, str) and hmac.compare_digest(token, view.token):
                    view.trusted.add(client.id)
                else:
                    view.server.publish_status(f"refused: wrong {TOKEN_PARAMETER}",
                                               StatusLevel.Error)
                    return view.parameters()
            if not changes:
                return view.parameters()
            if client.id not in view.trusted:
                now = time.monotonic()
                if now - view.last_untrusted > 1.0:       # at most one line a second
                    view.last_untrusted = now
                    log.warning("live view: a client without the run's token tried to "
                                "change %s", ", ".join(sorted(map(str, changes)))[:200])
                view.server.publish_status(
                    f"refused: set {TOKEN_PARAMETER} to the token the run printed first",
                    StatusLevel.Error)
                return view.parameters()
            view._setting.active = True
            try:
                view.live.change(changes, source="foxglove")
            except (ConfigError, LiveError) as exc:
                view.server.publish_status(f"refused: {exc}", StatusLevel.Error)
            finally:
                view._setting.active = False
            return view.parameters()

    return Listener()


def _plain(value):
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return str(value)
