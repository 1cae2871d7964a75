"""The ``hil`` command line.

    hil sim CONFIG [--duration T] [--dt DT] [--set key=value ...] --out run.npz [--plot run.png]
    hil log export LOG --out run.npz
    hil plot LOG [--out run.png]
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

from rt.config import ConfigError, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hil", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="run a scenario offline, as fast as it can")
    sim.add_argument("config", help="TOML scenario (see configs/)")
    sim.add_argument("--duration", type=float, help="override sim.duration, s")
    sim.add_argument("--dt", type=float, help="override sim.dt (fixed step), s")
    sim.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override any config key, e.g. --set faults.jam.t1=1.5")
    sim.add_argument("--out", required=True, help="output .npz")
    sim.add_argument("--plot", help="also draw the run to this PNG")
    log = sub.add_parser("log", help="telemetry logs (.mcap) of real-time runs")
    log_sub = log.add_subparsers(dest="log_command", required=True)
    export = log_sub.add_parser("export", help="write the log as the .npz of hil sim, plus "
                                               "its timing arrays")
    export.add_argument("log", help="telemetry log (.mcap)")
    export.add_argument("--out", required=True, help="output .npz")
    plot = sub.add_parser("plot", help="draw a telemetry log: joints, commands, timing, faults")
    plot.add_argument("log", help="telemetry log (.mcap)")
    plot.add_argument("--out", help="output PNG (default: LOG with .png)")
    args = parser.parse_args(argv)
    if args.command == "sim":
        try:
            return _sim(args)
        except ConfigError as exc:
            print(f"hil: config error: {exc}", file=sys.stderr)
            return 2
    from rt.logfile import LogError

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = _export(args) if args.command == "log" else _plot(args)
    except LogError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        return 2
    finally:
        for warning in caught:
            print(f"hil: warning: {warning.message}", file=sys.stderr)
    return status


def _export(args) -> int:
    from rt.logfile import export_npz

    arrays = export_npz(args.log, args.out)
    t = arrays["t"]
    span = f", t = {t[0]:g} .. {t[-1]:g} s" if len(t) else ""
    print(f"wrote {args.out}: {len(t)} rows{span}, {len(arrays['jam_events'])} jam(s)")
    return 0


def _plot(args) -> int:
    from rt.logfile import LogError, run_arrays
    from rt.plot import LOG_GROUPS, plot_log

    arrays, events = run_arrays(args.log)
    missing = [name for name in LOG_GROUPS if name not in arrays]
    if missing:
        raise LogError(f"{args.log}: no {', '.join(missing)} in the log: nothing to plot")
    if not len(arrays["t"]):
        raise LogError(f"{args.log}: no rows: nothing to plot")
    out = args.out or str(Path(args.log).with_suffix(".png"))
    plot_log(arrays, events, out)
    print(f"wrote {out}")
    return 0


def _sim(args) -> int:
    from rt.plot import plot_run
    from rt.sim import SimulationError, simulate

    overrides = list(args.set)
    if args.duration is not None:
        overrides.append(f"sim.duration={args.duration!r}")
    if args.dt is not None:
        overrides.append(f"sim.dt={args.dt!r}")
    cfg = load(args.config, overrides)
    status = 0
    try:
        run = simulate(cfg)
        arrays = run.arrays
    except SimulationError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        arrays, run, status = exc.arrays, None, 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    if run is not None:
        simulated = arrays["t"][-1]
        speed = simulated / run.stepping_seconds if run.stepping_seconds > 0 else float("inf")
        print(f"{cfg['plant']['model']}: {simulated:g} s simulated, {len(arrays['t'])} rows, "
              f"{cfg['sim']['integrator']} dt={cfg['sim']['dt']:g} s; stepping took "
              f"{run.stepping_seconds * 1e3:.1f} ms ({speed:.0f}x real time), "
              f"start-up {run.startup_seconds * 1e3:.0f} ms")
    _print_summary(arrays)
    print(f"wrote {out}")
    if args.plot:
        plot_run(arrays, args.plot)
        print(f"wrote {args.plot}")
    return status


def _print_summary(arrays: dict) -> None:
    q = arrays["q"][-1]
    print("final q = [" + ", ".join(f"{v:.6g}" for v in q) + "]")
    if "residual" in arrays:
        print(f"max residual = {arrays['residual'].max():.3g} m^2")
    for joint, t1, t2 in arrays["jam_events"]:
        print(f"joint {int(joint)} jammed at t = {t1:g} s, blocked from t = {t2:g} s")


if __name__ == "__main__":
    sys.exit(main())
