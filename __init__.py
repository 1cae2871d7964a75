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


def check_controller(controller, n_axes: int, **options) -> None:
    """Check a controller against the control-law interface; raises ConformanceError
    naming the property it breaks (hilrig.rt.conformance.check_controller, which lists
    the checks and ``options``). Imported on first use, as ``connect``."""
    from hilrig.rt.conformance import check_controller as _check
    _check(controller, n_axes, **options)


def check_plant(plant_or_cfg, **options) -> None:
    """Check a Plant, or the plant of a resolved config; raises ConformanceError naming the
    property it breaks (hilrig.rt.conformance.check_plant). Imported on first use."""
    from hilrig.rt.conformance import check_plant as _check
    _check(plant_or_cfg, **options)


def check_link(link_factory, **options) -> None:
    """Check the links ``link_factory()`` returns through their lifecycle; raises
    ConformanceError naming the step that fails (hilrig.rt.conformance.check_link).
    Imported on first use."""
    from hilrig.rt.conformance import check_link as _check
    _check(link_factory, **options)
