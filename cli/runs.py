"""The commands that run a loop: ``hil sim`` (offline), ``hil run`` (controller and
plant in this process), ``hil emulate`` (the plant for other processes), ``hil control``
(the controller against a link), with what they share: the live view and tuning
(``--live``, ``--set-endpoint``, ``--watch``), ``--log-errors``, and the run list
(remote.runs) that ``hil estop`` and ``hil set`` find a run in.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from hilrig.cli.exits import run_exit_code
from hilrig.cli.options import add_config, add_duration, add_set, output_path, positive
from hilrig.errors import ConfigError


def register(commands) -> None:
    commands.add("sim", "run a scenario offline, as fast as it can", _declare_sim)
    commands.add("run", "controller and plant in this process, in real time", _declare_run)
    commands.add("emulate", "serve the plant: over ZeroMQ, or behind emulated drives when "
                            "link.type is canopen or serial", _declare_emulate)
    commands.add("control", "run the controller against a link", _declare_control)


def _declare_sim(parser) -> None:
    add_config(parser, nargs="?")
    parser.add_argument("--replay", metavar="LOG",
                        help="replay a real-time run's log (its config and live changes)")
    add_duration(parser)
    parser.add_argument("--dt", type=float, help="override sim.dt (fixed step), s")
    add_set(parser)
    parser.add_argument("--out", required=True, help="output .npz")
    parser.add_argument("--plot", help="also draw the run to this PNG")
    parser.add_argument("--log", help="also write the run as a telemetry log (.mcap), as hil "
                                      "run's: Foxglove opens it with the same layout")
    parser.set_defaults(handler=_sim)


def _declare_run(parser) -> None:
    _config_options(parser)
    parser.add_argument("--fast", action="store_true", help="as fast as it can (lockstep)")
    parser.add_argument("--rate", type=float, help="loop rate, Hz (sets sim.dt = 1/rate)")
    parser.add_argument("--log", help="telemetry log (.mcap); default runs/<config>.mcap")
    parser.add_argument("--plot", help="plot PNG; default next to the log")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    _log_errors(parser)
    parser.add_argument("--watch", action="store_true",
                        help="keep a status block current in the terminal")
    _live_options(parser, tuning=True)
    parser.set_defaults(handler=_run)


def _declare_emulate(parser) -> None:
    _config_options(parser)
    parser.add_argument("--bind", default=None,
                        help="endpoint (default link.endpoint, ipc://$RUNTIME/emulator: "
                             "$RUNTIME is your runtime folder); emulated drives (link.type "
                             "canopen, serial) serve `hil fault`'s link faults there, only "
                             "when it is given")
    parser.add_argument("--mode", choices=("free", "lockstep"), help="sets emulator.mode")
    parser.add_argument("--log", help="telemetry log of the plant (.mcap)")
    _live_options(parser, tuning=False)
    parser.set_defaults(handler=_emulate)


def _declare_control(parser) -> None:
    from hilrig.drivers.registry import links

    _config_options(parser)
    parser.add_argument("--connect", help="emulator endpoint (sets link.type = zmq)")
    parser.add_argument("--link", choices=sorted(links()), help="sets link.type")
    parser.add_argument("--log",
                        help="telemetry log (.mcap); default runs/<config>-control.mcap")
    parser.add_argument("--estop-endpoint", default=None,
                        help="where `hil estop` reaches this controller (default: one of "
                             "its own in the per-user runtime folder; '' to disable)")
    parser.add_argument("--takeover", action="store_true",
                        help="command the emulator's plant even while another controller "
                             "is connected (logged by the emulator)")
    _log_errors(parser)
    _live_options(parser, tuning=True)
    parser.set_defaults(handler=_control)


def _config_options(parser) -> None:
    """CONFIG, --duration and --set of run, emulate and control (read by ``_load``)."""
    add_config(parser)
    add_duration(parser)
    add_set(parser)


def _log_errors(parser) -> None:
    parser.add_argument("--log-errors", choices=("stop", "continue"), default="stop",
                        help="when the log cannot be written (a full disk): stop the run "
                             "safely (default) or go on unlogged")


def _live_options(parser, tuning: bool) -> None:
    from hilrig.live.foxglove import DEFAULT_ADDRESS, DEFAULT_RATE

    parser.add_argument("--live", nargs="?", const=DEFAULT_ADDRESS, metavar="HOST:PORT",
                        help=f"serve a live view to Foxglove (default {DEFAULT_ADDRESS})")
    parser.add_argument("--live-allow-remote", action="store_true",
                        help="let --live bind a non-loopback address")
    parser.add_argument("--live-rate", action="append", metavar="HZ|TOPIC=HZ",
                        help=f"messages a second per --live channel (default {DEFAULT_RATE:g}; "
                             "the loop's rate or more: every row); TOPIC=HZ for one channel, "
                             "e.g. /hil/timing=1000 or /hil/frames=30 (the 3D frames); "
                             "repeatable")
    if tuning:
        parser.add_argument("--set-endpoint", default=None,
                            help="where `hil set` reaches this run (default: one of its own "
                                 "in the per-user runtime folder; '' to disable)")


def _set_endpoint(args, run_id: str) -> str:
    """Where `hil set` reaches run ``run_id``: --set-endpoint, else its own (remote.runs);
    "" for none."""
    from hilrig.remote import runs

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
    if args.live_rate and not args.live:
        raise ConfigError("--live-rate: it sets the rates of --live, which is not given")
    if args.live:
        from hilrig.live.foxglove import LiveView, parse_address, parse_rates

        hooks.append(LiveView(*parse_address(args.live, args.live_allow_remote), live,
                              parse_rates(args.live_rate)))
    if getattr(args, "watch", False):
        from hilrig.live.watch import Watch

        hooks.append(Watch())
    return hooks


def _load(args, extra=()):
    """The config of run, emulate or control: CONFIG with --set, --duration, --rate and
    ``extra`` applied; ConfigError for a bad option or a config this command cannot run."""
    from hilrig.settings.config import load, refuse_link_faults, refuse_offline_only

    overrides = list(args.set) + list(extra)
    positive("--duration", args.duration, "s")
    if args.duration is not None:
        overrides.append(f"sim.duration={args.duration!r}")
    rate = getattr(args, "rate", None)
    positive("--rate", rate, "Hz")
    if rate is not None:
        overrides.append(f"sim.dt={1.0 / rate!r}")
    cfg = load(args.config, overrides)
    refuse_offline_only(cfg, args.command)
    if args.command == "run":
        refuse_link_faults(cfg, args.command)
    return cfg


def _log_path(args, suffix: str = "") -> Path:
    """--log (checked: cli.options.output_path), else runs/<config><suffix>.mcap."""
    if args.log:
        return output_path("--log", args.log)
    return Path("runs") / f"{Path(args.config).stem}{suffix}.mcap"


def _run(args) -> int:
    cfg = _load(args)        # a mistake in it is one line before any kernel is imported
    log_path = _log_path(args)
    if args.plot:
        output_path("--plot", args.plot, (".png",))
    from hilrig.cli.logs import plot_log
    from hilrig.remote import runs
    from hilrig.rt.loop_ahead import LoopAhead
    from hilrig.rt.session import Session
    from hilrig.timing.summary import format_summary

    run_id = runs.new_run_id()
    set_endpoint = _set_endpoint(args, run_id)
    hooks = _live_hooks(args, set_endpoint)
    record = runs.register(run_id, "", args.config, set_endpoint) if set_endpoint else None
    if set_endpoint:
        print(f"run {run_id}: `hil set --run {run_id} KEY=VALUE` tunes it ({set_endpoint}); "
              f"`hil fault jam --run {run_id} --joint K` jams a joint", flush=True)

    ahead = LoopAhead.arm(cfg, args.fast)     # the loop compiled in a second process

    def finish() -> None:
        if ahead is not None:
            ahead.stop()
        for hook in hooks:
            getattr(hook, "close", lambda: None)()
        if record is not None:
            runs.unregister(record)

    def report(result) -> None:
        print(f"{cfg.plant.model}: {result.ticks} ticks at {1.0 / cfg.sim.dt:g} Hz "
              f"({'fast' if args.fast else 'real time'}), ended: {result.reason}")
        for event in result.events:
            if event["kind"] in ("jam", "clear"):
                print(f"  {event['kind']} joint {event['joint']} at tick {event['tick']} "
                      f"(t = {event['t']:.4f} s)")
        print(format_summary(result.summary))
        failure = result.summary.get("log_failure")
        print(f"wrote {result.log}" + (" (incomplete: writing it failed)" if failure else ""))

    def abandoned(result) -> None:     # the law watchdog's end (rt.law_watchdog): no plot
        finish()
        report(result)

    try:
        session = Session(cfg, log_path, fast=args.fast, log_errors=args.log_errors,
                          hooks=hooks, on_abandon=abandoned, ahead=ahead)
        result = session.run()
    finally:
        finish()
    report(result)
    failure = result.summary.get("log_failure")
    if not args.no_plot and result.ticks and not failure:
        plot_log(result.log, args.plot)
    return run_exit_code(result.status)


def _emulate(args) -> int:
    extra = [f"emulator.mode={args.mode}"] if args.mode else []
    cfg = _load(args, extra)     # a mistake in it is one line before any kernel is imported
    if args.log:
        output_path("--log", args.log)
    from hilrig.devices.zmq_plant import Emulator

    if cfg.link.type in ("canopen", "serial"):
        return _emulate_drives(cfg, cfg.sim.duration if args.duration is not None else None,
                               args.log, args.bind)
    from hilrig.timing.summary import format_summary

    from hilrig.drivers.endpoint import expand

    endpoint = expand(args.bind or cfg.link.endpoint)    # the ready line names the socket
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
    reason = "interrupted"      # also for a Ctrl-C right after the ready line
    try:
        print(f"emulating {cfg.plant.model} ({emulator.nact} axes, "
              f"{1.0 / emulator.h:g} Hz, {emulator.mode}) on {endpoint}", flush=True)
        reason = emulator.serve(cfg.sim.duration if args.duration is not None else None)
    except KeyboardInterrupt:
        pass
    finally:
        for hook in hooks:
            hook.stop()
        summary = emulator.close(reason)
    print(f"emulator stopped at tick {emulator.tick}: {summary['reason']}")
    if "ticks_run" in summary:
        print(format_summary(summary))
    print(f"overruns {emulator.overruns}, rejected frames {emulator.rejected}")
    return run_exit_code("error" if emulator.failed or summary.get("lost_rows")
                         else "interrupted" if reason == "interrupted" else "ok")


def _emulate_drives(cfg, duration: float | None, log_path: str | None,
                    fault_endpoint: str | None) -> int:
    """Emulated drives on the wire the config's link uses (CAN bus, serial socket or pty), for
    ``duration`` s (None: until interrupted), the plant's telemetry to ``log_path``, their
    link faults served to `hil fault` on ``fault_endpoint`` (--bind; None: not served).
    The "emulating ..." line comes once the drives are up (booted, or the socket or pty in
    place); Ctrl-C, even right after it, ends with 130 as ``hil run`` does."""
    import threading
    import types

    from hilrig.drivers.endpoint import expand

    stop = threading.Event()
    kind = cfg.link.type
    if kind == "canopen":
        from hilrig.devices.cia402_drive import serve

        can = cfg.link.canopen
        where = f"CAN {can.interface}:{can.channel}"
    else:
        from hilrig.devices.roboclaw_drive import serve
        from hilrig.drivers import protocol_unix

        port = cfg.link.serial.port
        where = f"serial socket {protocol_unix.expanded(port)}" if protocol_unix.is_url(port) \
            else f"serial pty {port}"
    banner = f"emulating {cfg.plant.model} behind {kind} drives on {where}" + \
        (f"; link faults (hil fault) on {expand(fault_endpoint)}" if fault_endpoint else "")
    ready = types.SimpleNamespace(set=lambda: print(banner, flush=True))
    reason = "interrupted"
    try:
        if kind == "canopen":
            reason = serve(cfg, stop_event=stop, ready=ready, duration=duration,
                           log_path=log_path, fault_endpoint=fault_endpoint)
        else:
            reason = serve(cfg, cfg.link.serial.port, stop, duration, log_path, ready,
                           fault_endpoint)
    except KeyboardInterrupt:
        stop.set()
    print(f"emulated drives stopped: {reason}")
    if log_path:
        print(f"wrote {log_path}")
    return run_exit_code("interrupted" if reason == "interrupted" else "ok")


def _control(args) -> int:
    extra = []
    if args.connect:
        extra += ["link.type=zmq", f"link.endpoint={args.connect!r}"]
    if args.link:
        extra.append(f"link.type={args.link}")
    cfg = _load(args, extra)     # a mistake in it is one line before any kernel is imported
    log_path = _log_path(args, "-control")
    from hilrig.drivers.registry import link_from_config
    from hilrig.remote import runs
    from hilrig.rt.loop import LinkLoop
    from hilrig.timing.summary import format_summary

    link = link_from_config(cfg)
    if args.takeover:
        link.takeover = True
    run_id = runs.new_run_id()
    estop = runs.default_estop_endpoint(run_id) if args.estop_endpoint is None \
        else args.estop_endpoint or None
    set_endpoint = _set_endpoint(args, run_id)
    record = None

    def report(result) -> None:
        print(f"controller over {cfg.link.type}: {result.ticks} ticks, ended: {result.reason}")
        print(format_summary(result.summary))
        failure = result.summary.get("log_failure")
        print(f"wrote {result.log}" + (" (incomplete: writing it failed)" if failure else ""))

    def abandoned(result) -> None:     # the law watchdog's end (rt.law_watchdog)
        if record is not None:
            runs.unregister(record)
        report(result)

    loop = LinkLoop(cfg, link, log_path, estop, log_errors=args.log_errors,
                    hooks=_live_hooks(args, set_endpoint), on_abandon=abandoned)
    record = runs.register(run_id, estop or "", args.config, set_endpoint) \
        if estop or set_endpoint else None
    if estop:
        print(f"run {run_id}: `hil estop {run_id}` (or `hil estop`) stops it ({estop})",
              flush=True)
    said = _ErrorsSaid()
    logging.getLogger().addHandler(said)
    try:
        result = loop.run()
    finally:
        logging.getLogger().removeHandler(said)
        if record is not None:
            runs.unregister(record)
    report(result)
    failure = result.summary.get("log_failure")
    if result.status == "error" and result.reason != failure and \
            result.reason not in said.messages:
        print(f"hil: {result.reason}", file=sys.stderr)
    return run_exit_code(result.status)


class _ErrorsSaid(logging.Handler):
    """The messages logged at ERROR or above while it is attached: what stderr already
    shows, so that a run's ending is not said twice (the loop logs a link's failure)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.add(record.getMessage())


def _sim(args) -> int:
    """hil sim: the rows go to --out even when the plant state became invalid (the
    SimulationError is raised after they are written: exit 1, cli.exits)."""
    from hilrig.settings.config import load, refuse_link_faults

    if (args.config is None) == (args.replay is None):
        raise ConfigError("hil sim: give a CONFIG, or --replay LOG (not both)")
    overrides = list(args.set)
    if args.duration is not None:
        overrides.append(f"sim.duration={args.duration!r}")
    if args.dt is not None:
        overrides.append(f"sim.dt={args.dt!r}")
    if args.replay is not None and (args.set or args.dt is not None):
        raise ConfigError("hil sim --replay: the log's config runs as it was (only --duration)")
    out = output_path("--out", args.out, (".npz",))
    if args.plot:
        output_path("--plot", args.plot, (".png",))
    if args.log:
        output_path("--log", args.log, (".mcap",))
    # a mistake in the config is one line before any kernel is imported
    cfg = load(args.config, overrides) if args.replay is None else None
    if cfg is not None:
        refuse_link_faults(cfg, "sim")
    import numpy as np
    from hilrig.rt.sim import SimulationError, simulate

    failure = None
    try:
        if args.replay is not None:
            run, cfg = _replay(args)
        else:
            run = simulate(cfg)
        arrays = run.arrays
    except SimulationError as exc:
        arrays, run, failure = exc.arrays, None, exc
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
        from hilrig.analysis.plot import plot_run      # matplotlib: only to plot
        plot_run(arrays, args.plot)
        print(f"wrote {args.plot}")
    if args.log:
        from hilrig.telemetry.offline_log import write_log
        write_log(args.log, cfg, arrays, {"status": "ok"} if failure is None else
                  {"status": "failed", "reason": str(failure)})
        print(f"wrote {args.log}")
    if failure is not None:
        raise failure
    return 0


def _replay(args):
    """hil sim --replay LOG: the log's run again, its live changes at their ticks."""
    from hilrig.live.watch import progress_line
    from hilrig.rt.replay import replay_log
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
