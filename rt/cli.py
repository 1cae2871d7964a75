"""The ``hil`` command line.

    hil sim CONFIG [--duration T] [--dt DT] [--set key=value ...] --out run.npz [--plot run.png]
    hil sim --replay LOG [--duration T] --out run.npz
    hil run CONFIG [--duration T] [--fast] [--log PATH] [--set key=value ...] [--live] [--watch]
    hil emulate CONFIG --bind ENDPOINT [--mode free|lockstep] [--log PATH] [--live]
    hil control CONFIG [--connect ENDPOINT] [--link TYPE] [--log PATH] [--live]
    hil set KEY=VALUE ... [--connect ENDPOINT]
    hil fault jam --joint K --duration DT --connect ENDPOINT
    hil fault clear --joint K --connect ENDPOINT
    hil estop [--connect ENDPOINT]
    hil log export LOG --out run.npz
    hil plot LOG [--out run.png]
    hil configs [--show NAME]
    hil warmup [CONFIG ...] [--prune]

CONFIG is a TOML file or the name of a built-in config (``hil configs`` lists them).
A mistake in what was asked (a config, an option) is one line on stderr and exit code
2; anything else is a bug and shows its traceback.
"""
from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

import hilrig
import numpy as np
from hilrig.drivers.registry import links
from hilrig.rt.config import ConfigError, load
from hilrig.schema import Config
from hilrig.timing.signals import terminate_as_interrupt

CONFIG_HELP = "TOML scenario: a file, or the name of a built-in config (hil configs)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hil", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"hilrig {hilrig.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="run a scenario offline, as fast as it can")
    sim.add_argument("config", nargs="?", help=CONFIG_HELP)
    sim.add_argument("--replay", metavar="LOG",
                     help="replay a real-time run's log (its config and live changes)")
    sim.add_argument("--duration", type=float, help="override sim.duration, s")
    sim.add_argument("--dt", type=float, help="override sim.dt (fixed step), s")
    sim.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override any config key, e.g. --set faults.jam.t1=1.5")
    sim.add_argument("--out", required=True, help="output .npz")
    sim.add_argument("--plot", help="also draw the run to this PNG")
    sim.set_defaults(handler=_sim)

    run = sub.add_parser("run", help="controller and plant in this process, in real time")
    _common(run)
    run.add_argument("--fast", action="store_true", help="as fast as it can (lockstep)")
    run.add_argument("--rate", type=float, help="loop rate, Hz (sets sim.dt = 1/rate)")
    run.add_argument("--log", help="telemetry log (.mcap); default runs/<config>.mcap")
    run.add_argument("--plot", help="plot PNG; default next to the log")
    run.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    run.add_argument("--watch", action="store_true",
                     help="keep a status block current in the terminal")
    _live_options(run, tuning=True)
    run.set_defaults(handler=_run)

    emulate = sub.add_parser("emulate", help="serve the plant: over ZeroMQ, or behind emulated "
                                             "drives when link.type is canopen or serial")
    _common(emulate)
    emulate.add_argument("--bind", default=None,
                         help="endpoint (default link.endpoint, ipc:///tmp/hilrig-emulator)")
    emulate.add_argument("--mode", choices=("free", "lockstep"), help="sets emulator.mode")
    emulate.add_argument("--log", help="telemetry log of the plant (.mcap)")
    _live_options(emulate, tuning=False)
    emulate.set_defaults(handler=_emulate)

    control = sub.add_parser("control", help="run the controller against a link")
    _common(control)
    control.add_argument("--connect", help="emulator endpoint (sets link.type = zmq)")
    control.add_argument("--link", choices=sorted(links()),
                         help="sets link.type")
    control.add_argument("--log", help="telemetry log (.mcap); default runs/<config>-control.mcap")
    control.add_argument("--estop-endpoint", default="ipc:///tmp/hilrig-estop",
                         help="where `hil estop` reaches this controller ('' to disable)")
    _live_options(control, tuning=True)
    control.set_defaults(handler=_control)

    fault = sub.add_parser("fault", help="inject a fault into a running emulator")
    fault.add_argument("kind", choices=("jam", "clear"))
    fault.add_argument("--joint", type=int, required=True, help="1-based joint")
    fault.add_argument("--duration", type=float, default=0.1, help="jamming phase, s (jam)")
    fault.add_argument("--connect", default="ipc:///tmp/hilrig-emulator", help="emulator endpoint")
    fault.add_argument("--timeout", type=float, default=2.0, help="s to wait for the ack")
    fault.set_defaults(handler=_fault)

    log = sub.add_parser("log", help="telemetry logs (.mcap) of real-time runs")
    log_sub = log.add_subparsers(dest="log_command", required=True)
    export = log_sub.add_parser("export", help="write the log as the .npz of hil sim, plus "
                                               "its timing arrays")
    export.add_argument("log", help="telemetry log (.mcap)")
    export.add_argument("--out", required=True, help="output .npz")
    export.set_defaults(handler=_logs)
    plot = sub.add_parser("plot", help="draw a telemetry log: joints, commands, timing, faults")
    plot.add_argument("log", help="telemetry log (.mcap)")
    plot.add_argument("--out", help="output PNG (default: LOG with .png)")
    plot.set_defaults(handler=_logs)
    estop = sub.add_parser("estop", help="e-stop a running `hil control`: drives disabled")
    estop.add_argument("--connect", default="ipc:///tmp/hilrig-estop",
                       help="the controller's --estop-endpoint")
    estop.add_argument("--timeout", type=float, default=2.0, help="s to wait for the ack")
    estop.set_defaults(handler=_estop)
    tune = sub.add_parser("set", help="change parameters of a running `hil run` or `hil "
                                      "control` (gains, target, reference, safety limits)")
    tune.add_argument("assignments", nargs="*", metavar="KEY=VALUE",
                      help="config keys, e.g. controller.kp=80 (none: list the live ones)")
    tune.add_argument("--connect", default=None,
                      help="the run's --set-endpoint (default ipc:///tmp/hilrig-set)")
    tune.add_argument("--timeout", type=float, default=5.0, help="s to wait for the ack")
    tune.set_defaults(handler=_set)
    configs = sub.add_parser("configs", help="list the built-in configs (`hil run NAME` runs one)")
    configs.add_argument("--show", metavar="NAME", help="print this config's TOML text")
    configs.set_defaults(handler=_configs)
    warmup = sub.add_parser("warmup", help="compile ahead the kernels every command needs")
    warmup.add_argument("configs", nargs="*",
                        help="configs, paths or built-in names (default: every built-in one)")
    warmup.add_argument("--prune", action="store_true",
                        help="remove the cached kernels of other source versions")
    warmup.set_defaults(handler=_warmup)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="hil: %(message)s")
    terminate_as_interrupt()
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"hil: config error: {exc}", file=sys.stderr)
        return 2


def _common(parser) -> None:
    parser.add_argument("config", help=CONFIG_HELP)
    parser.add_argument("--duration", type=float, help="override sim.duration, s")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override any config key")


def _live_options(parser, tuning: bool) -> None:
    from hilrig.rt.live import DEFAULT_ADDRESS
    from hilrig.rt.tuning import DEFAULT_ENDPOINT

    parser.add_argument("--live", nargs="?", const=DEFAULT_ADDRESS, metavar="HOST:PORT",
                        help=f"serve a live view to Foxglove (default {DEFAULT_ADDRESS})")
    parser.add_argument("--live-allow-remote", action="store_true",
                        help="let --live bind a non-loopback address")
    if tuning:
        parser.add_argument("--set-endpoint", default=DEFAULT_ENDPOINT,
                            help="where `hil set` reaches this run ('' to disable)")


def _live_hooks(args, run_has_params: bool = True) -> list:
    """The hooks of --live, --set-endpoint and --watch (rt.live_params, rt.tuning, rt.live,
    rt.watch), in the order they start."""
    hooks, live = [], None
    endpoint = getattr(args, "set_endpoint", "")
    if run_has_params and (endpoint or args.live):
        from hilrig.rt.live_params import LiveParameters

        live = LiveParameters()
        hooks.append(live)
    if live is not None and endpoint:
        from hilrig.rt.tuning import TuningServer

        hooks.append(TuningServer(endpoint, live))
    if args.live:
        from hilrig.rt.live import LiveView, parse_address

        hooks.append(LiveView(*parse_address(args.live, args.live_allow_remote), live))
    if getattr(args, "watch", False):
        from hilrig.rt.watch import Watch

        hooks.append(Watch())
    return hooks


def _load(args, extra=()) -> Config:
    overrides = list(args.set) + list(extra)
    if args.duration is not None:
        overrides.append(f"sim.duration={args.duration!r}")
    if getattr(args, "rate", None):
        overrides.append(f"sim.dt={1.0 / args.rate!r}")
    return load(args.config, overrides)


def _default_log(args, suffix: str = "") -> Path:
    return Path("runs") / f"{Path(args.config).stem}{suffix}.mcap"


def _run(args) -> int:
    from hilrig.rt.session import Session
    from hilrig.timing.summary import format_summary

    cfg = _load(args)
    log_path = Path(args.log) if args.log else _default_log(args)
    hooks = _live_hooks(args)
    try:
        session = Session(cfg, log_path, fast=args.fast, hooks=hooks)
        result = session.run()
    finally:
        for hook in hooks:
            getattr(hook, "close", lambda: None)()
    print(f"{cfg.plant.model}: {result.ticks} ticks at {1.0 / cfg.sim.dt:g} Hz "
          f"({'fast' if args.fast else 'real time'}), ended: {result.reason}")
    for event in result.events:
        if event["kind"] in ("jam", "clear"):
            print(f"  {event['kind']} joint {event['joint']} at tick {event['tick']} "
                  f"(t = {event['t']:.4f} s)")
    print(format_summary(result.summary))
    print(f"wrote {result.log}")
    if not args.no_plot:
        _plot_log(result.log, args.plot)
    return {"ok": 0, "interrupted": 130}.get(result.status, 1)


def _emulate(args) -> int:
    from hilrig.devices.zmq_plant import Emulator

    extra = [f"emulator.mode={args.mode}"] if args.mode else []
    cfg = _load(args, extra)
    if cfg.link.type in ("canopen", "serial"):
        return _emulate_drives(cfg)
    endpoint = args.bind or cfg.link.endpoint
    if args.live and not args.log:
        raise ConfigError("--live: the live view shows the emulator's telemetry; add --log PATH")
    hooks = _live_hooks(args, run_has_params=False)
    emulator = Emulator(cfg, endpoint, args.log)
    try:
        for hook in hooks:
            hook.start(emulator)
    except BaseException:
        emulator.close("live view failed")
        raise
    print(f"emulating {cfg.plant.model} ({emulator.nact} axes, "
          f"{1.0 / emulator.h:g} Hz, {emulator.mode}) on {endpoint}", flush=True)
    reason = "closed"
    try:
        reason = emulator.serve(cfg.sim.duration if args.duration is not None else None)
    finally:
        for hook in hooks:
            hook.stop()
        emulator.close(reason)
    print(f"emulator stopped at tick {emulator.tick}: {reason}")
    return 1 if emulator.failed else 0


def _emulate_drives(cfg: Config) -> int:
    """Emulated drives on the wire the config's link uses (CAN bus or serial pty)."""
    import threading

    stop = threading.Event()
    kind = cfg.link.type
    if kind == "canopen":
        from hilrig.devices.cia402_drive import serve

        can = cfg.link.canopen
        where = f"CAN {can.interface}:{can.channel}"
        run = lambda: serve(cfg, stop_event=stop)          # noqa: E731
    else:
        from hilrig.devices.roboclaw_drive import serve

        where = f"serial pty {cfg.link.serial.port}"
        run = lambda: serve(cfg, cfg.link.serial.port, stop)   # noqa: E731
    print(f"emulating {cfg.plant.model} behind {kind} drives on {where}", flush=True)
    try:
        run()
    except KeyboardInterrupt:
        stop.set()
    print("emulated drives stopped")
    return 0


def _control(args) -> int:
    from hilrig.drivers.registry import link_from_config
    from hilrig.rt.loop import LinkLoop
    from hilrig.timing.summary import format_summary

    extra = []
    if args.connect:
        extra += ["link.type=zmq", f"link.endpoint={args.connect!r}"]
    if args.link:
        extra.append(f"link.type={args.link}")
    cfg = _load(args, extra)
    log_path = Path(args.log) if args.log else _default_log(args, "-control")
    result = LinkLoop(cfg, link_from_config(cfg), log_path, args.estop_endpoint or None,
                      hooks=_live_hooks(args)).run()
    print(f"controller over {cfg.link.type}: {result.ticks} ticks, ended: {result.reason}")
    print(format_summary(result.summary))
    print(f"wrote {result.log}")
    if result.status == "error":
        print(f"hil: {result.reason}", file=sys.stderr)
    return {"ok": 0, "interrupted": 130}.get(result.status, 1)


def _fault(args) -> int:
    from hilrig.rt.fault import FaultError, send_fault

    try:
        ack = send_fault(args.connect, args.kind, args.joint, args.duration, args.timeout)
    except FaultError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        return 1
    what = "jammed" if args.kind == "jam" else "cleared"
    print(f"joint {args.joint} {what} at tick {ack.tick} (plant time {ack.time:.6f} s)")
    return 0


def _estop(args) -> int:
    from hilrig.rt.fault import FaultError, send_estop

    try:
        tick = send_estop(args.connect, args.timeout)
    except FaultError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        return 1
    print(f"e-stop: the controller stopped its drives at tick {tick}")
    return 0


def _set(args) -> int:
    from hilrig.rt.tuning import DEFAULT_ENDPOINT, TuningError, parse_assignments, send_request

    endpoint = args.connect or DEFAULT_ENDPOINT
    try:
        if not args.assignments:
            values = send_request(endpoint, {"get": True}, args.timeout)["values"]
            for key, value in values.items():
                print(f"{key} = {value}")
            return 0
        parse_assignments(args.assignments)          # a malformed item: exit 2 here
        ack = send_request(endpoint, {"set": args.assignments}, args.timeout)
    except TuningError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        return 1
    changes = ", ".join(f"{k} = {v}" for k, v in ack["changes"].items())
    print(f"{changes}: taken at tick {ack['tick']} (plant time {ack['t']:.6f} s)")
    return 0


def _warmup(args) -> int:
    from hilrig.rt.warmup import format_report, prune, warm_up

    report = warm_up(args.configs or None, progress=lambda text: print(text, flush=True))
    print(format_report(report))
    if args.prune and report.cache_dir is not None:
        for path in prune(report.cache_dir):
            print(f"removed {path}")
    return 0


def _logs(args) -> int:
    """hil log export / hil plot: a missing or broken log exits 2 with the cause."""
    from hilrig.telemetry.logfile import LogError

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
    from hilrig.telemetry.logfile import export_npz

    arrays = export_npz(args.log, args.out)
    t = arrays["t"]
    span = f", t = {t[0]:g} .. {t[-1]:g} s" if len(t) else ""
    print(f"wrote {args.out}: {len(t)} rows{span}, {len(arrays['jam_events'])} jam(s)")
    return 0


def _plot(args) -> int:
    _plot_log(Path(args.log), args.out)
    return 0


def _plot_log(log_path: Path, png) -> None:
    """Draw a telemetry log to ``png`` (default: the log's path with .png); LogError if
    it has nothing to plot."""
    from hilrig.rt.plot import LOG_GROUPS, plot_log
    from hilrig.telemetry.logfile import LogError, run_arrays

    arrays, events = run_arrays(log_path)
    missing = [name for name in LOG_GROUPS if name not in arrays]
    if missing:
        raise LogError(f"{log_path}: no {', '.join(missing)} in the log: nothing to plot")
    if not len(arrays["t"]):
        raise LogError(f"{log_path}: no rows: nothing to plot")
    out = Path(png) if png else log_path.with_suffix(".png")
    plot_log(arrays, events, out)
    print(f"wrote {out}")


def _configs(args) -> int:
    """hil configs: the built-in configs, one per line with its description, and where
    they are; with --show NAME, that config's text (to copy and edit)."""
    from hilrig.rt import builtin_configs

    if args.show:
        print(builtin_configs.text(args.show), end="")
        return 0
    names = builtin_configs.names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {builtin_configs.description(name)}")
    print(f"(files in {builtin_configs.directory()}; `hil configs --show NAME` prints one)")
    return 0


def _sim(args) -> int:
    from hilrig.rt.plot import plot_run
    from hilrig.rt.sim import SimulationError, simulate

    if (args.config is None) == (args.replay is None):
        raise ConfigError("hil sim: give a CONFIG, or --replay LOG (not both)")
    overrides = list(args.set)
    if args.duration is not None:
        overrides.append(f"sim.duration={args.duration!r}")
    if args.dt is not None:
        overrides.append(f"sim.dt={args.dt!r}")
    if args.replay is not None and (args.set or args.dt is not None):
        raise ConfigError("hil sim --replay: the log's config runs as it was (only --duration)")
    status = 0
    try:
        if args.replay is not None:
            run, cfg = _replay(args)
        else:
            cfg = load(args.config, overrides)
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
        print(f"{cfg.plant.model}: {simulated:g} s simulated, {len(arrays['t'])} rows, "
              f"{cfg.sim.integrator} dt={cfg.sim.dt:g} s; stepping took "
              f"{run.stepping_seconds * 1e3:.1f} ms ({speed:.0f}x real time), "
              f"start-up {run.startup_seconds * 1e3:.0f} ms")
    _print_summary(arrays)
    print(f"wrote {out}")
    if args.plot:
        plot_run(arrays, args.plot)
        print(f"wrote {args.plot}")
    return status


def _replay(args):
    """hil sim --replay LOG: the log's run again, its live changes at their ticks."""
    from hilrig.rt.replay import replay_log
    from hilrig.rt.watch import progress_line
    from hilrig.telemetry.logfile import LogError

    try:
        run, cfg = replay_log(args.replay, args.duration, progress_line())
    except LogError as exc:
        raise ConfigError(str(exc)) from None
    print(f"replayed {args.replay}: {len(run.arrays['param_ticks'])} live change(s)")
    return run, cfg


def _print_summary(arrays: dict) -> None:
    q = arrays["q"][-1]
    print("final q = [" + ", ".join(f"{v:.6g}" for v in q) + "]")
    if "residual" in arrays:
        print(f"max residual = {arrays['residual'].max():.3g} m^2")
    for joint, t1, t2 in arrays["jam_events"]:
        print(f"joint {int(joint)} jammed at t = {t1:g} s, blocked from t = {t2:g} s")


if __name__ == "__main__":
    sys.exit(main())
