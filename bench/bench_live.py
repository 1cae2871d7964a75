"""Live view benchmarks (issues 15, 25). Prints medians and tails.

    python bench/bench_live.py [--duration 10] [--repeats 3] [--setups off,1kHz]

The in-process 1 kHz loop (3RRR, PD: ``hil run rrr3_pd``) in five setups, interleaved
``--repeats`` times so that each sees the same host:

- off: no live view (the tuning mailbox is polled every tick all the same);
- live: the Foxglove server running, no client;
- 100Hz: one client subscribed to every channel at the default --live-rate (100 Hz);
- 1kHz: one client subscribed to every channel, every channel at the full 1 kHz;

(every channel: the six signal channels and the robot's 3D ones, ``/hil/frames`` at the
channels' rate and ``/hil/scene``, issue 25; ``/hil/event`` aside)

- 100Hz-no3d, 1kHz-no3d: the same without the 3D channels (the client subscribes to the
  six signal channels only: the view before the 3D channels, for an A/B on one host).
- stalled: one client subscribed to every channel (1 kHz) that never reads (its TCP
  window fills, the SDK drops its oldest messages).

Per setup: whole-tick compute time (compute_tick) and lateness, median and p99 (µs),
overruns, rows lost by the telemetry writer; the spread of each figure over the repeats
of one setup is the run-to-run noise to compare the setups against. For the reading
clients: per message of every channel, the latency from its row's publication by the
loop (seen by a thread polling the ring's head every 0.5 ms) to its arrival at the
client (CLOCK_MONOTONIC in both processes), median, p99 and max; and the messages
received against those the rates give for the ticks from the client's first message to
the run's end (missing: published rows that never arrived). The loop starts once the
client subscribed (hook ``Subscribed``). The clients are separate
processes, as Foxglove would be, offering only ``foxglove.websocket.v1``: on a plain socket
(``raw_client``), or through the ``websockets`` library with ``--ws-client``.
A reading client keeps Python's cyclic garbage collector off while it records: the
arrivals it keeps (some 70 000 tuples in 10 s) made it stop for a full collection of
0.3-0.45 s once every few seconds, a pause of the instrument that set the p99 of the
figures measured before (docs/LIVE.md).

Before the runs: the cost of the encoding, per message (µs) and its size (bytes), of a
block of 1000 rows of every channel: ``json.dumps`` per message (the view before issue
25) against live.foxglove.Encoder (one template per channel, the view's); and of the 3RRR's
``/hil/frames``: the SDK's message classes against telemetry.scene.TransformsEncoder.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from hilrig.settings.config import load  # noqa: E402
from hilrig.live.foxglove import FIELD, LiveView, parse_rates  # noqa: E402
from hilrig.live.params import LiveParameters  # noqa: E402
from hilrig.rt.session import Session  # noqa: E402

SETUPS = ("off", "live", "100Hz", "1kHz", "stalled", "100Hz-no3d", "1kHz-no3d")
RATES = {"100Hz": [], "1kHz": ["1000"], "stalled": ["1000"],    # --live-rate of each
         "100Hz-no3d": [], "1kHz-no3d": ["1000"]}
ROBOT = ("/hil/frames", "/hil/scene")


def _plan(advertised: list, robot: bool) -> tuple:
    """What a client subscribes to, of the ``advertised`` channels (the server's advertise
    ops' channels): (topics, the subscribe op, ids of the JSON subscriptions)."""
    channels = {c["topic"]: c["id"] for c in advertised}
    encodings = {c["id"]: c["encoding"] for c in advertised}
    topics = [t for t in channels if t != "/hil/event" and (robot or t not in ROBOT)]
    subs = [{"id": i, "channelId": channels[t]} for i, t in enumerate(topics)]
    json_subs = {i for i, t in enumerate(topics) if encodings[channels[t]] == "json"}
    return topics, json.dumps({"op": "subscribe", "subscriptions": subs}), json_subs


def _arrival(data: bytes, now: int, json_subs: set) -> tuple:
    """(subscription, tick (JSON channels; None for protobuf ones), log time ns, ``now``)
    of a Message Data op."""
    sub = int.from_bytes(data[1:5], "little")
    tick = json.loads(data[13:])["tick"] if sub in json_subs else None
    return sub, tick, int.from_bytes(data[5:13], "little"), now


PARENT = os.getppid()             # (in a client: the bench that started it)


def _orphaned() -> None:
    """End a client whose bench ended (it would wait for its run for minutes)."""
    if os.getppid() != PARENT:
        raise SystemExit("client: the bench ended")


def client_main(port: int, stalled: bool, robot: bool, out: str) -> None:
    """The Python client (``--ws-client``: through the ``websockets`` library; else
    ``raw_client``): subscribe to every channel (without ``robot``: but the 3D ones),
    then read, noting each message's subscription, tick, log time and arrival time
    (``_arrival``), or never read again."""
    import gc

    import websockets

    async def run():
        options = {"max_queue": 1, "max_size": 2 ** 16} if stalled else {}
        for _ in range(6000):         # (the run may compile its kernels first: minutes)
            _orphaned()
            try:
                ws = await websockets.connect(f"ws://127.0.0.1:{port}",
                                              subprotocols=["foxglove.websocket.v1"], **options)
                break
            except OSError:
                await asyncio.sleep(0.1)
        advertised = []
        while len(advertised) < 9:
            message = json.loads(await ws.recv())
            if message["op"] == "advertise":
                advertised += message["channels"]
        topics, subscribe, json_subs = _plan(advertised, robot)
        await ws.send(subscribe)
        arrivals = []               # (subscription, tick, log time ns, CLOCK_MONOTONIC ns)
        gc.disable()                # (no pause of the instrument: module docstring)
        try:
            while True:
                if stalled:
                    await asyncio.sleep(1.0)
                    continue
                frame = await ws.recv()
                if isinstance(frame, bytes):
                    arrivals.append(_arrival(frame, time.monotonic_ns(), json_subs))
        except websockets.ConnectionClosed:
            pass
        gc.enable()
        Path(out).write_text(json.dumps({"topics": topics, "arrivals": arrivals}))

    asyncio.run(run())


def raw_client(port: int, stalled: bool, robot: bool, out: str) -> None:
    """client_main's client on a plain socket: the WebSocket handshake and frames (RFC
    6455: the server's frames unmasked, the client's masked) written here, a message's
    arrival being the time the read that completed it returned: when its bytes reached
    the client, not when a library's event loop got round to it (``websockets`` takes
    some 50 us of Python a message, 0.3-0.4 of a CPU at 7000 messages a second)."""
    import base64
    import gc
    import socket
    import struct

    for _ in range(6000):             # (the run may compile its kernels first: minutes)
        _orphaned()
        try:
            sock = socket.create_connection(("127.0.0.1", port))
            break
        except OSError:
            time.sleep(0.1)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                 "Sec-WebSocket-Version: 13\r\n"
                 "Sec-WebSocket-Protocol: foxglove.websocket.v1\r\n\r\n".encode())
    buffer = bytearray()
    while b"\r\n\r\n" not in buffer:
        buffer += sock.recv(4096)
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    if b" 101 " not in head.split(b"\r\n")[0]:
        raise SystemExit(f"raw client: refused: {head[:200]!r}")
    buffer = bytearray(rest)

    def send(opcode: int, data: bytes) -> None:
        mask = os.urandom(4)
        size = (struct.pack("B", 0x80 | len(data)) if len(data) < 126 else
                struct.pack(">BH", 0x80 | 126, len(data)))
        masked = (np.frombuffer(data, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8),
                                                            len(data))).tobytes()
        sock.sendall(bytes([0x80 | opcode]) + size + mask + masked)

    def frames() -> list:
        """The complete frames at the start of ``buffer`` (taken out): (opcode, payload)."""
        out, at, end = [], 0, len(buffer)
        while end - at >= 2:
            size, start = buffer[at + 1] & 0x7F, at + 2
            if size >= 126:
                width = 2 if size == 126 else 8
                if end - start < width:
                    break
                size = int.from_bytes(buffer[start:start + width], "big")
                start += width
            if end - start < size:
                break
            out.append((buffer[at] & 0x0F, bytes(buffer[start:start + size])))
            at = start + size
        del buffer[:at]
        return out

    advertised = []
    while len(advertised) < 9:
        buffer += sock.recv(65536)
        advertised += [c for op, data in frames() if op == 1
                       for m in [json.loads(data)] if m["op"] == "advertise"
                       for c in m["channels"]]
    topics, subscribe, json_subs = _plan(advertised, robot)
    send(1, subscribe.encode())
    while stalled:                    # (killed by the bench)
        time.sleep(1.0)
    arrivals = []                     # (subscription, tick, log time ns, CLOCK_MONOTONIC ns)
    gc.disable()                      # (no pause of the instrument: module docstring)
    closed = False
    while not closed:
        chunk = sock.recv(1 << 18)
        now = time.monotonic_ns()
        if not chunk:
            break
        buffer += chunk
        for opcode, data in frames():
            if opcode == 2 and data[:1] == b"\x01":      # binary: Message Data
                arrivals.append(_arrival(data, now, json_subs))
            elif opcode == 9:                            # ping
                send(10, data)
            closed |= opcode == 8                        # close
    gc.enable()
    sock.close()
    Path(out).write_text(json.dumps({"topics": topics, "arrivals": arrivals}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Subscribed:
    """A hook after the view's: the loop starts once a client subscribed to every signal
    channel (at most 120 s), so that the figures cover the whole run."""

    def __init__(self, view: LiveView, robot: bool):
        self.view = view
        self.robot = robot          # the client subscribes to the 3D channels too

    def start(self, session) -> None:
        deadline = time.monotonic() + 120.0
        channels = [c for c, _, _ in self.view.channels.values()] + \
            (list(self.view.scene_channels.values()) if self.robot else [])
        while time.monotonic() < deadline and not all(c.has_sinks() for c in channels):
            time.sleep(0.01)

    def stop(self) -> None:
        pass


class HeadWatch:
    """When each row was published: the ring's head polled every 0.5 ms (CLOCK_MONOTONIC),
    as {tick: ns} (a row is stamped when the poll first sees it: at most a poll late, so
    the latency is short by up to 0.5 ms; a faster poll would take the GIL from the
    publisher)."""

    def __init__(self):
        self.published = {}
        self._done = threading.Event()

    def start(self, session) -> None:
        tel = session.telemetry
        col = tel.columns["tick"]

        def watch():
            last = int(tel.head[0])
            while not self._done.is_set():
                h = int(tel.head[0])
                if h > last:
                    now = time.monotonic_ns()
                    for i in range(last, h):
                        self.published[int(tel.ring[i % tel.capacity, col])] = now
                    last = h
                time.sleep(5e-4)
        self.thread = threading.Thread(target=watch, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self._done.set()
        self.thread.join()


def one_run(setup: str, duration: float, scratch: Path, ws_client: bool = False) -> dict:
    cfg = load("rrr3_pd", [f"sim.duration={duration}"])
    port = free_port()
    hooks, client, watch = [], None, None
    rates = parse_rates(RATES.get(setup))
    if setup != "off":
        live = LiveParameters()
        hooks = [live, LiveView("127.0.0.1", port, live, rates)]
        if setup in RATES:
            hooks.append(Subscribed(hooks[1], not setup.endswith("-no3d")))
    if setup in RATES:
        arrivals = scratch / f"arrivals-{setup}.json"
        client = subprocess.Popen([sys.executable, __file__, "--client", str(port),
                                   "--stalled" if setup == "stalled" else "--reading",
                                   *(["--no3d"] if setup.endswith("-no3d") else []),
                                   *(["--ws-client"] if ws_client else []),
                                   "--out", str(arrivals)])
    if setup in RATES and setup != "stalled":
        watch = HeadWatch()
        hooks.append(watch)
    session = Session(cfg, scratch / f"{setup}.mcap", hooks=hooks)
    result = session.run()
    out = {"summary": result.summary}
    from hilrig.telemetry.logfile import read_log
    arrays, _, _, summary = read_log(result.log)
    out["compute"] = arrays["compute_tick"][np.isfinite(arrays["compute_tick"])]
    out["lateness"] = arrays["lateness"][np.isfinite(arrays["lateness"])]
    out["lost"] = summary["telemetry"]["lost_rows"]
    if client is not None:
        if setup == "stalled":
            client.kill()          # it never reads, so it never sees the server close
        client.wait(60)
    if watch is not None:
        got = json.loads(arrivals.read_text())
        ticks = arrays["tick"].astype(int)
        # the frames carry no tick: theirs from the log time (the run's wall-clock origin,
        # that of every JSON message, plus tick * dt)
        t_of = dict(zip(ticks.tolist(), arrays["t"].tolist()))
        origin = next(stamp - round(t_of[k] * 1e9) for _, k, stamp, _ in got["arrivals"]
                      if k is not None)      # (every client reads some JSON channel)
        latency, received, expected = [], 0, 0
        for sub, topic in enumerate(got["topics"]):
            if topic == "/hil/scene":       # (once a second and on a colour change)
                continue
            step = max(1, int(round(1.0 / (rates.get(topic, rates[None]) * cfg.sim.dt))))
            mine = [(k if k is not None else int(round((stamp - origin) * 1e-9 / cfg.sim.dt)),
                     t) for s, k, stamp, t in got["arrivals"] if s == sub]
            if not mine:
                continue
            mine_latency = [t - watch.published[k] for k, t in mine if k in watch.published]
            latency += mine_latency
            if topic == "/hil/frames":
                out["frames"] = np.array(mine_latency) * 1e-9
            received += len(mine)
            due = ticks[(ticks >= mine[0][0]) & (ticks % step == 0)]
            expected += len(due)
            missing = sorted(set(due.tolist()) - {k for k, _ in mine})
            if missing:
                print(f"  {setup}: {topic} missed {len(missing)} messages, ticks "
                      f"{missing[:5]}{' ...' if len(missing) > 5 else ''} (last tick "
                      f"{int(ticks[-1])})")
        out["latency"] = np.array(latency) * 1e-9
        out["received"], out["expected"] = received, expected
    return out


def encoding_cost() -> None:
    """µs per message and bytes per message of a block of 1000 rows, json vs Encoder."""
    from hilrig.live.foxglove import CHANNELS, Encoder

    rng = np.random.default_rng(0)
    n = 1000
    t, tick = np.arange(n) * 1e-3, np.arange(n, dtype=float)
    widths = {"q": 6, "qd": 6, "u": 3, "i": 3, "reference": 3, "reference_rate": 3,
              "tracking_error": 3, "com": 2}
    print("encoding a block of 1000 rows (all six signal channels, 3RRR widths)")
    totals = {"json": 0.0, "template": 0.0}
    size = {"json": 0, "template": 0}
    for topic, (_, names) in CHANNELS.items():
        columns = [rng.standard_normal((n, widths[m])) if m in widths else rng.standard_normal(n)
                   for m in names]
        keys = [FIELD.get(m, m) for m in names]
        start = time.perf_counter()
        messages = []
        for k in range(n):
            message = {"t": float(t[k]), "tick": int(tick[k])}
            for key, column in zip(keys, columns):
                message[key] = column[k].tolist()
            messages.append(json.dumps(message).encode())
        totals["json"] += time.perf_counter() - start
        size["json"] += sum(map(len, messages))
        encode = Encoder([(key, None if c.ndim == 1 else c.shape[1])
                          for key, c in zip(keys, columns)])
        start = time.perf_counter()
        messages = encode(t, tick, columns)
        totals["template"] += time.perf_counter() - start
        size["template"] += sum(map(len, messages))
    count = n * len(CHANNELS)
    for name in totals:
        print(f"  {name:9} {totals[name] / count * 1e6:6.2f} us/message, "
              f"{size[name] / count:6.1f} bytes/message")
    frames_cost()


def frames_cost() -> None:
    """µs per /hil/frames message of the 3RRR (eight frames): the SDK's message classes
    against telemetry.scene.TransformsEncoder (the view's)."""
    import foxglove.messages as fm
    from hilrig.plant.frames import rrr3
    from hilrig.plant.rrr3 import Rrr3Params
    from hilrig.telemetry.scene import TransformsEncoder

    skeleton = rrr3(Rrr3Params.paper())
    n = 1000
    qs = np.array([0.4, 0.8, 1.0, 0.6, 0.35, -0.1]) + 1e-3 * np.arange(n)[:, None]
    t, r = skeleton.poses(qs)
    stamps = (1_764_000_000 * 10 ** 9 + np.arange(n) * 10 ** 6).tolist()
    start = time.perf_counter()
    sdk = [fm.FrameTransforms(transforms=[fm.FrameTransform(
        timestamp=fm.Timestamp(sec=ns // 10 ** 9, nsec=ns % 10 ** 9), parent_frame_id=parent,
        child_frame_id=child, translation=fm.Vector3(x=a[0], y=a[1], z=a[2]),
        rotation=fm.Quaternion(x=b[0], y=b[1], z=b[2], w=b[3]))
        for (child, parent), a, b in zip(skeleton.frames, t[m].tolist(), r[m].tolist())]).encode()
        for m, ns in enumerate(stamps)]
    print(f"/hil/frames (3RRR, 8 frames), {len(sdk[0])} bytes/message:\n"
          f"  SDK classes {(time.perf_counter() - start) / n * 1e6:6.2f} us/message")
    encode = TransformsEncoder(skeleton.frames)
    start = time.perf_counter()
    for m, ns in enumerate(stamps):
        encode(t[m], r[m], ns)
    print(f"  TransformsEncoder {(time.perf_counter() - start) / n * 1e6:6.2f} us/message")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--setups", default=",".join(SETUPS),
                        help=f"which, comma-separated (default all: {','.join(SETUPS)})")
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stalled", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--reading", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no3d", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ws-client", action="store_true",
                        help="the client reads through the websockets library (default: "
                             "on a plain socket, raw_client)")
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        (client_main if args.ws_client else raw_client)(args.client, args.stalled,
                                                        not args.no3d, args.out)
        return
    setups = [s for s in SETUPS if s in args.setups.split(",")]
    encoding_cost()
    load_before = os.getloadavg()
    results = {s: [] for s in setups}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for setup in setups:
                results[setup].append(one_run(setup, args.duration, Path(tmp),
                                              args.ws_client))
                print(f"repeat {r + 1}/{args.repeats}: {setup} done", flush=True)
    us = 1e6
    print(f"\n3RRR PD, 1 kHz, {args.duration:g} s per run, {args.repeats} repeats "
          "(figures per repeat; the spread within a setup is the noise); load average "
          f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after, "
          f"{os.cpu_count()} CPUs")
    print(f"{'setup':10} {'compute med':>12} {'compute p99':>12} {'late med':>10} "
          f"{'late p99':>10} {'overruns':>9} {'lost':>5}")
    for setup in setups:
        for run in results[setup]:
            c, late = run["compute"], run["lateness"]
            print(f"{setup:10} {np.median(c) * us:10.1f}us {np.percentile(c, 99) * us:10.1f}us "
                  f"{np.median(late) * us:8.1f}us {np.percentile(late, 99) * us:8.1f}us "
                  f"{run['summary']['overruns']:9d} {run['lost']:5d}")
    print("\ntick -> client latency (every message of every channel, from the row's "
          "publication)")
    for setup in setups:
        for run in results[setup]:
            if "latency" not in run or not len(run["latency"]):
                continue
            lat = run["latency"] * 1e3
            print(f"  {setup:10} {run['received']} of {run['expected']} messages: median "
                  f"{np.median(lat):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms, "
                  f"max {lat.max():.2f} ms")
            if len(run.get("frames", ())):
                lat = run["frames"] * 1e3
                print(f"         of which /hil/frames, {len(lat)}: median {np.median(lat):.2f} "
                      f"ms, p99 {np.percentile(lat, 99):.2f} ms, max {lat.max():.2f} ms")


if __name__ == "__main__":
    main()
