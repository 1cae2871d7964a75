"""The options several ``hil`` commands share, each declared once: the CONFIG, ``--set``
and ``--duration``, the way to address a running run (``hil fault``, ``hil estop``, ``hil
set``) and the checks of their values.

    CONFIG              a TOML file or the name of a built-in config (hil configs)
    --set KEY=VALUE     override any config key (repeatable): every command that reads
                        a config (sim, run, emulate, control, canopen eds, analyze)
    [RUN_ID] --run RUN_ID | --connect ENDPOINT  [--timeout S]
                        which running run: by the id it printed when it started (hil
                        estop --list lists them), or by its endpoint (a run started
                        elsewhere); RUN_ID as a positional on hil estop only
    --out, --plot, --log
                        a file of the suffix the command writes (output_path), in a
                        folder that exists or is made below an existing one, never at
                        the filesystem root (output_folder)

Checking a value raises ConfigError (cli.exits: one line, exit 2), not argparse's
usage message, so a bad value is one line whichever command it is given to.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hilrig.errors import ConfigError

CONFIG_HELP = "TOML scenario: a file, or the name of a built-in config (hil configs)"


def add_config(parser, **argument) -> None:
    """The CONFIG positional (``argument``: argparse's nargs, default, help)."""
    parser.add_argument("config", **{"help": CONFIG_HELP, **argument})


def add_set(parser) -> None:
    """``--set KEY=VALUE``, repeatable: overrides of the config's keys (settings.config)."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override any config key, e.g. --set controller.kp=80 "
                             "(repeatable)")


def add_duration(parser) -> None:
    """``--duration T``: sets sim.duration (checked by ``positive``)."""
    parser.add_argument("--duration", type=float, help="override sim.duration, s")


def positive(option: str, value: float | None, unit: str) -> None:
    """ConfigError unless ``value`` (an option's) is unset or a finite number > 0."""
    if value is not None and not (math.isfinite(value) and value > 0.0):
        raise ConfigError(f"{option}: expected a finite number > 0 ({unit}), got {value:g}")


@dataclass(frozen=True)
class RunAddress:
    """A running run as a command addresses it: ``run_id`` (from the run list,
    remote.runs) or ``endpoint`` (given), at most one of them; ``timeout`` s to wait for
    its answer."""

    run_id: str | None
    endpoint: str | None
    timeout: float


def add_run_address(parser, *, positional: bool = False, timeout: float = 2.0,
                    connect_help: str = "the run's endpoint (a run started elsewhere; "
                                        "instead of --run)") -> None:
    """``[RUN_ID] --run RUN_ID | --connect ENDPOINT --timeout S`` (``positional``: also the
    run id as an optional positional, as ``hil estop RUN_ID``); read back by
    ``run_address``."""
    if positional:
        parser.add_argument("run_positional", nargs="?", metavar="RUN_ID",
                            help="the run's id (as --run)")
    parser.add_argument("--run", dest="run_id", metavar="RUN_ID", default=None,
                        help="the run's id (printed when it starts; hil estop --list)")
    parser.add_argument("--connect", metavar="ENDPOINT", default=None, help=connect_help)
    parser.add_argument("--timeout", type=float, default=timeout,
                        help=f"s to wait for the answer (default {timeout:g})")


def run_address(args) -> RunAddress:
    """The run the options of ``add_run_address`` name; ConfigError for a bad --timeout,
    two different run ids, or both a run id and an endpoint."""
    positive("--timeout", args.timeout, "s")
    run_id = args.run_id
    given = getattr(args, "run_positional", None)
    if given is not None:
        if run_id is not None and run_id != given:
            raise ConfigError(f"two run ids: {given} and --run {run_id} (give one)")
        run_id = given
    if run_id is not None and args.connect is not None:
        raise ConfigError(f"run id {run_id} and --connect {args.connect}: give one of them")
    return RunAddress(run_id, args.connect, args.timeout)


def output_path(option: str, value, suffixes: tuple[str, ...] = ()) -> Path:
    """The file an option (``--out``, ``--plot``, ``--log``) names, checked before any work:
    ConfigError (one line) unless it ends in one of ``suffixes`` (none: any name), is not
    a folder, and its folder exists or can be made (``output_folder``)."""
    path = Path(value)
    if suffixes and path.suffix.lower() not in suffixes:
        raise ConfigError(f"{option} {value}: expected a file ending in "
                          f"{' or '.join(suffixes)}, got {path.suffix or 'no suffix'}")
    if path.is_dir():
        raise ConfigError(f"{option} {value}: is a folder (give a file name)")
    output_folder(option, path.parent, value)
    return path


def output_folder(option: str, folder, value=None) -> Path:
    """``folder``, where an option's output goes, checked before any work: ConfigError
    (one line) when it is not a folder, or is missing and its nearest existing folder is
    the filesystem root (hil makes missing folders below an existing one, never at
    ``/``) or is not a folder."""
    folder = Path(folder)
    named = f"{option} {value if value is not None else folder}"
    if folder.exists():
        if not folder.is_dir():
            raise ConfigError(f"{named}: {folder} is not a folder")
        return folder
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{named}: {existing} is not a folder")
    if existing == Path(existing.anchor):
        raise ConfigError(f"{named}: folder {folder.absolute()} does not exist (hil makes no "
                          "folder at the filesystem root)")
    return folder
