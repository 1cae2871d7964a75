"""The per-call cost of a link's ``read`` and ``write``, the two calls of every tick.

    python bench/bench_link.py [--calls 200000] [--batch 1000]

- inprocess: the 3-DOF arm of configs/rig_inprocess.toml as a PlantLink (``read``
  copies the state and computes the currents; ``write`` steps the plant by 1 ms);
- zmq: a ZmqLink in free mode to a ROUTER socket of this process over inproc://
  (``read`` finds nothing queued and returns False; ``write`` queues one COMMAND,
  which the ROUTER drains between batches, untimed);
- base: the cost of the base class Link alone (its state check and the call of the
  hook): a link whose hooks do nothing, through ``read``/``write`` and its hooks called
  directly.

Each call is timed in batches of ``--batch`` back-to-back calls; printed are the median,
the 10th and the 90th percentile over the batches of the time per call, in ns. The
calls go through the public ``read``/``write`` (and so through whatever lifecycle
check the link has), as the loops call them. Timings on a shared 2-core VM vary between
runs by a few percent: compare medians of runs made one after the other.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import zmq  # noqa: E402
from hilrig.drivers.inprocess import PlantLink  # noqa: E402
from hilrig.drivers.link import Link, Measurement  # noqa: E402
from hilrig.drivers.wire import MessageType, encode  # noqa: E402
from hilrig.drivers.zmq_link import ZmqLink  # noqa: E402
from hilrig.settings.config import load  # noqa: E402


def per_call_ns(call, calls: int, batch: int, between=None) -> np.ndarray:
    """ns per call of ``call()`` in each batch of ``batch`` calls (``between()`` untimed)."""
    out = np.empty(calls // batch)
    clock = time.perf_counter_ns
    for b in range(out.size):
        start = clock()
        for _ in range(batch):
            call()
        out[b] = (clock() - start) / batch
        if between is not None:
            between()
    return out


def row(name: str, ns: np.ndarray) -> str:
    p10, p50, p90 = np.percentile(ns, [10, 50, 90])
    return f"{name:<28} median {p50:7.0f} ns   p10 {p10:7.0f}   p90 {p90:7.0f}"


def inprocess(calls: int, batch: int) -> list[str]:
    cfg = load(ROOT / "configs" / "rig_inprocess.toml")
    link = PlantLink.from_config(cfg)
    link.open()
    meas, u = Measurement(link.n_axes), np.zeros(link.n_axes)
    per_call_ns(lambda: (link.read(meas), link.write(u)), batch, batch)    # warm
    rows = [row("inprocess read", per_call_ns(lambda: link.read(meas), calls, batch)),
            row("inprocess write", per_call_ns(lambda: link.write(u), calls, batch))]
    link.safe_stop()
    link.close()
    return rows


def zmq_free(calls: int, batch: int) -> list[str]:
    endpoint = "inproc://bench-link"
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.bind(endpoint)
    link = ZmqLink(endpoint, 3, timeout=1.0)
    link.command_unit = "V"

    def welcome() -> None:
        peer, _ = router.recv_multipart()
        router.send_multipart([peer, encode(MessageType.WELCOME, 0, 0.0, [0, 3, 1e-3, 1])])

    def drain() -> None:
        while router.poll(0):
            router.recv_multipart()

    answer = threading.Thread(target=welcome)
    answer.start()
    link.open()
    answer.join()
    meas, u = Measurement(3), np.zeros(3)
    rows = [row("zmq read (nothing queued)", per_call_ns(lambda: link.read(meas), calls, batch)),
            row("zmq write", per_call_ns(lambda: link.write(u), calls, batch, drain))]
    link.safe_stop()
    link.close()
    router.close(linger=0)
    return rows


class NullLink(Link):
    """Hooks that do nothing: what is left of a call is the base's."""

    n_axes, command_unit = 3, "V"

    def _configure(self) -> None:
        pass

    def _read(self, meas: Measurement) -> bool:
        return True

    def _write(self, command: np.ndarray) -> None:
        pass

    def _safe_stop(self) -> None:
        pass


def base(calls: int, batch: int) -> list[str]:
    link = NullLink()
    link.open()
    meas, u = Measurement(3), np.zeros(3)
    return [row("base read", per_call_ns(lambda: link.read(meas), calls, batch)),
            row("base: _read called directly", per_call_ns(lambda: link._read(meas), calls,
                                                           batch)),
            row("base write", per_call_ns(lambda: link.write(u), calls, batch)),
            row("base: _write called directly", per_call_ns(lambda: link._write(u), calls,
                                                            batch))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    for line in inprocess(args.calls, args.batch) + zmq_free(args.calls, args.batch) \
            + base(args.calls, args.batch):
        print(line, flush=True)


if __name__ == "__main__":
    main()
