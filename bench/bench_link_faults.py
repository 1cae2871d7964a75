"""What the link-fault and controlled-stop machinery adds to the emulated devices' per-tick
path when no fault is configured. Run: python bench/bench_link_faults.py

Prints the median cost (7 x 20000 calls) of each check the devices now make per tick,
SYNC or request: the ZeroMQ emulator's two attribute tests, the serial emulator's delay
look-up per request, the CiA 402 drives' quick-stop check per SYNC. Compare with a tick:
tens to hundreds of microseconds (bench_can.py, bench_serial.py, docs/MEASURED.md).
"""
from __future__ import annotations

import statistics
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hilrig.devices.cia402_drive import EmulatedDrives  # noqa: E402
from hilrig.devices.link_faults import LinkFaults  # noqa: E402
from hilrig.settings.config import load  # noqa: E402


def ns(stmt: str, names: dict) -> float:
    """Median ns per call of ``stmt``."""
    return statistics.median(timeit.repeat(stmt, globals=names, number=20000, repeat=7)) \
        / 20000 * 1e9


def main() -> None:
    faults = LinkFaults(load(ROOT / "configs" / "rig_zmq.toml"), "zmq", 3)
    print(f"ZeroMQ emulator, per tick: {ns('not faults.idle', {'faults': faults}):.0f} ns "
          f"+ {ns('faults.active_count or delayed', {'faults': faults, 'delayed': []}):.0f} ns")
    print(f"serial emulator, per request: "
          f"{ns('faults.active(kind, (1, 2))', {'faults': faults, 'kind': 'delay'}):.0f} ns")
    cfg = load(ROOT / "configs" / "rig_canopen.toml", ["link.canopen.interface='virtual'",
                                                       "link.canopen.channel='bench'"])
    with EmulatedDrives(cfg) as drives:
        names = {"drives": drives}
        print(f"CiA 402 drives, per SYNC: {ns('drives._quick_stop()', names):.0f} ns "
              f"+ 2 x {ns('not drives.link_faults.idle', names):.0f} ns")


if __name__ == "__main__":
    main()
