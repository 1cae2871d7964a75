"""Live view (Foxglove WebSocket) and live tuning (hil set, Foxglove parameters) of a
running ``hil run``, and the replay of its live changes (``hil sim --replay``).

The Foxglove client is written here from the protocol (``foxglove.websocket.v1``: JSON
text frames for control, binary frames [opcode 1, uint32 subscription id, uint64 log
time ns, payload] for messages), on the ``websockets`` package. The Foxglove SDK's
server names the same protocol ``foxglove.sdk.v1`` in the WebSocket handshake; the live
view's shim (live.ws_shim) accepts either name, so the client offers both (as current
Foxglove does) or, like older viewers, only ``foxglove.websocket.v1``. The
``@foxglove/ws-protocol`` npm client is run unchanged (test_the_npm_client_...).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import websockets
from hilrig.live.tuning import TuningError, send_request
from hilrig.live.foxglove import Encoder, parse_address, parse_rates, rate_step
from hilrig.live.ws_shim import HandshakeRefused, rewrite_answer, rewrite_request
from hilrig.settings.live_changes import changed_config, live_keys
from hilrig.settings.config import load
from hilrig.errors import ConfigError
from hilrig.rt.sim import simulate
from hilrig.settings.live_changes import raw_config
from hilrig.settings.config import resolve

from rt_helpers import ROOT, SHARED_CPU, hil, read_complete

# the replayable real-time run: the correction in the tick, no tick skipped
REPLAYABLE = ["--set", "loop.correction='inline'", "--set", "loop.overrun='catch_up'"]
SUBPROTOCOLS = ["foxglove.sdk.v1", "foxglove.websocket.v1"]   # the SDK's name, the original


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_run(tmp_path: Path, duration: float, *extra: str) -> tuple[subprocess.Popen, Path, str]:
    log = tmp_path / "run.mcap"
    endpoint = f"ipc:///tmp/hil-set-{uuid.uuid4().hex[:10]}"
    proc = subprocess.Popen(
        hil("run", "rrr3_pd", "--duration", str(duration), "--log", str(log), "--no-plot",
            "--set-endpoint", endpoint, *REPLAYABLE, *SHARED_CPU, *extra),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, log, endpoint


def finish(proc: subprocess.Popen, interrupt: bool = False, timeout: float = 120.0) -> str:
    """Wait for the run's end (Ctrl-C it first with ``interrupt``, once): a complete log."""
    if interrupt:
        ctrl_c(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == (130 if interrupt else 0), f"hil run failed:\n{out}\n{err}"
    return out


def ctrl_c(proc: subprocess.Popen) -> None:
    """One Ctrl-C (a second one would interrupt the run's orderly stop)."""
    if not getattr(proc, "interrupted", False) and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.interrupted = True


def hil_set(endpoint: str, *items: str) -> subprocess.CompletedProcess:
    return subprocess.run(hil("set", *items, "--connect", endpoint), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def wait_for_run(proc, endpoint: str, timeout: float = 120.0) -> None:
    """Until the run answers on its tuning endpoint (kernels loaded, loop started)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if Path(endpoint[len("ipc://"):]).exists() and hil_set(endpoint).returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError("the run never answered on its tuning endpoint")


# -- the Foxglove client ------------------------------------------------------------

class FoxgloveClient:
    """A minimal ``foxglove.websocket.v1`` client: channels, subscriptions, parameters."""

    def __init__(self, ws):
        self.ws = ws
        self.channels = {}          # topic -> advertised channel
        self.by_sub = {}            # subscription id -> topic
        self.messages = {}          # topic -> [(log_time, decoded JSON, or the bytes of a
                                    #            protobuf channel's message)]
        self.replies = {}           # request id -> parameterValues
        self.updates = []           # parameterValues without an id: published updates
        self.statuses = []
        self.server_info = None

    @classmethod
    async def connect(cls, port: int, timeout: float = 120.0, subprotocols=SUBPROTOCOLS,
                      **options) -> FoxgloveClient:
        deadline = time.monotonic() + timeout
        while True:
            try:
                ws = await websockets.connect(f"ws://127.0.0.1:{port}",
                                              subprotocols=subprotocols, **options)
                return cls(ws)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def pump(self, until=None, timeout: float = 30.0) -> None:
        """Read frames until ``until()`` holds (or the server closes, with until None)."""
        deadline = time.monotonic() + timeout
        while until is None or not until():
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for the server")
            try:
                frame = await asyncio.wait_for(self.ws.recv(), 1.0)
            except asyncio.TimeoutError:
                continue
            except websockets.ConnectionClosed:
                if until is None:
                    return
                raise
            self.handle(frame)

    def handle(self, frame) -> None:
        if isinstance(frame, bytes):
            assert frame[0] == 1, f"unexpected binary opcode {frame[0]}"
            sub, log_time = struct.unpack_from("<IQ", frame, 1)
            topic = self.by_sub[sub]
            data = frame[13:]
            if self.channels[topic]["encoding"] == "json":
                data = json.loads(data)
            self.messages.setdefault(topic, []).append((log_time, data))
            return
        message = json.loads(frame)
        op = message["op"]
        if op == "serverInfo":
            self.server_info = message
        elif op == "advertise":
            for channel in message["channels"]:
                self.channels[channel["topic"]] = channel
        elif op == "parameterValues":
            if message.get("id") is None:
                self.updates.append(message["parameters"])
            else:
                self.replies[message["id"]] = message["parameters"]
        elif op == "status":
            self.statuses.append(message)

    async def subscribe(self, *topics: str) -> None:
        subs = []
        for topic in topics:
            sub = len(self.by_sub) + 1
            self.by_sub[sub] = topic
            subs.append({"id": sub, "channelId": self.channels[topic]["id"]})
        await self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))

    async def request(self, message: dict) -> list:
        """Send a getParameters/setParameters with an id; the parameterValues answering it."""
        ident = uuid.uuid4().hex
        await self.ws.send(json.dumps({**message, "id": ident}))
        await self.pump(lambda: ident in self.replies)
        return self.replies[ident]


def values(parameters: list) -> dict:
    return {p["name"]: p.get("value") for p in parameters}


# -- tests --------------------------------------------------------------------------

def test_live_addresses_and_keys():
    assert parse_address("127.0.0.1:8765", False) == ("127.0.0.1", 8765)
    assert parse_address("[::1]:9000", False) == ("::1", 9000)
    with pytest.raises(ConfigError, match="not a loopback address.*--live-allow-remote"):
        parse_address("0.0.0.0:8765", False)
    assert parse_address("0.0.0.0:8765", True) == ("0.0.0.0", 8765)
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        parse_address("8765", False)
    cfg = load("rrr3_pd")
    assert "controller.kp" in live_keys(cfg) and "safety.max_command" in live_keys(cfg)
    assert "controller.type" not in live_keys(cfg)
    # the config's own rules, the config's own messages; nothing changes on a refusal
    with pytest.raises(ConfigError, match="controller.kp: expected 3 values"):
        changed_config(cfg, {"controller.kp": [1.0, 2.0]})
    with pytest.raises(ConfigError, match="controller.duration: must be > 0"):
        changed_config(cfg, {"controller.duration": -1.0})
    with pytest.raises(ConfigError, match="plant.l1: not a live parameter"):
        changed_config(cfg, {"plant.l1": 1.0})
    with pytest.raises(ConfigError, match="did you mean 'controller.kd'"):
        changed_config(cfg, {"controller.kdd": 1.0})
    assert cfg.controller.kp == (150.0, 150.0, 150.0)
    assert changed_config(cfg, {"controller.kp": 80}).controller.kp == (80.0, 80.0, 80.0)
    limited = changed_config(cfg, {"safety.max_command": 12.0})
    assert limited.safety.max_command == (12.0, 12.0, 12.0)
    assert changed_config(limited, {"safety.max_command": []}).safety.max_command is None


def test_live_rates_and_the_row_encoder():
    assert parse_rates(None) == {None: 100.0}
    assert parse_rates(["50", "/hil/timing=1000"]) == {None: 50.0, "/hil/timing": 1000.0}
    for bad, message in (("0", "expected a rate in Hz > 0"), ("fast", "expected a rate"),
                         ("inf", "expected a rate"), ("/hil/nope=5", "no channel '/hil/nope'")):
        with pytest.raises(ConfigError, match=message):
            parse_rates([bad])
    assert [rate_step(hz, 1e-3) for hz in (100, 1000, 5000, 300, 0.5)] == [10, 1, 1, 3, 2000]
    # the template's text is json's (same float text, so the same numbers), NaN -> null
    encode = Encoder([("q", 3), ("norm", None)])
    t, tick = np.array([0.1, 0.2]), np.array([100.0, 200.0])
    q = np.array([[1 / 3, -2e-17, 1e300], [0.5, np.nan, 2.0]])
    norm = np.array([np.pi, np.inf])
    first, second = encode(t, tick, [q, norm])
    assert first == json.dumps({"t": 0.1, "tick": 100, "q": q[0].tolist(), "norm": np.pi},
                               separators=(",", ":")).encode()
    assert json.loads(second) == {"t": 0.2, "tick": 200, "q": [0.5, None, 2.0], "norm": None}


def test_the_handshake_shim_takes_either_name_of_the_protocol():
    def request(*protocols):
        lines = ["GET / HTTP/1.1", "Host: 127.0.0.1:8765", "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
        lines += [f"Sec-WebSocket-Protocol: {p}" for p in protocols]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    both = request("foxglove.sdk.v1, foxglove.websocket.v1")
    assert rewrite_request(both) == (both, None)                 # the SDK's own: unchanged
    head, name = rewrite_request(request("foxglove.websocket.v1"))
    assert name == "foxglove.websocket.v1"
    assert head == request("foxglove.sdk.v1")
    answer = (b"HTTP/1.1 101 Switching Protocols\r\nsec-websocket-protocol: foxglove.sdk.v1\r\n"
              b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
    assert rewrite_answer(answer, name) == answer.replace(
        b"sec-websocket-protocol: foxglove.sdk.v1", b"Sec-WebSocket-Protocol: "
        b"foxglove.websocket.v1")
    with pytest.raises(HandshakeRefused, match=r"offered the subprotocols \['ros2'\]; this "
                       r"server speaks foxglove.websocket.v1 \(also named foxglove.sdk.v1\)"):
        rewrite_request(request("ros2"))
    with pytest.raises(HandshakeRefused, match="offered the subprotocols none"):
        rewrite_request(request())
    with pytest.raises(HandshakeRefused, match="not a WebSocket upgrade request"):
        rewrite_request(b"POST / HTTP/1.1\r\n\r\n")


def test_the_view_accepts_a_client_only_once_the_sdks_server_can_answer_it(monkeypatch):
    """A client that connects at the first instant the view's port answers gets the
    WebSocket upgrade: the port does not listen before the SDK's server is up (a client
    accepted in between was dropped unanswered, and the client saw a bare EOF); a view
    whose address is taken says so in one line and leaves no SDK server behind."""
    import foxglove
    from hilrig.live.foxglove import LiveView

    port = free_port()
    view = LiveView("127.0.0.1", port)
    view.context = foxglove.Context()
    servers, listening_before = [], []
    start_server = foxglove.start_server

    def start_and_probe(**options):
        with socket.socket() as probe:          # the view's port, before the SDK's is up
            listening_before.append(probe.connect_ex(("127.0.0.1", port)) == 0)
        servers.append(start_server(**options))
        return servers[-1]

    monkeypatch.setattr(foxglove, "start_server", start_and_probe)
    view._serve([], None, 10.0)
    try:
        assert listening_before == [False]

        async def handshake():
            async with websockets.connect(f"ws://127.0.0.1:{port}",
                                          subprotocols=SUBPROTOCOLS) as ws:
                return ws.subprotocol
        assert asyncio.run(handshake()) == "foxglove.sdk.v1"

        taken = LiveView("127.0.0.1", port)
        taken.context = foxglove.Context()
        with pytest.raises(ConfigError, match=rf"^--live 127.0.0.1:{port}: cannot serve: "
                                              r".*Address already in use"):
            taken._serve([], None, 10.0)
        with socket.socket() as probe:          # the second SDK server was stopped
            assert probe.connect_ex(("127.0.0.1", servers[1].port)) != 0
    finally:
        view.server.stop()
        view.shim.close()


@pytest.mark.system
def test_hil_set_change_is_logged_at_its_tick_and_replays_exactly(tmp_path):
    proc, log, endpoint = start_run(tmp_path, 60.0)      # Ctrl-C'd once changed
    try:
        wait_for_run(proc, endpoint)
        bad = hil_set(endpoint, "controller.kp=[1, 2]")
        assert bad.returncode == 1
        assert "refused: controller.kp: expected 3 values" in bad.stderr
        done = hil_set(endpoint, "controller.kp=60", "controller.target=[0.5, 0.7, 1.1]")
        assert done.returncode == 0, done.stderr
        tick = int(done.stdout.split("at tick ")[1].split()[0])
        time.sleep(0.5)
    finally:
        finish(proc, interrupt=True)
    arrays, events, meta, summary = read_complete(log)
    changes = [e for e in events if e["kind"] == "param"]
    assert len(changes) == 1 and changes[0]["tick"] == tick and changes[0]["source"] == "hil set"
    assert changes[0]["changes"] == {"controller.kp": [60.0] * 3,
                                     "controller.target": [0.5, 0.7, 1.1]}
    assert abs(changes[0]["t"] - tick * 1e-3) < 1e-12
    refused = [e for e in events if e["kind"] == "param_refused"]
    assert len(refused) == 1 and "expected 3 values" in refused[0]["reason"]
    n = len(arrays["t"])
    assert 0 < tick < n - 100
    out = tmp_path / "replay.npz"
    sim = subprocess.run(hil("sim", "--replay", str(log), "--duration", repr(n * 1e-3),
                             "--out", str(out)), cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert sim.returncode == 0, sim.stderr
    assert "1 live change(s)" in sim.stdout and "replay 100 %" in sim.stderr
    replay = np.load(out)
    for name in ("q", "qd", "u", "i", "residual"):
        np.testing.assert_array_equal(arrays[name], replay[name][:n], err_msg=name)
    # without the change the trajectory differs from the change's tick on, not before
    cfg = resolve(raw_config(meta))
    plain = simulate(cfg.replace(sim=dataclasses.replace(cfg.sim, duration=n * 1e-3))).arrays
    np.testing.assert_array_equal(arrays["u"][:tick], plain["u"][:tick])
    assert np.abs(arrays["u"][tick] - plain["u"][tick]).max() > 1e-3


@pytest.mark.system
def test_foxglove_client_sees_the_loop_and_sets_a_gain(tmp_path):
    """... and each parameter update reaches a subscribed client once (a set from Foxglove
    was published twice: by the SDK, from the set's answer, and again by the view)."""
    port = free_port()
    proc, log, endpoint = start_run(tmp_path, 60.0, "--live", f"127.0.0.1:{port}",
                                    "--live-rate", "/hil/joint_state=1000")
    token = None
    for line in proc.stderr:        # the run prints its token on its own terminal
        found = re.search(r"set hil\.token to ([0-9a-f]{8}) in its parameter panel", line)
        if found:
            token = found.group(1)
            break
    assert token, proc.communicate()

    async def session():
        client = await FoxgloveClient.connect(port)
        async with client.ws:
            await client.pump(lambda: "/hil/joint_state" in client.channels
                              and "/hil/event" in client.channels)
            assert client.ws.subprotocol == "foxglove.sdk.v1"
            assert "parameters" in client.server_info["capabilities"]
            schema = json.loads(client.channels["/hil/joint_state"]["schema"])
            assert schema["properties"]["q"]["type"] == "array"
            await client.subscribe("/hil/joint_state", "/hil/event", "/hil/tracking_error",
                                   "/hil/diagnostics", "/hil/timing")
            await client.ws.send(json.dumps({"op": "subscribeParameterUpdates",
                                             "parameterNames": ["controller.kp"]}))
            listed = values(await client.request({"op": "getParameters", "parameterNames": []}))
            assert listed["controller.kp"] == [150.0, 150.0, 150.0]
            assert listed["safety.max_command"] == [400.0] * 3   # the config's, above 48 V
            await client.pump(lambda: len(client.messages.get("/hil/joint_state", [])) > 300)
            assert listed["hil.token"] == ""                    # never shown
            # a client without the run's token (any local user can connect) changes nothing
            untrusted = values(await client.request({"op": "setParameters", "parameters": [
                {"name": "controller.kp", "value": [1.0, 1.0, 1.0], "type": "float64_array"}]}))
            assert untrusted["controller.kp"] == [150.0, 150.0, 150.0]
            assert any("set hil.token to the token the run printed first" in s["message"]
                       for s in client.statuses)
            wrong = values(await client.request({"op": "setParameters", "parameters": [
                {"name": "hil.token", "value": "0" * 8},
                {"name": "controller.kp", "value": [1.0, 1.0, 1.0], "type": "float64_array"}]}))
            assert wrong["controller.kp"] == [150.0, 150.0, 150.0]
            await client.request({"op": "setParameters", "parameters": [
                {"name": "hil.token", "value": token}]})
            refused = values(await client.request({"op": "setParameters", "parameters": [
                {"name": "controller.kd", "value": [1.0, 2.0]}]}))
            assert refused["controller.kd"] == [50.0, 50.0, 50.0]       # unchanged
            assert any("controller.kd: expected 3 values" in s["message"]
                       for s in client.statuses)
            # checked by the config's rules, with the rule's message (a negative gain is
            # refused the same way once settings/schema has kp >= 0)
            refused = values(await client.request({"op": "setParameters", "parameters": [
                {"name": "controller.duration", "value": -1.0}]}))
            assert refused["controller.duration"] == 1.0
            assert any(s["message"] == "refused: controller.duration: must be > 0, got -1.0"
                       for s in client.statuses), client.statuses
            after = values(await client.request({"op": "setParameters", "parameters": [
                {"name": "controller.kp", "value": [80.0, 80.0, 80.0], "type": "float64_array"}]}))
            assert after["controller.kp"] == [80.0, 80.0, 80.0]
            await client.pump(lambda: any(m["kind"] == "param"
                                          for _, m in client.messages.get("/hil/event", [])))
            done = await asyncio.to_thread(hil_set, endpoint, "controller.kp=70")
            assert done.returncode == 0, done.stderr
            await client.pump(lambda: sum(m["kind"] == "param" for _, m in
                                          client.messages["/hil/event"]) == 2)
            seen = len(client.messages["/hil/joint_state"])
            await client.pump(lambda: len(client.messages["/hil/joint_state"]) > seen + 500)
            ctrl_c(proc)                                   # the run stops, logged
            await client.pump(None, timeout=120.0)        # to the end of the run
        return client

    try:
        client = asyncio.run(session())
    finally:
        finish(proc, interrupt=True)
    arrays, events, _, summary = read_complete(log)
    # the acknowledged change is the log's, at the same tick
    acked = [m for _, m in client.messages["/hil/event"] if m["kind"] == "param"]
    logged = [e for e in events if e["kind"] == "param"]
    assert len(acked) == len(logged) == 2
    assert acked[0]["tick"] == logged[0]["tick"] and logged[0]["source"] == "foxglove"
    assert logged[0]["changes"] == {"controller.kp": [80.0, 80.0, 80.0]}
    assert logged[1]["source"] == "hil set"
    # each change reached the subscribed client once (the refused sets: none changed it)
    kp = [values(update)["controller.kp"] for update in client.updates
          if "controller.kp" in values(update)]
    assert [v for v in kp if v != [150.0] * 3] == [[80.0] * 3, [70.0] * 3], client.updates
    assert [e for e in events if e["kind"] == "param_refused"]
    assert any(m["kind"] == "stop" for _, m in client.messages["/hil/event"])
    # joint states at the loop's rate: one message per tick, equal to the log's rows
    states = client.messages["/hil/joint_state"]
    ticks = np.array([m["tick"] for _, m in states])
    np.testing.assert_array_equal(ticks, np.arange(ticks[0], ticks[0] + len(ticks)))
    assert ticks[-1] == len(arrays["t"]) - 1
    # stamped with the run's wall clock: one origin (plant time 0) for every message
    origin = {log_time - round(m["t"] * 1e9) for log_time, m in states}
    assert len(origin) == 1 and abs(origin.pop() * 1e-9 - time.time()) < 600
    for log_time, m in states:
        k = m["tick"]
        assert m["t"] == arrays["t"][k]
        assert m["q"] == arrays["q"][k].tolist() and m["qd"] == arrays["qd"][k].tolist()
    # the other channels: tracking error r - q of the hold reference, the 3RRR residual
    for _, m in client.messages["/hil/tracking_error"][:50]:
        k = m["tick"]
        expected = np.array([0.4, 0.8, 1.0]) - arrays["q"][k, :3]
        np.testing.assert_allclose(m["e"], expected, rtol=0, atol=1e-15)
    for _, m in client.messages["/hil/diagnostics"][:50]:
        assert m["residual"] == pytest.approx(arrays["residual"][m["tick"]], rel=1e-12, abs=1e-18)
    timing = client.messages["/hil/timing"]         # at the default 100 Hz: every 10th tick
    assert len(timing) > 50 and all(m["tick"] % 10 == 0 for _, m in timing)
    for _, m in timing:
        k = m["tick"]
        assert m["lateness"] == arrays["lateness"][k]
        assert m["compute_tick"] == arrays["compute_tick"][k]


@pytest.mark.system
def test_every_channel_subscribed_gets_every_message_of_its_rate(tmp_path):
    """10 s of `hil run rrr3_pd --live` with every channel subscribed, by a client that
    offers only the protocol's original name (as older viewers do): each channel gets
    every row of its rate (the default 100 Hz; joint states at the full 1 kHz), none
    lost, from its first message to the run's end. (Its latency: bench/bench_live.py.)"""
    port = free_port()
    proc, log, _ = start_run(tmp_path, 10.0, "--live", f"127.0.0.1:{port}",
                             "--live-rate", "/hil/joint_state=1000")

    async def watch():
        client = await FoxgloveClient.connect(port, subprotocols=["foxglove.websocket.v1"])
        async with client.ws:
            assert client.ws.subprotocol == "foxglove.websocket.v1"
            await client.pump(lambda: len(client.channels) >= 9)
            await client.subscribe(*client.channels)
            await client.pump(None, timeout=300.0)      # to the end of the run
        return client

    try:
        client = asyncio.run(watch())
    finally:
        finish(proc)
    arrays, _, _, _ = read_complete(log)
    ticks = arrays["tick"].astype(int)
    assert len(ticks) == 10001
    steps = {"/hil/joint_state": 1, "/hil/command": 10, "/hil/reference": 10,
             "/hil/tracking_error": 10, "/hil/timing": 10, "/hil/diagnostics": 10}
    assert len(client.messages["/hil/frames"]) > 500      # (their rate: test_live_3d.py)
    origins = set()
    for topic, step in steps.items():
        got = [m["tick"] for _, m in client.messages[topic]]
        expected = [k for k in ticks if k % step == 0 and k >= got[0]]
        assert got == expected, (topic, len(got), len(expected))
        assert got[0] < 5000                      # subscribed long before the end
        origins |= {log_time - round(m["t"] * 1e9) for log_time, m in client.messages[topic]}
    assert len(origins) == 1                      # one wall-clock origin for every channel


NODE_CLIENT = r"""
// The @foxglove/ws-protocol client as its README and examples use it, on the `ws` package.
const { FoxgloveClient } = require("@foxglove/ws-protocol");
const { WebSocket } = require("ws");
const client = new FoxgloveClient({
  ws: new WebSocket(process.argv[2], [FoxgloveClient.SUPPORTED_SUBPROTOCOL]),
});
const topics = new Map(), encodings = new Map(), counts = {}, first = {};
const decoder = new TextDecoder();
client.on("advertise", (channels) => {
  for (const channel of channels) {
    const sub = client.subscribe(channel.id);
    topics.set(sub, channel.topic);
    encodings.set(sub, channel.encoding);
  }
});
client.on("message", ({ subscriptionId, timestamp, data }) => {
  const topic = topics.get(subscriptionId);
  counts[topic] = (counts[topic] || 0) + 1;
  if (!(topic in first) && encodings.get(subscriptionId) === "json") {
    first[topic] = { timestamp: timestamp.toString(), message: JSON.parse(decoder.decode(data)) };
  }
  const signals = [...topics.values()].filter((t) => t !== "/hil/event" && t !== "/hil/scene");
  if (signals.length >= 7 && signals.every((t) => (counts[t] || 0) >= 50)) {
    console.log(JSON.stringify({ topics: [...topics.values()], counts, first }));
    client.close();
    process.exit(0);
  }
});
client.on("error", (error) => { console.error(String(error)); process.exit(1); });
"""


@pytest.fixture(scope="session")
def ws_protocol_client():
    """A folder with the @foxglove/ws-protocol npm package and `ws` (a cached one,
    installed by npm once); skipped, with the reason, where node or npm is absent."""
    import os

    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the @foxglove/ws-protocol client")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "hilrig" / "npm-foxglove"
    if not (folder / "node_modules" / "@foxglove" / "ws-protocol").is_dir() or \
            not (folder / "node_modules" / "ws").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix",
                               str(folder), "@foxglove/ws-protocol@0.8", "ws@8"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    (folder / "client.js").write_text(NODE_CLIENT)
    return node, folder / "client.js"


@pytest.mark.system
def test_the_npm_client_connects_lists_the_channels_and_receives(tmp_path,
                                                                 ws_protocol_client):
    """The @foxglove/ws-protocol client offers only foxglove.websocket.v1 (the SDK alone
    answered it HTTP 400); a client that offers no name of the protocol is refused, and
    the run says why."""
    node, script = ws_protocol_client
    port = free_port()
    proc, log, _ = start_run(tmp_path, 120.0, "--live", f"127.0.0.1:{port}")
    try:
        for line in proc.stderr:                 # the view is up
            if "live view: foxglove ws://" in line:
                break
        got = subprocess.run([node, str(script), f"ws://127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=120)
        assert got.returncode == 0, got.stderr
        seen = json.loads(got.stdout)
        async def stranger():
            await websockets.connect(f"ws://127.0.0.1:{port}", subprotocols=["ros2"])

        with pytest.raises(websockets.InvalidStatus) as refused:
            asyncio.run(stranger())
        assert refused.value.response.status_code == 400
    finally:
        ctrl_c(proc)
        _, err = proc.communicate(timeout=120)
    assert set(seen["topics"]) == {"/hil/joint_state", "/hil/command", "/hil/reference",
                                   "/hil/tracking_error", "/hil/timing", "/hil/diagnostics",
                                   "/hil/event", "/hil/frames", "/hil/scene"}
    state = seen["first"]["/hil/joint_state"]["message"]
    assert len(state["q"]) == 6 and state["tick"] % 10 == 0      # the default 100 Hz
    assert re.search(r"live view: refused a client from 127\.0\.0\.1:\d+: it offered the "
                     r"subprotocols \['ros2'\]; this server speaks foxglove\.websocket\.v1",
                     err), err
    arrays, _, _, _ = read_complete(log)
    k = state["tick"]
    assert state["q"] == arrays["q"][k].tolist()


@pytest.mark.system
def test_a_stalled_client_changes_neither_the_log_nor_the_timing(tmp_path):
    """A client that subscribes to everything and never reads: the run's log is complete
    (no row lost) and its trajectory is the offline run's; the loop never waits on it."""
    def run(tmp, live: bool):
        port = free_port()
        proc, log, _ = start_run(tmp, 3.0, *(["--live", f"127.0.0.1:{port}"] if live else []))

        async def stall():
            client = await FoxgloveClient.connect(port, max_queue=1, max_size=2 ** 16)
            await client.pump(lambda: len(client.channels) >= 9)
            await client.subscribe(*client.channels)
            while proc.poll() is None:          # never read again
                await asyncio.sleep(0.1)
            await client.ws.close()

        try:
            if live:
                asyncio.run(stall())
        finally:
            finish(proc)
        return read_complete(log)

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    arrays, events, meta, summary = run(tmp_path / "b", live=True)
    _, _, _, baseline = run(tmp_path / "a", live=False)
    assert summary["telemetry"]["rows"] == len(arrays["t"]) == 3001
    assert summary["telemetry"]["lost_rows"] == 0
    plain = simulate(resolve(raw_config(meta))).arrays
    for name in ("q", "qd", "u"):
        np.testing.assert_array_equal(arrays[name], plain[name], err_msg=name)
    # The timing itself is measured, not asserted (bench/bench_live.py: compute and
    # lateness medians and tails, overruns, with and without a stalled client): a test
    # machine's neighbours move overruns by hundreds. A loop that waited on the stalled
    # client would overrun nearly every tick of its 3001; that is what this catches.
    assert summary["overruns"] < 1000 + baseline["overruns"], (summary["overruns"],
                                                               baseline["overruns"])


def test_the_shipped_layout_plots_what_the_live_view_publishes():
    from hilrig.live.foxglove import CHANNELS, EVENT_TOPIC
    from hilrig.plant.frames import WORLD
    from hilrig.telemetry.scene import SCENE_TOPIC

    layout = json.loads((ROOT / "docs" / "foxglove" / "hilrig-layout.json").read_text())
    paths, panels, configs = [], [], {}

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "panel":
                panels.append(node["panelType"])
                configs[node["panelType"]] = node.get("config", {})
                paths.extend(p["value"] for p in node.get("config", {}).get("paths", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(layout)
    assert "Parameters" in panels and "RawMessages" in panels and "ThreeDee" in panels
    robot = configs["ThreeDee"]     # the robot: the scene in the frames' root
    assert robot["fixedFrame"] == WORLD and robot["topics"][SCENE_TOPIC]["visible"]
    assert {"/hil/joint_state.q[0]", "/hil/tracking_error.norm", "/hil/timing.lateness",
            "/hil/diagnostics.residual", "/hil/diagnostics.det_phi_x"} <= set(paths)
    for path in paths:
        topic, field = path.split(".", 1)
        schema = CHANNELS[topic][0]
        assert field.split("[")[0] in schema["properties"], path
    assert EVENT_TOPIC == "/hil/event"


@pytest.mark.system
def test_watch_keeps_one_status_block_current(tmp_path):
    """On a terminal (a pty) the block is redrawn in place; its last state is the run's
    end: the plant time of the last row and the tracking error |target - q| there."""
    import os
    import pty
    import re

    log = tmp_path / "run.mcap"
    master, slave = pty.openpty()
    proc = subprocess.Popen(hil("run", "rrr3_pd", "--duration", "1.5", "--watch", "--no-plot",
                                "--log", str(log), "--set-endpoint", ""),
                            cwd=ROOT, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(60) == 0, proc.stderr.read()
    text = out.decode()
    assert "\x1b[5F" in text                     # moved up over the 5 lines: redrawn in place
    last = text.rsplit("\x1b[5F", 1)[1]
    arrays, _, _, _ = read_complete(log)
    t = float(re.search(r"t\s+([0-9.]+) s", last).group(1))
    error = float(re.search(r"tracking error ([0-9.e+-]+) rad", last).group(1))
    assert t == pytest.approx(arrays["t"][-1], abs=1e-3)
    expected = np.linalg.norm(np.array([0.4, 0.8, 1.0]) - arrays["q"][-1, :3])
    assert error == pytest.approx(expected, rel=1e-3)
    assert "last event     stop at t = 1.500 s done" in last


@pytest.mark.system
def test_hil_set_finds_the_run_by_its_id_and_a_runs_endpoint_cannot_be_taken(
        tmp_path, monkeypatch):
    """Every run used to bind the one default `hil set` endpoint: a second run took it
    over silently and `hil set` then tuned the wrong run. Now each run has its own
    (printed with its run id), `hil set` finds your only run or the one --run names,
    and a run asked to bind another's live endpoint is refused."""
    runtime = Path(tempfile.mkdtemp(prefix="hset-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    procs = [subprocess.Popen(hil("run", "rrr3_pd", "--duration", "600", "--log",
                                  str(tmp_path / f"run{i}.mcap"), "--no-plot", *SHARED_CPU),
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    try:
        ids = []
        for proc in procs:
            line = proc.stdout.readline()
            match = re.match(r"run ([0-9a-f]{6}): `hil set --run \1 KEY=VALUE` tunes it "
                             r"\((ipc://\S+)\)", line)
            assert match, line + (proc.stderr.read() if proc.poll() is not None else "")
            assert match.group(2) == f"ipc://{runtime}/hilrig/set-{match.group(1)}"
            ids.append(match.group(1))
        deadline = time.monotonic() + 120          # until both loops take changes
        while True:
            ack = subprocess.run(hil("set", "--run", ids[1], "controller.kp=90"), cwd=ROOT,
                                 capture_output=True, text=True, timeout=60)
            if ack.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert ack.returncode == 0, ack.stderr
        assert re.fullmatch(r"controller\.kp = \[90\.0, 90\.0, 90\.0\]: taken at tick \d+ "
                            r"\(plant time [\d.]+ s\)\n", ack.stdout)
        both = subprocess.run(hil("set", "controller.kp=80"), cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert both.returncode == 2
        assert both.stderr.splitlines()[-1] == ("hil: config error: several runs take live "
                                                f"changes: name one with --run {ids[0]} or "
                                                f"{ids[1]}") or \
            both.stderr.splitlines()[-1] == ("hil: config error: several runs take live "
                                             f"changes: name one with --run {ids[1]} or "
                                             f"{ids[0]}")
        taken = f"ipc://{runtime}/hilrig/set-{ids[0]}"
        third = subprocess.run(hil("run", "rrr3_pd", "--duration", "1", "--no-plot", "--log",
                                   str(tmp_path / "third.mcap"), "--set-endpoint", taken),
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert third.returncode == 2
        assert third.stderr.splitlines()[-1] == (f"hil: config error: hil set endpoint {taken} "
                                                 "is in use by a running process (another "
                                                 "hil? stop it or choose another endpoint)")
        for proc in procs:
            finish(proc, interrupt=True)
        param = [e for e in read_complete(tmp_path / "run1.mcap")[1] if e["kind"] == "param"]
        assert len(param) == 1 and param[0]["source"] == "hil set"
        assert not [e for e in read_complete(tmp_path / "run0.mcap")[1] if e["kind"] == "param"]
        alone = subprocess.run(hil("set", "controller.kp=80"), cwd=ROOT, capture_output=True,
                               text=True, timeout=60)
        assert alone.stderr.splitlines()[-1] == (
            "hil: config error: no running `hil run` or `hil control` of yours takes live "
            "changes (hil set --connect ENDPOINT for one started elsewhere)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.mark.system
def test_hil_set_refuses_a_negative_gain_and_the_run_goes_on(tmp_path):
    """A negative controller.kp or kd was taken live; refused with its one line now, and
    a valid change after it is taken."""
    proc, log, endpoint = start_run(tmp_path, 60.0)
    try:
        wait_for_run(proc, endpoint)
        for change, key in (("controller.kp=-500", "controller.kp[0]"),
                            ("controller.kd=[0, -1, 0]", "controller.kd[1]")):
            bad = hil_set(endpoint, change)
            assert bad.returncode == 1
            assert f"refused: {key}: must be >= 0.0, got -" in bad.stderr, bad.stderr
        assert hil_set(endpoint, "controller.kp=70").returncode == 0
    finally:
        finish(proc, interrupt=True)
    _, events, _, _ = read_complete(log)
    assert [e["changes"] for e in events if e["kind"] == "param"] == [
        {"controller.kp": [70.0] * 3}]


@pytest.mark.system
def test_bad_hil_set_requests_are_refused_and_the_tuning_thread_lives_on(tmp_path):
    """A 400-digit number, a 60,000-digit number and a 40 kB nested array each killed the
    tuning thread for the rest of the run; each is refused with its reason now, a flood of
    refusals is a few events in the log, and a valid change is still taken."""
    proc, log, endpoint = start_run(tmp_path, 60.0)
    try:
        wait_for_run(proc, endpoint)
        for value, reason in (("1" * 400, "controller.kp[0]: must be finite, got an "
                                          "integer of 400 digits"),
                              ("1" * 60000, "not readable (Exceeds the limit"),
                              ("[" * 20000 + "]" * 20000, "not readable (maximum recursion")):
            with pytest.raises(TuningError, match=re.escape(reason)):
                send_request(endpoint, {"set": [f"controller.kp={value}"]})
        for _ in range(50):                       # a flood of refused changes
            with pytest.raises(TuningError):
                send_request(endpoint, {"set": ["controller.kp=-1"]})
        assert hil_set(endpoint, "controller.kp=70").returncode == 0
    finally:
        finish(proc, interrupt=True)
    _, events, _, _ = read_complete(log)
    refused = [e for e in events if e["kind"] == "param_refused"]
    assert 1 <= len(refused) < 10 and refused[0]["suppressed"] == 0
    assert [e["changes"] for e in events if e["kind"] == "param"] == [
        {"controller.kp": [70.0] * 3}]
