"""The machine's ZeroMQ round-trip floor, to read the emulator round trip against.

A bare pyzmq DEALER/ROUTER ping-pong between two processes, with the frame
sizes of a 3-axis COMMAND (68 bytes) and STATE (108 bytes) and the same 1 kHz
pacing as the controller loop (sleep, then spin to the deadline), but no
plant, no controller and no decoding. On a VM every hop between the two
processes and ZeroMQ's I/O threads may wake an idle vCPU; this is the part of
the emulator's round trip that no code of ours can remove.

    python bench/zmq_floor.py serve ENDPOINT      # the echo side (a subprocess)
"""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import zmq

COMMAND_BYTES, STATE_BYTES = 68, 108
QUIT = b"quit"


def serve(endpoint: str) -> None:
    """Answer every frame with a STATE-sized frame until QUIT."""
    socket = zmq.Context.instance().socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(endpoint)
    print("ready", flush=True)
    reply = bytes(STATE_BYTES)
    while True:
        peer, frame = socket.recv_multipart()
        if frame == QUIT:
            return
        socket.send_multipart([peer, reply])


def round_trips(endpoint: str, count: int, period: float = 1e-3, spin: float = 5e-4) -> np.ndarray:
    """Start the echo process, time ``count`` paced round trips (µs), stop it."""
    server = subprocess.Popen([sys.executable, __file__, "serve", endpoint],
                              stdout=subprocess.PIPE, text=True)
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        server.stdout.readline()
        socket.connect(endpoint)
        command = bytes(COMMAND_BYTES)
        times = np.empty(count + 100)
        deadline = time.perf_counter()
        for k in range(len(times)):
            deadline += period
            time.sleep(max(0.0, deadline - spin - time.perf_counter()))
            while time.perf_counter() < deadline:
                pass
            sent = time.perf_counter_ns()
            socket.send(command)
            socket.recv()
            times[k] = (time.perf_counter_ns() - sent) * 1e-3
        socket.send(QUIT)
        server.wait(10)
    finally:
        server.kill()
        server.wait()
        socket.close(0)
    return times[100:]          # the first hundred warm the connection


if __name__ == "__main__":
    serve(sys.argv[2])
