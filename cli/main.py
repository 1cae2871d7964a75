"""The ``hil`` command line.

    hil sim CONFIG [--duration T] [--dt DT] [--set key=value ...] --out run.npz [--plot run.png]
    hil sim --replay LOG [--duration T] --out run.npz
    hil run CONFIG [--duration T] [--fast] [--log PATH] [--set key=value ...] [--live] [--watch]
    hil emulate CONFIG --bind ENDPOINT [--mode free|lockstep] [--log PATH] [--live]
    hil control CONFIG [--connect ENDPOINT] [--link TYPE] [--log PATH] [--live] [--takeover]
    hil set KEY=VALUE ... [--run RUN_ID | --connect ENDPOINT]
    hil canopen eds --node N [CONFIG] [-o FILE]
    hil fault jam --joint K --duration DT --connect ENDPOINT
    hil fault clear --joint K --connect ENDPOINT
    hil estop [RUN_ID | --list | --connect ENDPOINT]
    hil keys [--force]
    hil log export LOG --out run.npz
    hil log repair LOG [--out fixed.mcap]
    hil plot LOG [--out run.png]
    hil configs [--show NAME]
    hil warmup [CONFIG ...] [--prune] [--list] [--jobs N]
    hil analyze modes CONFIG [--set key=value ...] [--json]
    hil analyze stiffness CONFIG [--set ...] [--json] [--map] [--out maps.png]
    hil analyze flex CONFIG [--set ...] [--json] [--out report.png]
    hil campaign SPEC.toml [--scheduler ADDRESS] [--workers N] [--out DIR] [--resume]

CONFIG is a TOML file or the name of a built-in config (``hil configs`` lists them).
A mistake in what was asked (a config, an option) is one line on stderr and exit code
2; anything else is a bug and shows its traceback.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import warnings
from pathlib import Path

import hilrig
import numpy as np
from hilrig.drivers.registry import links
from hilrig.remote import runs
from hilrig.settings.config import ConfigError, load, refuse_offline_only
from hilrig.schema import Config
from hilrig.telemetry.recorder import TelemetryError
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
    _log_errors(run)
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

    canopen_cmd = sub.add_parser("canopen", help="CANopen files of the emulated CiA 402 drives")
    canopen_sub = canopen_cmd.add_subparsers(dest="canopen_command", required=True)
    eds = canopen_sub.add_parser("eds", help="write the EDS (CiA 306) of an emulated drive")
    eds.add_argument("config", nargs="?", default="rig_canopen", help=CONFIG_HELP +
                     "; default rig_canopen")
    eds.add_argument("--node", type=int, required=True, help="the drive's node-id")
    eds.add_argument("-o", "--out", help="output .eds (default: standard output)")
    eds.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override any config key")
    eds.set_defaults(handler=_canopen_eds)

    control = sub.add_parser("control", help="run the controller against a link")
    _common(control)
    control.add_argument("--connect", help="emulator endpoint (sets link.type = zmq)")
    control.add_argument("--link", choices=sorted(links()),
                         help="sets link.type")
    control.add_argument("--log", help="telemetry log (.mcap); default runs/<config>-control.mcap")
    control.add_argument("--estop-endpoint", default=None,
                         help="where `hil estop` reaches this controller (default: one of "
                              "its own in the per-user runtime folder; '' to disable)")
    control.add_argument("--takeover", action="store_true",
                         help="command the emulator's plant even while another controller "
                              "is connected (logged by the emulator)")
    _log_errors(control)
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
    repair = log_sub.add_parser("repair", help="finish a log whose writer was killed: a new "
                                               "MCAP with summary and index, messages in "
                                               "log-time order")
    repair.add_argument("log", help="telemetry log (.mcap) that ends early")
    repair.add_argument("--out", help="output .mcap (default: LOG-repaired.mcap)")
    repair.set_defaults(handler=_repair)
    plot = sub.add_parser("plot", help="draw a telemetry log: joints, commands, timing, faults")
    plot.add_argument("log", help="telemetry log (.mcap)")
    plot.add_argument("--out", help="output PNG (default: LOG with .png)")
    plot.set_defaults(handler=_logs)
    estop = sub.add_parser("estop", help="e-stop running `hil control` runs: drives disabled "
                                         "(default: every run of yours)")
    estop.add_argument("run_id", nargs="?", help="only this run (hil estop --list)")
    estop.add_argument("--list", action="store_true", help="list your running controllers")
    estop.add_argument("--connect", help="the e-stop endpoint of one controller")
    estop.add_argument("--timeout", type=float, default=2.0, help="s to wait for the ack")
    estop.set_defaults(handler=_estop)
    keys = sub.add_parser("keys", help="make the CURVE keys that tcp endpoints require")
    keys.add_argument("--dir", help="key folder (default $HILRIG_KEYS or "
                                    "~/.config/hilrig/keys)")
    keys.add_argument("--force", action="store_true", help="replace existing keys")
    keys.set_defaults(handler=_keys)
    tune = sub.add_parser("set", help="change parameters of a running `hil run` or `hil "
                                      "control` (gains, target, reference, safety limits)")
    tune.add_argument("assignments", nargs="*", metavar="KEY=VALUE",
                      help="config keys, e.g. controller.kp=80 (none: list the live ones)")
    tune.add_argument("--run", dest="run_id", default=None,
                      help="the run's id (printed when it starts; default: your only run)")
    tune.add_argument("--connect", default=None,
                      help="the run's --set-endpoint (instead of --run)")
    tune.add_argument("--timeout", type=float, default=5.0, help="s to wait for the ack")
    tune.set_defaults(handler=_set)
    configs = sub.add_parser("configs", help="list the built-in configs (`hil run NAME` runs one)")
    configs.add_argument("--show", metavar="NAME", help="print this config's TOML text")
    configs.set_defaults(handler=_configs)
    analyze = sub.add_parser("analyze", help="natural frequencies, modes and stiffness")
    analyze_sub = analyze.add_subparsers(dest="what", required=True)
    for what, text in (("modes", "natural frequencies and mode shapes at the configured state"),
                       ("stiffness", "3RRR Cartesian stiffness (and --map: workspace maps)"),
                       ("flex", "paper 002's figures of a flex_rp run (tip, joints, forces)")):
        item = analyze_sub.add_parser(what, help=text)
        item.add_argument("config", help=CONFIG_HELP)
        item.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                          help="override any config key")
        item.add_argument("--json", action="store_true", help="print JSON")
        if what == "stiffness":
            item.add_argument("--map", action="store_true",
                              help="maps of the lowest frequency and stiffness (PNG)")
        if what != "modes":
            item.add_argument("--out", help="PNG (default runs/<config>_stiffness_map.png "
                                            "or runs/<config>_flex.png)")
        item.set_defaults(handler=_analyze)
    warmup = sub.add_parser("warmup", help="compile ahead the kernels every command needs")
    warmup.add_argument("configs", nargs="*",
                        help="configs, paths or built-in names (default: every built-in one)")
    warmup.add_argument("--prune", action="store_true",
                        help="remove the cached kernels of other source versions")
    warmup.add_argument("--list", action="store_true",
                        help="compile nothing: list what the cache holds")
    warmup.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes compiling at once (default: one per CPU)")
    warmup.set_defaults(handler=_warmup)

    campaign = sub.add_parser("campaign", help="run a campaign of scenarios (docs/CAMPAIGNS.md) "
                                                "on Dask: one Parquet table of metrics")
    campaign.add_argument("spec", help="campaign spec (TOML): base config, axes, criteria")
    campaign.add_argument("--scheduler", metavar="ADDRESS",
                          help="a running Dask scheduler (default: a local cluster)")
    campaign.add_argument("--workers", type=int, metavar="N",
                          help="local cluster's worker processes (default: one per core)")
    campaign.add_argument("--out", metavar="DIR",
                          help="output directory (default runs/campaigns/<spec name>)")
    campaign.add_argument("--resume", action="store_true",
                          help="run only the scenarios not yet in --out")
    campaign.set_defaults(handler=_campaign)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="hil: %(message)s")
    terminate_as_interrupt()
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"hil: config error: {exc}", file=sys.stderr)
        return 2
    except TelemetryError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hil: interrupted", file=sys.stderr)
        return 130


def _log_errors(parser) -> None:
    parser.add_argument("--log-errors", choices=("stop", "continue"), default="stop",
                        help="when the log cannot be written (a full disk): stop the run "
                             "safely (default) or go on unlogged")


def _positive(option: str, value: float | None, unit: str) -> None:
    """ConfigError unless ``value`` (an option's) is unset or a finite number > 0."""
    if value is not None and not (math.isfinite(value) and value > 0.0):
        raise ConfigError(f"{option}: expected a finite number > 0 ({unit}), got {value:g}")


def _analyze(args) -> int:
    from hilrig.analysis import modal as analyze
    cfg = load(args.config, list(args.set))
    if args.what == "modes":
        print(analyze.run_modes(cfg, args.json))
    elif args.what == "flex":
        from hilrig.analysis import flex_report
        print(flex_report.run(cfg, args.out, args.json, Path(args.config).stem))
    else:
        print(analyze.run_stiffness(cfg, args.json, args.map, args.out, Path(args.config).stem))
    return 0


def _common(parser) -> None:
    parser.add_argument("config", help=CONFIG_HELP)
    parser.add_argument("--duration", type=float, help="override sim.duration, s")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override any config key")


def _live_options(parser, tuning: bool) -> None:
    from hilrig.live.foxglove import DEFAULT_ADDRESS

    parser.add_argument("--live", nargs="?", const=DEFAULT_ADDRESS, metavar="HOST:PORT",
                        help=f"serve a live view to Foxglove (default {DEFAULT_ADDRESS})")
    parser.add_argument("--live-allow-remote", action="store_true",
                        help="let --live bind a non-loopback address")
    if tuning:
        parser.add_argument("--set-endpoint", default=None,
                            help="where `hil set` reaches this run (default: one of its own "
                                 "in the per-user runtime folder; '' to disable)")


def _set_endpoint(args, run_id: str) -> str:
    """Where `hil set` reaches run ``run_id``: --set-endpoint, else its own (remote.runs);
    "" for none."""
    if args.set_endpoint is None:
        return runs.default_set_endpoint(run_id)
    return args.set_endpoint


def _live_hooks(args, set_endpoint: str = "", run_has_params: bool = True) -> list:
    """The hooks of --live, ``set_endpoint`` (`hil set`) and --watch (live.params,
    live.tuning, live.foxglove, live.watch), in the order they start."""
    hooks, live = [], None
    endpoint = set_endpoint
    if run_has_params and (endpoint or args.live):
        from hilrig.live.params import LiveParameters

        live = LiveParameters()
        hooks.append(live)
    if live is not None and endpoint:
        from hilrig.live.tuning import TuningServer

        hooks.append(TuningServer(endpoint, live))
    if args.live:
        from hilrig.live.foxglove import LiveView, parse_address

        hooks.append(LiveView(*parse_address(args.live, args.live_allow_remote), live))
    if getattr(args, "watch", False):
        from hilrig.live.watch import Watch

        hooks.append(Watch())
    return hooks


def _load(args, extra=()) -> Config:
    overrides = list(args.set) + list(extra)
    _positive("--duration", args.duration, "s")
    if args.duration is not None:
        overrides.append(f"sim.duration={args.duration!r}")
    rate = getattr(args, "rate", None)
    _positive("--rate", rate, "Hz")
    if rate is not None:
        overrides.append(f"sim.dt={1.0 / rate!r}")
    cfg = load(args.config, overrides)
    refuse_offline_only(cfg, args.command)
    return cfg


def _default_log(args, suffix: str = "") -> Path:
    return Path("runs") / f"{Path(args.config).stem}{suffix}.mcap"


def _run(args) -> int:
    from hilrig.rt.session import Session
    from hilrig.timing.summary import format_summary

    cfg = _load(args)
    log_path = Path(args.log) if args.log else _default_log(args)
    run_id = runs.new_run_id()
    set_endpoint = _set_endpoint(args, run_id)
    hooks = _live_hooks(args, set_endpoint)
    record = runs.register(run_id, "", args.config, set_endpoint) if set_endpoint else None
    if set_endpoint:
        print(f"run {run_id}: `hil set --run {run_id} KEY=VALUE` tunes it ({set_endpoint})",
              flush=True)
    try:
        session = Session(cfg, log_path, fast=args.fast, log_errors=args.log_errors,
                          hooks=hooks)
        result = session.run()
    finally:
        for hook in hooks:
            getattr(hook, "close", lambda: None)()
        if record is not None:
            runs.unregister(record)
    print(f"{cfg.plant.model}: {result.ticks} ticks at {1.0 / cfg.sim.dt:g} Hz "
          f"({'fast' if args.fast else 'real time'}), ended: {result.reason}")
    for event in result.events:
        if event["kind"] in ("jam", "clear"):
            print(f"  {event['kind']} joint {event['joint']} at tick {event['tick']} "
                  f"(t = {event['t']:.4f} s)")
    print(format_summary(result.summary))
    failure = result.summary.get("log_failure")
    print(f"wrote {result.log}" + (" (incomplete: writing it failed)" if failure else ""))
    if not args.no_plot and result.ticks and not failure:
        _plot_log(result.log, args.plot)
    return {"ok": 0, "interrupted": 130}.get(result.status, 1)


def _emulate(args) -> int:
    from hilrig.devices.zmq_plant import Emulator

    extra = [f"emulator.mode={args.mode}"] if args.mode else []
    cfg = _load(args, extra)
    if cfg.link.type in ("canopen", "serial"):
        return _emulate_drives(cfg, cfg.sim.duration if args.duration is not None else None,
                               args.log)
    from hilrig.timing.summary import format_summary

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
        summary = emulator.close(reason)
    print(f"emulator stopped at tick {emulator.tick}: {reason}")
    if "ticks_run" in summary:
        print(format_summary(summary))
    print(f"overruns {emulator.overruns}, rejected frames {emulator.rejected}")
    return 1 if emulator.failed else 0


def _emulate_drives(cfg: Config, duration: float | None, log_path: str | None) -> int:
    """Emulated drives on the wire the config's link uses (CAN bus or serial pty), for
    ``duration`` s (None: until interrupted), the plant's telemetry to ``log_path``."""
    import threading

    stop = threading.Event()
    kind = cfg.link.type
    if kind == "canopen":
        from hilrig.devices.cia402_drive import serve

        can = cfg.link.canopen
        where = f"CAN {can.interface}:{can.channel}"
        run = lambda: serve(cfg, stop_event=stop, duration=duration,   # noqa: E731
                            log_path=log_path)
    else:
        from hilrig.devices.roboclaw_drive import serve

        where = f"serial pty {cfg.link.serial.port}"
        run = lambda: serve(cfg, cfg.link.serial.port, stop, duration,   # noqa: E731
                            log_path)
    print(f"emulating {cfg.plant.model} behind {kind} drives on {where}", flush=True)
    reason = "interrupted"
    try:
        reason = run()
    except KeyboardInterrupt:
        stop.set()
    print(f"emulated drives stopped: {reason}")
    if log_path:
        print(f"wrote {log_path}")
    return 0


def _canopen_eds(args) -> int:
    from hilrig.drivers.cia402_eds import eds_text

    cfg = load(args.config, list(args.set) + ["link.type=canopen"])
    text = eds_text(cfg, args.node)
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out} (node {args.node})")
    else:
        sys.stdout.write(text)
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
    link = link_from_config(cfg)
    if args.takeover:
        link.takeover = True
    run_id = runs.new_run_id()
    estop = runs.default_estop_endpoint(run_id) if args.estop_endpoint is None \
        else args.estop_endpoint or None
    set_endpoint = _set_endpoint(args, run_id)
    loop = LinkLoop(cfg, link, log_path, estop, log_errors=args.log_errors,
                    hooks=_live_hooks(args, set_endpoint))
    record = runs.register(run_id, estop or "", args.config, set_endpoint) \
        if estop or set_endpoint else None
    if estop:
        print(f"run {run_id}: `hil estop {run_id}` (or `hil estop`) stops it ({estop})",
              flush=True)
    try:
        result = loop.run()
    finally:
        if record is not None:
            runs.unregister(record)
    print(f"controller over {cfg.link.type}: {result.ticks} ticks, ended: {result.reason}")
    print(format_summary(result.summary))
    failure = result.summary.get("log_failure")
    print(f"wrote {result.log}" + (" (incomplete: writing it failed)" if failure else ""))
    if result.status == "error" and result.reason != failure:
        print(f"hil: {result.reason}", file=sys.stderr)
    return {"ok": 0, "interrupted": 130}.get(result.status, 1)


def _fault(args) -> int:
    from hilrig.remote.fault import FaultError, send_fault

    _positive("--timeout", args.timeout, "s")
    try:
        ack = send_fault(args.connect, args.kind, args.joint, args.duration, args.timeout)
    except FaultError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        return 1
    what = "jammed" if args.kind == "jam" else "cleared"
    print(f"joint {args.joint} {what} at tick {ack.tick} (plant time {ack.time:.6f} s)")
    return 0


def _estop(args) -> int:
    from hilrig.remote.controlplane import estop

    _positive("--timeout", args.timeout, "s")
    return estop(args)


def _keys(args) -> int:
    from hilrig.remote.controlplane import keys

    return keys(args)


def _set(args) -> int:
    from hilrig.live.tuning import TuningError, parse_assignments, send_request

    _positive("--timeout", args.timeout, "s")
    endpoint = args.connect or runs.tunable_run(args.run_id).set_endpoint
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
    from hilrig.cli.warmup import format_cache, format_report, prune, warm_up

    if args.list:
        print(format_cache())
        return 0
    if args.jobs < 1:
        raise ConfigError(f"--jobs: must be at least 1, got {args.jobs}")
    report = warm_up(args.configs or None, progress=lambda text: print(text, flush=True),
                     jobs=args.jobs)
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


def _repair(args) -> int:
    """hil log repair: a finished copy of a log whose writer did not finish."""
    from hilrig.telemetry.logfile import LogError
    from hilrig.telemetry.repair import repair

    log_path = Path(args.log)
    out = Path(args.out) if args.out else log_path.with_name(f"{log_path.stem}-repaired.mcap")
    try:
        report = repair(log_path, out)
    except LogError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        return 2
    print(report.describe())
    return 0


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
    from hilrig.analysis.plot import LOG_GROUPS, plot_log
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
    from hilrig.settings import builtin_configs

    if args.show:
        print(builtin_configs.text(args.show), end="")
        return 0
    names = builtin_configs.names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {builtin_configs.description(name)}")
    print(f"(files in {builtin_configs.directory()}; `hil configs --show NAME` prints one)")
    return 0


def _campaign(args) -> int:
    from hilrig.campaign.runner import CampaignError, command

    try:
        return command(args.spec, args.scheduler, args.workers, args.out, args.resume)
    except CampaignError as exc:
        print(f"hil: {exc}", file=sys.stderr)
        return 2


def _sim(args) -> int:
    from hilrig.analysis.plot import plot_run
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
    from hilrig.live.watch import progress_line
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
