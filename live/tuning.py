"""``hil set``: the ZeroMQ endpoint where a running ``hil run`` or ``hil control`` takes
live parameter changes (live.params), and its client.

Requests and replies are single JSON frames (at most MAX_MESSAGE bytes; nothing is
unpickled): ``{"set": ["controller.kp=80", ...]}`` (values in TOML syntax, as ``--set``)
is answered ``{"ok": true, "tick": K, "t": T, "changes": {...}}`` once the loop took the
change at tick K, or ``{"ok": false, "error": "..."}``; ``{"get": true}`` is answered
``{"ok": true, "values": {...}}``; ``{"fault": {"kind": "jam", "joint": 2, "duration":
0.1}}`` (or any kind of plant.faults.KINDS, with ``"params"`` and ``"channel"``: ``hil
fault``) starts a fault on a joint of the run's plant, or clears its faults, at its next tick
boundary and is answered ``{"ok": true, "tick": K, "t": T}`` once the loop took it (a
``hil run``; a ``hil control`` refuses: its plant is behind a link, and faults go to the
emulator). The endpoint is the run's own (remote.runs: by default
``ipc://RUNTIME/set-RUN_ID``), bound by drivers.endpoint.bind: an ipc socket file
readable and writable by its owner only, never one a live process serves, or a TCP
port on the loopback interface with CURVE keys (``hil keys``).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import math
import os
import threading
import time

import zmq
from hilrig.drivers import endpoint as endpoints
from hilrig.errors import ConfigError
from hilrig.settings.config import parse_value
from hilrig.live.params import LiveError, LiveParameters

MAX_MESSAGE = 65536
POLL_MS = 100
FAULT_ACK_TIMEOUT = 2.0     # s: a live fault not taken by the loop within this is refused
FAULT_POLL = 0.001          # s: how often the serving thread looks for the loop's ack

log = logging.getLogger("hil.tuning")


class TuningError(RuntimeError):
    """The run refused the change or did not answer; the message says why."""


def check_endpoint(endpoint: str) -> None:
    """ConfigError unless ``endpoint`` is ipc:// or tcp:// on a loopback address."""
    if endpoint.startswith("ipc://"):
        return
    if endpoint.startswith("tcp://"):
        host = endpoint[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if loopback:
            return
    raise ConfigError(f"--set-endpoint {endpoint!r}: live tuning takes an ipc:// endpoint or "
                      "tcp:// on a loopback address (127.0.0.1, ::1) only")


def parse_assignments(items: list[str]) -> dict:
    """``["key=value", ...]`` (TOML values, as ``--set``) -> {key: value}; ConfigError."""
    out = {}
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"expected key=value, got {item!r}")
        key, text = item.split("=", 1)
        out[key.strip()] = parse_value(text.strip())
    return out


class TuningServer:
    """The ``hil set`` endpoint of a run: a hook (``start(run)``, ``stop()``) serving
    requests in its own thread, never in the loop's, from its creation on (until the
    loop runs, a change is refused: the run is starting)."""

    def __init__(self, endpoint: str, live: LiveParameters):
        check_endpoint(endpoint)
        self.endpoint = endpoint
        self.live = live
        self.run = None         # the running session, once started (live faults)
        self._stop = threading.Event()
        self._window, self._suppressed = -1.0, 0      # _refused's rate limit
        self.socket = zmq.Context.instance().socket(zmq.REP)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        try:
            endpoints.bind(self.socket, endpoint, "hil set")
        except BaseException:
            self.socket.close(0)
            raise
        self._thread = threading.Thread(target=self._serve, name="hil-tuning", daemon=True)
        self._thread.start()

    def start(self, run) -> None:
        """The run's loop is about to start: faults go to ``run`` from now on (the live
        parameters say by themselves when the loop runs)."""
        self.run = run

    def stop(self) -> None:
        """Stop serving and unbind (idempotent; also when the run never started)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        if not self.socket.closed:
            endpoints.close(self.socket, self.endpoint)

    close = stop

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.socket.poll(POLL_MS):
                continue
            try:
                frame = self.socket.recv(zmq.NOBLOCK)
            except zmq.ZMQError:
                continue
            try:
                reply = self.answer(frame)
            except Exception as exc:      # noqa: BLE001 - a request must never end the service
                reply = {"ok": False, "error": f"request refused: {type(exc).__name__}"}
                self._refused(f"{type(exc).__name__}: {exc}")
            self.socket.send(json.dumps(reply, default=str).encode())

    def _refused(self, error: str) -> None:
        """Log a request that ``answer`` could not handle (a bug it refused rather than
        die of): the first of each second, then how many more came in that second (a
        flood of such requests is a few lines)."""
        now = time.monotonic()
        if now - self._window >= 1.0:
            if self._suppressed:
                log.warning("hil set: %d more requests refused in the last second",
                            self._suppressed)
            self._window, self._suppressed = now, 0
            log.warning("hil set: refused a request: %s", error[:200])
        else:
            self._suppressed += 1

    def answer(self, frame: bytes) -> dict:
        """The reply to one request frame (any bytes)."""
        try:
            request = json.loads(frame.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return {"ok": False, "error": "not a JSON request (or nested too deeply)"}
        if not isinstance(request, dict):
            return {"ok": False, "error": "a request is a JSON object"}
        if request.get("get") is True:
            if self.live.cfg is None:
                return {"ok": False, "error": "the run is starting (its loop is not running yet)"}
            return {"ok": True, "values": self.live.values()}
        if "fault" in request:
            return self.fault(request["fault"])
        items = request.get("set")
        if not isinstance(items, list) or not items:
            return {"ok": False, "error": 'expected {"set": ["key=value", ...]} or {"get": true}'}
        try:
            ack = self.live.change(parse_assignments(items), source="hil set")
        except (ConfigError, LiveError) as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "tick": ack.tick, "t": ack.t, "changes": ack.changes}

    def fault(self, spec) -> dict:
        """Post the live fault ``spec`` ({"kind": KIND, "joint": K (1-based), "duration":
        S (s; a jam's jamming phase; null or absent: a jam's 0.1 s, else until cleared),
        "channel": a sensor fault's, "params": {NAME: VALUE}}: plant.faults.KINDS) to the
        run and wait, in this thread, for the tick that takes it."""
        if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
            return {"ok": False, "error": 'expected {"fault": {"kind": KIND, "joint": K, '
                                          '"duration": S, "params": {...}}}'}
        from hilrig.plant.faults import KINDS

        if spec["kind"] not in KINDS:
            return {"ok": False, "error": f"fault: unknown kind {spec['kind']!r} (one of "
                                          f"{', '.join(KINDS)})"}
        joint, duration = spec.get("joint"), spec.get("duration")
        params, channel = spec.get("params", {}), spec.get("channel", "position")
        if duration is None:
            duration = 0.1 if spec["kind"] == "jam" else math.inf
        if type(joint) is not int:
            return {"ok": False, "error": "fault: joint must be an integer (1-based)"}
        if type(duration) not in (int, float) or math.isnan(duration):
            return {"ok": False, "error": "fault: duration must be a number of seconds"}
        if not isinstance(params, dict) or not all(
                isinstance(k, str) and type(v) in (int, float) for k, v in params.items()):
            return {"ok": False, "error": "fault: params must map names to numbers"}
        if not isinstance(channel, str):
            return {"ok": False, "error": "fault: channel must be a string"}
        run = self.run
        if run is not None and not hasattr(run, "request_fault"):
            return {"ok": False, "error": "this run's plant is behind a link (`hil control`): "
                                          "hil fault reaches its emulator, --connect ENDPOINT"}
        if run is None or run.finished.is_set():
            return {"ok": False, "error": "the run's loop is not running (starting or ended)"}
        try:
            run.request_fault(spec["kind"], joint, float(duration), params, channel)
            deadline = time.monotonic() + FAULT_ACK_TIMEOUT
            while time.monotonic() < deadline and not run.finished.is_set():
                ack = run.fault_acknowledged()
                if ack is not None:
                    return {"ok": True, "tick": ack[0], "t": ack[1]}
                time.sleep(FAULT_POLL)
            ack = run.fault_acknowledged()
        except ValueError as exc:
            return {"ok": False, "error": f"fault on joint {joint}: {exc}"}
        if ack is not None:
            return {"ok": True, "tick": ack[0], "t": ack[1]}
        return {"ok": False, "error": "the run ended before its loop took the fault"
                if run.finished.is_set() else
                f"the loop has not taken the fault within {FAULT_ACK_TIMEOUT} s (it stays "
                "posted: the run's log says whether it took it)"}


def send_request(endpoint: str, request: dict, timeout: float = 5.0) -> dict:
    """One request to the run at ``endpoint``; TuningError if it refuses or is silent."""
    if endpoint.startswith("ipc://") and not os.path.exists(endpoint[len("ipc://"):]):
        raise TuningError(f"no run takes live changes at {endpoint} (is `hil run` or "
                          "`hil control` running, with this --set-endpoint?)")
    socket = zmq.Context.instance().socket(zmq.REQ)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    try:
        endpoints.connect(socket, endpoint, "hil set")
        socket.send(json.dumps(request).encode())
        if not socket.poll(int(timeout * 1000)):
            raise TuningError(f"no answer from a run at {endpoint} within {timeout} s")
        try:
            reply = json.loads(socket.recv().decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise TuningError(f"bad answer from {endpoint}: not JSON") from None
    finally:
        socket.close(0)
    if not isinstance(reply, dict) or not reply.get("ok"):
        error = reply.get("error") if isinstance(reply, dict) else None
        raise TuningError(f"refused: {error or 'bad answer'}")
    return reply
