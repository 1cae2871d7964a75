"""hilrig: a hardware-in-the-loop controller and plant emulator for robot manipulators.

Packages, lowest layer first (docs/ARCHITECTURE.md): ``hilrig.plant`` (models as
numba kernels), ``hilrig.controllers`` (control laws), ``hilrig.telemetry`` and
``hilrig.timing`` (logging, clocks), ``hilrig.drivers`` (links to a plant, one per
protocol, with their codecs), ``hilrig.devices`` (emulated devices that answer those
protocols), ``hilrig.rt`` (the run-time loops, offline runs and the ``hil`` CLI).
"""
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("hilrig")
except PackageNotFoundError:   # a source tree that was never installed
    __version__ = "0+unknown"


def connect(endpoint: str = "ipc:///tmp/hilrig-emulator", timeout: float = 1.0):
    """A client of the ``hil emulate`` at ``endpoint``: read, write, jam, clear, estop
    (hilrig.rt.client). Imported on first use, so ``import hilrig`` stays light."""
    from hilrig.rt.client import connect as _connect
    return _connect(endpoint, timeout)
