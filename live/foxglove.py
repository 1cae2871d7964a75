"""``--live``: watch a running rig in Foxglove, and tune it from Foxglove's parameter panel.

A Foxglove WebSocket server (the Foxglove SDK: protocol ``foxglove.websocket.v1``, under the
handshake name ``foxglove.sdk.v1``; docs/LIVE.md) with
one JSON channel per signal (CHANNELS: topic, JSON schema). A publisher thread reads the
loop's telemetry ring (the rows the loop publishes for the MCAP writer, read again, never
written), every PERIOD s, computes what the loop does not record (live.signals) and
logs one message per row and channel to the channels a client subscribed to. It never
touches the loop: a slow or stuck client makes the SDK drop that client's oldest
messages (its queue holds BACKLOG of them), and if the publisher falls
behind by more than half the ring it skips to the newest rows (counted in ``skipped``,
said in one line when the view stops). The view is not the record: the log keeps every
row. Events (faults, overruns, live changes, the stop and its reason) come from the
telemetry's event listeners.

With live parameters (live.params) the server has the Parameters capability: the
live keys are parameters named as in the config (``controller.kp``, ...), a set is
validated and applied as ``hil set``'s, and the new values are published to every
client once the loop took them; a refused set leaves the values unchanged and sends
the reason as an error status. The protocol has no authentication and any local user
can open the view, so changes come only from a client that first set the parameter
``hil.token`` to the run's token: a per-run secret the run prints on its own terminal
(stderr) when the view starts, compared in constant time. Other clients watch, and
their sets are refused.
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
from hilrig.timing.sched import apply_thread

if TYPE_CHECKING:
    from hilrig.live.params import LiveParameters

DEFAULT_ADDRESS = "127.0.0.1:8765"
PERIOD = 0.02             # s between the publisher's wake-ups
MAX_ROWS = 2000           # rows per wake-up at most (more: skip to the newest)
BACKLOG = 16384           # messages queued per client (3 s of 5 channels at 1 kHz); then the
                          # SDK drops that client's oldest
TOKEN_PARAMETER = "hil.token"   # a client sets it to the run's token before it may change

log = logging.getLogger("hil.live")

_NUM = {"type": "number"}
_INT = {"type": "integer"}
_ARR = {"type": "array", "items": {"type": ["number", "null"]}}


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


def _json_values(array: np.ndarray) -> list:
    """An array as (nested) lists for JSON, which has no NaN: non-finite values become null."""
    if np.isfinite(array).all():
        return array.tolist()
    return np.where(np.isfinite(array), array, None).tolist()


class LiveView:
    """The Foxglove server of one run: a hook (``start(run)``, ``stop()``).

    ``run`` has ``cfg`` and ``telemetry`` (a telemetry.recorder.Telemetry whose ring the
    loop fills), and optionally ``controller`` (its live params) and ``limits``.
    """

    def __init__(self, host: str, port: int, live: LiveParameters | None = None):
        self.host, self.port = host, port
        self.live = live
        self.server = None
        self.published = 0          # rows published
        self.skipped = 0            # rows the publisher skipped, behind (never published)
        self._events = collections.deque()
        self._params_changed = False
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
        self.context = foxglove.Context()
        groups = set(run.telemetry.columns) | ({"reference", "reference_rate", "tracking_error"}
                                               if self.signals.has_reference else set())
        self.channels = {}
        for topic, (schema, names) in CHANNELS.items():
            present = [n for n in names if n in groups]
            if present:
                self.channels[topic] = (foxglove.Channel(topic, schema=schema,
                                                         context=self.context), present)
        self.event_channel = foxglove.Channel(EVENT_TOPIC, schema=EVENT_SCHEMA,
                                              context=self.context)
        capabilities = [Capability.Parameters] if self.live is not None else []
        listener = _listener(self) if self.live is not None else None
        try:
            self.server = foxglove.start_server(
                name="hilrig", host=self.host, port=self.port, capabilities=capabilities,
                server_listener=listener, context=self.context, message_backlog_size=BACKLOG)
        except Exception as exc:  # noqa: BLE001 -- the SDK's bind errors are not typed
            raise ConfigError(f"--live {self.host}:{self.port}: cannot serve: {exc}") from None
        self.port = self.server.port
        if self.live is not None:
            self.live.listeners.append(self._changed)
        self.telemetry.listeners.append(self._event)
        self._seen = int(self.telemetry.head[0])
        # below the loop; SCHED_FIFO 1 where the loop runs Python (timing.sched)
        self.priority = getattr(run, "helper_priority", 0)
        self._thread = threading.Thread(target=self._run, name="hil-live", daemon=True)
        self._thread.start()
        log.info("live view: foxglove ws://%s:%d (Foxglove: Open connection, Foxglove "
                 "WebSocket)", self.host, self.port)
        if self.live is not None:
            log.info("live view: to change parameters from Foxglove, set %s to %s in its "
                     "parameter panel first", TOKEN_PARAMETER, self.token)

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(5.0)
        self._publish()                 # the last rows and the stop event
        self.server.stop()
        self._thread = None
        if self.skipped:
            log.info("live view: %d rows were not shown (its publisher fell behind; the "
                     "log has them)", self.skipped)

    # -- any thread ---------------------------------------------------------------
    def _event(self, kind: str, fields: dict) -> None:
        self._events.append({"kind": kind, **fields})

    def _changed(self, ack) -> None:
        self._params_changed = True     # published by the publisher thread, not from a
                                        # callback of the server's

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

    def _publish(self) -> None:
        tel = self.telemetry
        head = int(tel.head[0])
        subscribed = [(ch, names) for ch, names in self.channels.values() if ch.has_sinks()]
        if head - self._seen > min(MAX_ROWS, tel.capacity // 2):
            if subscribed:                  # (rows nobody watches are not missed)
                self.skipped += head - min(MAX_ROWS, tel.capacity // 2) - self._seen
            self._seen = head - min(MAX_ROWS, tel.capacity // 2)
        if subscribed and head > self._seen:
            first = self._seen
            index = np.arange(first, head) % tel.capacity
            rows = tel.ring[index]
            if int(tel.head[0]) - tel.capacity >= first:      # lapped while copying
                keep = int(tel.head[0]) - tel.capacity - first + 1
                rows = rows[keep:]
                self.skipped += keep
            self._send(rows, subscribed)
        self._seen = head
        if self._params_changed:
            self._params_changed = False
            self.server.publish_parameter_values(self.parameters())
        while self._events:
            event = self._events.popleft()
            self.event_channel.log(json.dumps(event, default=_plain).encode(),
                                   log_time=int(round(event.get("t", 0.0) * 1e9)))

    def _send(self, rows: np.ndarray, subscribed) -> None:
        signals = self.signals.block(rows)
        t = signals["t"].tolist()
        tick = signals["tick"].astype(np.int64).tolist()
        for channel, names in subscribed:
            columns = {FIELD.get(n, n): _json_values(signals[n]) for n in names}
            if "tracking_error" in names:
                columns["norm"] = _json_values(np.linalg.norm(signals["tracking_error"], axis=1))
            keys = list(columns)
            values = [columns[k] for k in keys]
            for k in range(len(t)):
                message = {"t": t[k], "tick": tick[k]}
                for key, column in zip(keys, values):
                    message[key] = column[k]
                channel.log(json.dumps(message).encode(), log_time=int(round(t[k] * 1e9)))
                time.sleep(0)      # a loop thread in Python (hil control) waits at most a row
        self.published += len(t)


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
            try:
                view.live.change(changes, source="foxglove")
            except (ConfigError, LiveError) as exc:
                view.server.publish_status(f"refused: {exc}", StatusLevel.Error)
            return view.parameters()

    return Listener()


def _plain(value):
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return str(value)
