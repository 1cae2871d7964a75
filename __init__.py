"""hilrig: a hardware-in-the-loop controller and plant emulator for robot manipulators.

Packages, lowest layer first (docs/ARCHITECTURE.md): ``hilrig.jit`` (numba's kernel
decorators and cache), ``hilrig.plant`` (models as numba kernels), ``hilrig.controllers``
(control laws), ``hilrig.timing`` and ``hilrig.telemetry`` (clocks, logging),
``hilrig.drivers`` (links to a plant, one per protocol, with their codecs),
``hilrig.devices`` (emulated devices that answer those protocols), ``hilrig.settings``
(configs), ``hilrig.rt`` (the loops), then side by side ``hilrig.campaign``,
``hilrig.live``, ``hilrig.remote``, ``hilrig.analysis``, ``hilrig.conformance``, and on
top ``hilrig.cli`` (the ``hil`` command).
"""
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("hilrig")
except PackageNotFoundError:   # a source tree that was never installed
    __version__ = "0+unknown"


def connect(endpoint: str = "ipc://$RUNTIME/emulator", timeout: float = 1.0):
    """A client of the ``hil emulate`` at ``endpoint`` (default: the emulator's default,
    in this user's runtime folder): read, write, jam, clear, estop
    (hilrig.remote.client). Imported on first use, so ``import hilrig`` stays light."""
    from hilrig.remote.client import connect as _connect
    return _connect(endpoint, timeout)


def check_controller(controller, n_axes: int, **options) -> None:
    """Check a controller against the control-law interface; raises ConformanceError
    naming the property it breaks (hilrig.conformance.checks.check_controller, which lists
    the checks and ``options``). Imported on first use, as ``connect``."""
    from hilrig.conformance.checks import check_controller as _check
    _check(controller, n_axes, **options)


def check_plant(plant_or_cfg, **options) -> None:
    """Check a Plant, or the plant of a resolved config; raises ConformanceError naming the
    property it breaks (hilrig.conformance.checks.check_plant). Imported on first use."""
    from hilrig.conformance.checks import check_plant as _check
    _check(plant_or_cfg, **options)


def check_link(link_factory, **options) -> None:
    """Check the links ``link_factory()`` returns through their lifecycle; raises
    ConformanceError naming the step that fails (hilrig.conformance.checks.check_link).
    Imported on first use."""
    from hilrig.conformance.checks import check_link as _check
    _check(link_factory, **options)
