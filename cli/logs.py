"""The commands on telemetry logs (.mcap): ``hil log export`` (the .npz of ``hil sim``),
``hil log repair`` (finish a log whose writer was killed), ``hil plot``.

A missing or broken log is a LogError (cli.exits: one line, exit 2); what the reader
only warns about (a log that ends early) is printed as ``hil: warning: ...`` lines.
"""
from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path


def register(commands) -> None:
    commands.add("log", "telemetry logs (.mcap) of real-time runs", _declare_log)
    commands.add("plot", "draw a telemetry log: joints, commands, timing, faults",
                 _declare_plot)


def _declare_log(parser) -> None:
    log_sub = parser.add_subparsers(dest="log_command", required=True)
    export = log_sub.add_parser("export", help="write the log as the .npz of hil sim, plus "
                                               "its timing arrays")
    export.add_argument("log", help="telemetry log (.mcap)")
    export.add_argument("--out", required=True, help="output .npz")
    export.set_defaults(handler=_export)
    repair = log_sub.add_parser("repair", help="finish a log whose writer was killed: a new "
                                               "MCAP with summary and index, messages in "
                                               "log-time order")
    repair.add_argument("log", help="telemetry log (.mcap) that ends early")
    repair.add_argument("--out", help="output .mcap (default: LOG-repaired.mcap)")
    repair.set_defaults(handler=_repair)


def _declare_plot(parser) -> None:
    parser.add_argument("log", help="telemetry log (.mcap)")
    parser.add_argument("--out", help="output PNG (default: LOG with .png)")
    parser.set_defaults(handler=_plot)


def _with_warnings(handler):
    """``handler`` with the warnings it raises printed as ``hil: warning: ...`` lines."""
    @functools.wraps(handler)
    def reporting(args) -> int:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return handler(args)
            finally:
                for warning in caught:
                    print(f"hil: warning: {warning.message}", file=sys.stderr)
    return reporting


@_with_warnings
def _export(args) -> int:
    from hilrig.cli.options import output_path
    from hilrig.telemetry.logfile import export_npz

    output_path("--out", args.out, (".npz",))
    arrays = export_npz(args.log, args.out)
    t = arrays["t"]
    span = f", t = {t[0]:g} .. {t[-1]:g} s" if len(t) else ""
    print(f"wrote {args.out}: {len(t)} rows{span}, {len(arrays['jam_events'])} jam(s)")
    return 0


@_with_warnings
def _plot(args) -> int:
    if args.out:
        from hilrig.cli.options import output_path

        output_path("--out", args.out, (".png",))
    plot_log(Path(args.log), args.out)
    return 0


def _repair(args) -> int:
    """hil log repair: a finished copy of a log whose writer did not finish."""
    from hilrig.cli.options import output_path
    from hilrig.telemetry.repair import repair

    log_path = Path(args.log)
    out = output_path("--out", args.out, (".mcap",)) if args.out else log_path.with_name(f"{log_path.stem}-repaired.mcap")
    print(repair(log_path, out).describe())
    return 0


def plot_log(log_path: Path, png) -> None:
    """Draw a telemetry log to ``png`` (default: the log's path with .png); LogError if
    it has nothing to plot (also after ``hil run``)."""
    from hilrig.analysis.plot import LOG_GROUPS, plot_log as draw
    from hilrig.telemetry.logfile import LogError, run_arrays

    arrays, events = run_arrays(log_path)
    missing = [name for name in LOG_GROUPS if name not in arrays]
    if missing:
        raise LogError(f"{log_path}: no {', '.join(missing)} in the log: nothing to plot")
    if not len(arrays["t"]):
        raise LogError(f"{log_path}: no rows: nothing to plot")
    out = Path(png) if png else log_path.with_suffix(".png")
    draw(arrays, events, out)
    print(f"wrote {out}")
