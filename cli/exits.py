"""What ``hil`` exits with: one map from what went wrong to an exit code and one line.

A handler raises; ``hil`` (cli.main) looks the exception's class up in ERRORS, prints
``hil: `` and the entry's line on stderr and exits with its code. An exception the map
does not name is a bug: its traceback shows. The classes are named by module and name,
so that no module is imported to look one up (``hil --version`` stays light); a
subclass is found through its bases (a ``ControllerError`` is a ``ConfigError``).

When the reader of ``hil``'s output goes away (``hil configs | head -3``), ``hil`` stops
quietly with READER_LEFT, as a tool that SIGPIPE ends does (``reader_left``).

A run that ends by itself exits with RUN_ENDINGS: 0 when it ran to its end, 130 when it
was interrupted (Ctrl-C, ``hil estop``), 1 otherwise (a link lost, a fault, a log that
could not be written); the reason is in its last lines and its log.
"""
from __future__ import annotations

import os
import select
import signal
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Exit:
    """An exit code and the line printed after ``hil: `` (``{exc}``: the exception's text)."""

    code: int
    line: str = "{exc}"


# docs/CLI.md shows this table to the user (a test keeps them equal).
ERRORS: dict[str, Exit] = {
    # a mistake in what was asked: a config, a key, an option, a run id, an endpoint
    "hilrig.errors.ConfigError": Exit(2, "config error: {exc}"),
    # a log that is missing or not a hilrig log (hil plot, hil log)
    "hilrig.telemetry.logfile.LogError": Exit(2),
    # a campaign that cannot start (no Dask, no scheduler, no workers)
    "hilrig.campaign.cluster.CampaignError": Exit(2),
    # the plant state became invalid (hil sim still writes the rows up to then)
    "hilrig.plant.offline.SimulationError": Exit(1),
    # the log could not be written
    "hilrig.telemetry.recorder.TelemetryError": Exit(1),
    # an emulator or a controller refused or did not answer (hil fault, hil estop)
    "hilrig.remote.fault.FaultError": Exit(1),
    # a run refused a change or did not answer (hil set)
    "hilrig.live.tuning.TuningError": Exit(1),
    # Ctrl-C, or SIGTERM (timing.signals.terminate_as_interrupt)
    "builtins.KeyboardInterrupt": Exit(130, "interrupted"),
}

RUN_ENDINGS = {"ok": 0, "interrupted": 130}      # any other ending of a run: 1

READER_LEFT = 128 + signal.SIGPIPE                 # 141, as a shell reports SIGPIPE's end


def exit_for(exc: BaseException) -> Exit | None:
    """The entry of ERRORS for ``exc`` (its class or its nearest base named there); None
    for a bug."""
    for cls in type(exc).__mro__:
        found = ERRORS.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            return found
    return None


def run_exit_code(status: str) -> int:
    """The exit code of a run that ended with ``status`` (rt's SessionResult/LoopResult)."""
    return RUN_ENDINGS.get(status, 1)


def reader_left(exc: BaseException) -> bool:
    """``exc`` is a write to stdout whose reader has closed the pipe: then stdout is
    pointed at /dev/null, so that the interpreter's last flush of it is quiet too. Any
    other broken pipe (a socket, a serial port, stdout still read) is not this."""
    if not isinstance(exc, BrokenPipeError):
        return False
    try:
        probe = select.poll()
        probe.register(sys.stdout.fileno(), select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in probe.poll(0))
    except (OSError, ValueError, AttributeError):  # stdout closed, or not a file
        return False
    if gone:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return gone
