"""Live view benchmarks (issue 15). Prints medians and tails.

    python bench/bench_live.py [--duration 10] [--repeats 3]

The in-process 1 kHz loop (3RRR, PD: ``hil run rrr3_pd``) in four setups, interleaved
``--repeats`` times so that each sees the same host:

- off: no live view (the tuning mailbox is polled every tick all the same);
- live: the Foxglove server running, no client;
- client: one client subscribed to every channel and reading them;
- stalled: one client subscribed to every channel that never reads (its TCP window
  fills, the SDK drops its oldest messages).

Per setup: whole-tick compute time (compute_tick) and lateness, median and p99 (µs),
overruns, rows lost by the telemetry writer; the spread of each figure over the repeats
of one setup is the run-to-run noise to compare the setups against. For "client": the
latency from a row's publication by the loop (seen by a thread polling the ring's head
every 0.1 ms) to its joint-state message's arrival at the client (CLOCK_MONOTONIC in
both processes); it is dominated by the publisher's wake-up period (live.foxglove.PERIOD).
The clients are separate processes (``websockets``), as Foxglove would be.
"""
from __future__ import annotations

import argparse
import asyncio
import json
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
from hilrig.live.foxglove import LiveView  # noqa: E402
from hilrig.live.params import LiveParameters  # noqa: E402
from hilrig.rt.session import Session  # noqa: E402

SETUPS = ("off", "live", "client", "stalled")


def client_main(port: int, stalled: bool, out: str) -> None:
    """A foxglove.websocket.v1 client: subscribe to every channel, then read (and note
    each joint state's tick and arrival time) or never read again."""
    import websockets

    async def run():
        options = {"max_queue": 1, "max_size": 2 ** 16} if stalled else {}
        for _ in range(600):
            try:
                ws = await websockets.connect(f"ws://127.0.0.1:{port}",
                                              subprotocols=["foxglove.sdk.v1", "foxglove.websocket.v1"], **options)
                break
            except OSError:
                await asyncio.sleep(0.1)
        channels = {}
        while len(channels) < 6:
            message = json.loads(await ws.recv())
            if message["op"] == "advertise":
                channels.update({c["topic"]: c["id"] for c in message["channels"]})
        subs = [{"id": i + 1, "channelId": cid} for i, cid in enumerate(channels.values())]
        joint = 1 + list(channels).index("/hil/joint_state")
        await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
        arrivals = []
        try:
            while True:
                if stalled:
                    await asyncio.sleep(1.0)
                    continue
                frame = await ws.recv()
                if isinstance(frame, bytes) and int.from_bytes(frame[1:5], "little") == joint:
                    arrivals.append((json.loads(frame[13:])["tick"], time.monotonic_ns()))
        except websockets.ConnectionClosed:
            pass
        Path(out).write_text(json.dumps(arrivals))

    asyncio.run(run())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HeadWatch:
    """When each row was published: the ring's head polled every 0.1 ms (CLOCK_MONOTONIC)."""

    def __init__(self):
        self.seen = []
        self._done = threading.Event()

    def start(self, session) -> None:
        head = session.telemetry.head

        def watch():
            last = 0
            while not self._done.is_set():
                h = int(head[0])
                if h > last:
                    self.seen.append((h - 1, time.monotonic_ns()))
                    last = h
                time.sleep(1e-4)
        self.thread = threading.Thread(target=watch, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self._done.set()
        self.thread.join()


def one_run(setup: str, duration: float, scratch: Path) -> dict:
    cfg = load("rrr3_pd", [f"sim.duration={duration}"])
    port = free_port()
    hooks, client, watch = [], None, None
    if setup != "off":
        live = LiveParameters()
        hooks = [live, LiveView("127.0.0.1", port, live)]
    if setup in ("client", "stalled"):
        arrivals = scratch / f"arrivals-{setup}.json"
        client = subprocess.Popen([sys.executable, __file__, "--client", str(port),
                                   "--stalled" if setup == "stalled" else "--reading",
                                   "--out", str(arrivals)])
    if setup == "client":
        watch = HeadWatch()
        hooks.append(watch)
    session = Session(cfg, scratch / f"{setup}.mcap", hooks=hooks)
    if client is not None:        # the loop starts once the client is subscribed
        time.sleep(3.0)
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
        client.wait(30)
    if watch is not None:
        published = dict(watch.seen)
        got = json.loads(arrivals.read_text())
        latency = [t - published[k] for k, t in got if k in published]
        out["latency"] = np.array(latency) * 1e-9
        out["received"] = len(got)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stalled", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--reading", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args.client, args.stalled, args.out)
        return
    results = {s: [] for s in SETUPS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for setup in SETUPS:
                results[setup].append(one_run(setup, args.duration, Path(tmp)))
                print(f"repeat {r + 1}/{args.repeats}: {setup} done", flush=True)
    us = 1e6
    print(f"\n3RRR PD, 1 kHz, {args.duration:g} s per run, {args.repeats} repeats "
          "(figures per repeat; the spread within a setup is the noise)")
    print(f"{'setup':8} {'compute med':>12} {'compute p99':>12} {'late med':>10} "
          f"{'late p99':>10} {'overruns':>9} {'lost':>5}")
    for setup in SETUPS:
        for run in results[setup]:
            c, late = run["compute"], run["lateness"]
            print(f"{setup:8} {np.median(c) * us:10.1f}us {np.percentile(c, 99) * us:10.1f}us "
                  f"{np.median(late) * us:8.1f}us {np.percentile(late, 99) * us:8.1f}us "
                  f"{run['summary']['overruns']:9d} {run['lost']:5d}")
    latencies = [run for run in results["client"] if "latency" in run]
    if latencies:
        print("\ntick -> client latency (joint state, from the row's publication)")
        for run in latencies:
            lat = run["latency"] * 1e3
            print(f"  {run['received']} messages: median {np.median(lat):.2f} ms, "
                  f"p99 {np.percentile(lat, 99):.2f} ms, max {lat.max():.2f} ms")


if __name__ == "__main__":
    main()
