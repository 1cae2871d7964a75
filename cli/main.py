"""The ``hil`` command line.

    hil sim CONFIG [--duration T] [--dt DT] [--set key=value ...] --out run.npz [--plot run.png]
    hil sim --replay LOG [--duration T] --out run.npz
    hil run CONFIG [--duration T] [--fast] [--log PATH] [--set key=value ...] [--live] [--watch]
    hil emulate CONFIG --bind ENDPOINT [--mode free|lockstep] [--log PATH] [--live]
    hil control CONFIG [--connect ENDPOINT] [--link TYPE] [--log PATH] [--live] [--takeover]
    hil fault jam --joint K --duration DT [--connect ENDPOINT]
    hil fault clear --joint K [--connect ENDPOINT]
    hil estop [RUN_ID | --run RUN_ID | --connect ENDPOINT | --list] [--category 0|1|2]
    hil set KEY=VALUE ... [--run RUN_ID | --connect ENDPOINT]
    hil log export LOG --out run.npz
    hil log repair LOG [--out fixed.mcap]
    hil plot LOG [--out run.png]
    hil configs [--show NAME]
    hil warmup [CONFIG ...] [--prune] [--list] [--jobs N]
    hil keys [--force]
    hil canopen eds --node N [CONFIG] [-o FILE]
    hil analyze modes CONFIG [--set key=value ...] [--json]
    hil analyze stiffness CONFIG [--set ...] [--json] [--map] [--out maps.png]
    hil analyze flex CONFIG [--set ...] [--json] [--out report.png]
    hil campaign SPEC.toml [--scheduler ADDRESS] [--workers N] [--out DIR] [--resume]
    hil excite CONFIG --out EXCITE.toml [--harmonics L] [--frequency F] [--max-position ...]
    hil identify LOG... --config CONFIG [--fit a,b,...] [--cutoff HZ] [--out fitted.toml]
    hil identify --validate LOG --config fitted.toml [--unfitted CONFIG] [--plot PNG]

CONFIG is a TOML file or the name of a built-in config (``hil configs`` lists them).
What went wrong decides the exit code and the one line on stderr (cli.exits): a mistake
in what was asked (a config, an option) exits 2; anything the map does not name is a bug
and shows its traceback. A reader of the output that leaves (``hil configs | head``) ends
``hil`` quietly with 141.

One module per family of commands, each registering its commands here: cli.runs (sim,
run, emulate, control), cli.remote (fault, estop, set), cli.logs (log, plot),
cli.configs (configs, warmup, keys, canopen), cli.analyze, cli.campaign, cli.identify
(excite, identify); the options
they share are declared in cli.options. A command's options are declared when it is
chosen, so ``hil --version`` and ``hil --help`` import none of the numerical stack.
"""
from __future__ import annotations

import argparse
import logging
import sys

import hilrig
from hilrig.cli import analyze, campaign, configs, identify, logs, remote, runs
from hilrig.cli.exits import READER_LEFT, exit_for, reader_left
from hilrig.timing.signals import terminate_as_interrupt

FAMILIES = (runs, remote, logs, configs, analyze, campaign, identify)


class Commands(argparse._SubParsersAction):
    """The subcommands of a parser, each declaring its options only when it is chosen
    (``add``: name, one line of help, ``declare(parser)``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._undeclared = {}

    def add(self, name: str, help: str, declare) -> None:
        """The command ``name``; ``declare(parser)`` adds its options and its handler
        (``parser.set_defaults(handler=...)``: called with the parsed arguments, returns
        the exit code)."""
        self.add_parser(name, help=help, description=help)
        self._undeclared[name] = declare

    def __call__(self, parser, namespace, values, option_string=None):
        declare = self._undeclared.pop(values[0], None)
        if declare is not None:
            declare(self._name_parser_map[values[0]])
        super().__call__(parser, namespace, values, option_string)


def parser() -> argparse.ArgumentParser:
    """The ``hil`` parser: every family's commands."""
    hil = argparse.ArgumentParser(prog="hil", description=__doc__.splitlines()[0])
    hil.add_argument("--version", action="version", version=f"hilrig {hilrig.__version__}")
    commands = hil.add_subparsers(dest="command", required=True, action=Commands)
    for family in FAMILIES:
        family.register(commands)
    return hil


OWN_LOGGERS = ("hil", "hilrig")       # hilrig's loggers: hil.loop, hilrig.drivers...


class _Speaker(logging.Formatter):
    """hilrig's messages as ``hil: MESSAGE``; another library's (canopen, the Foxglove
    SDK, Dask) as ``NAME: LEVEL: MESSAGE``, so that no library speaks as ``hil``."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if record.name.split(".")[0] in OWN_LOGGERS:
            return f"hil: {message}"
        return f"{record.name}: {record.levelname.lower()}: {message}"


def log_to_stderr() -> None:
    """The log on stderr: hilrig's loggers from INFO on, every other library's from
    WARNING on (their progress chatter is not the user's business), each said by its
    name (_Speaker). Nothing is changed when the root logger has a handler already (an
    application or a test that called ``main``)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(_Speaker())
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """``hil ARGV``: the chosen command's exit code (cli.exits for what went wrong)."""
    chosen = parser()
    args, extra = chosen.parse_known_args(argv)
    trailing = getattr(args, "trailing", None)   # a command's positionals after its options
    if extra and (trailing is None or any(word.startswith("-") for word in extra)):
        chosen.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        setattr(args, trailing, getattr(args, trailing) + extra)
    log_to_stderr()
    terminate_as_interrupt()
    try:
        code = args.handler(args)
        sys.stdout.flush()      # a reader that left shows here, not at the interpreter's exit
        return code
    except (Exception, KeyboardInterrupt) as exc:
        if reader_left(exc):
            return READER_LEFT
        known = exit_for(exc)
        if known is None:
            raise
        print("hil: " + known.line.format(exc=exc), file=sys.stderr)
        return known.code


if __name__ == "__main__":
    sys.exit(main())
