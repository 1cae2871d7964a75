"""The commands that reach a running process: ``hil fault`` (an emulator's joints),
``hil estop`` (controllers' drives off), ``hil set`` (a run's live parameters).

All three address the run the same way (cli.options.add_run_address): ``--run RUN_ID``
(the id a run prints when it starts; ``hil estop --list``) or ``--connect ENDPOINT``,
and ``--timeout S``; ``hil estop`` takes the run id as a positional too.

    hil estop                 e-stop every running `hil control` of this user (all at
                              once: one that does not answer delays no other)
    hil estop RUN_ID          e-stop that run (or --run RUN_ID)
    hil estop --list          run id, pid, endpoints, config, start time of each run
    hil estop --connect EP    e-stop the controller serving the e-stop endpoint EP
    hil estop --category 0|1|2  the IEC 60204-1 stop category (default 0, what it always
                              did: power removed at once; 1: the drives bring the joints
                              to rest within safety.stop_time, then power removed; 2: to
                              rest, then held with power kept until the run ends)
    hil set KEY=VALUE ...     change live parameters of your only run, --run's or --connect's
    hil fault KIND --joint J [--duration S] [--channel C] [PARAM=VALUE ...]
                              start a fault (docs/FAULTS.md: jam, an actuator or sensor
                              kind) on joint J of a running `hil run` (--run RUN_ID) or
                              emulator (--connect ENDPOINT), or `clear` its faults; with
                              neither, the emulator at the default endpoint, else your
                              only `hil run`
    hil fault LINK_KIND [--joint J] [--duration S] [PARAM=VALUE ...]
                              a link fault (docs/LINK_FAULTS.md: drop, delay, corrupt, ...)
                              in the emulator's device (`hil emulate`, --connect); a kind
                              it does not take is refused in one line naming who does

A `hil run` takes faults through its `hil set` endpoint (live.tuning); a `hil control`
takes none (its plant is behind a link: faults go to its emulator, `hil emulate`).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hilrig.cli.options import add_run_address, run_address
from hilrig.errors import ConfigError


def register(commands) -> None:
    commands.add("fault", "inject a fault into a running `hil run` or emulator", _declare_fault)
    commands.add("estop", "e-stop running `hil control` runs: drives disabled (default: "
                          "every run of yours)", _declare_estop)
    commands.add("set", "change parameters of a running `hil run` or `hil control` (gains, "
                        "target, reference, safety limits)", _declare_set)


def _declare_fault(parser) -> None:
    from hilrig.remote.client import DEFAULT_ENDPOINT

    from hilrig.plant.faults import CHANNELS, KINDS

    parser.add_argument("kind", choices=tuple(KINDS), metavar="KIND",
                        help="jam, clear, an actuator, sensor or link fault (docs/FAULTS.md, "
                             "docs/LINK_FAULTS.md)")
    parser.add_argument("params", nargs="*", metavar="PARAM=VALUE",
                        help="the kind's parameters (docs/FAULTS.md; unset: its defaults)")
    parser.add_argument("--joint", type=int, default=None,
                        help="1-based joint (required but for a link fault, whose default "
                             "0 is every drive)")
    parser.add_argument("--duration", type=float, default=None,
                        help="s: how long the fault lasts (default: until cleared); a jam's "
                             "jamming phase (default 0.1)")
    parser.add_argument("--channel", choices=tuple(CHANNELS), default="position",
                        help="a sensor fault's channel")
    add_run_address(parser, connect_help=f"emulator endpoint (default {DEFAULT_ENDPOINT}, "
                                         "else your only `hil run`)")
    parser.set_defaults(handler=_fault, trailing="params")     # PARAM=VALUE after the options


def _declare_estop(parser) -> None:
    add_run_address(parser, positional=True,
                    connect_help="the e-stop endpoint of one controller (instead of a run id)")
    parser.add_argument("--list", action="store_true", help="list your running controllers")
    parser.add_argument("--category", type=int, choices=(0, 1, 2), default=0,
                        help="IEC 60204-1 stop category: 0 power removed at once (default), 1 "
                             "controlled stop within safety.stop_time then power removed, 2 "
                             "controlled stop, power kept (holding)")
    parser.set_defaults(handler=_estop)


def _declare_set(parser) -> None:
    parser.add_argument("assignments", nargs="*", metavar="KEY=VALUE",
                        help="config keys, e.g. controller.kp=80 (none: list the live ones)")
    add_run_address(parser, timeout=5.0,
                    connect_help="the run's --set-endpoint (instead of --run)")
    parser.set_defaults(handler=_set)


def _fault(args) -> int:
    """hil fault: FaultError or TuningError (exit 1) when the emulator or run refuses or
    does not answer."""
    from hilrig.remote.client import DEFAULT_ENDPOINT
    from hilrig.remote.fault import send_fault

    from hilrig.devices.link_faults import parse_params as parse_link_params
    from hilrig.plant.faults import KINDS, LINK, parse_params

    link = KINDS[args.kind].family == LINK
    if args.joint is None and not link:
        raise ConfigError(f"{args.kind}: --joint J is required (1-based)")
    joint = args.joint or 0
    try:
        params = (parse_link_params if link else parse_params)(args.kind, args.params)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    address = run_address(args)
    run_endpoint = _fault_run_endpoint(address, DEFAULT_ENDPOINT)
    if run_endpoint is not None and link:
        raise ConfigError(f"{args.kind} is a link fault: a `hil run` has no link; it acts in "
                          "the emulated devices of `hil emulate` under `hil control` "
                          "(--connect ENDPOINT, the emulator's --bind)")
    if run_endpoint is not None:
        from hilrig.live.tuning import send_request

        fault = {"kind": args.kind, "joint": args.joint, "duration": args.duration,
                 "params": params, "channel": args.channel}
        reply = send_request(run_endpoint, {"fault": fault}, address.timeout)
        tick, time = int(reply["tick"]), float(reply["t"])
    else:
        ack = send_fault(address.endpoint or DEFAULT_ENDPOINT, args.kind, joint,
                         args.duration, address.timeout, params, args.channel)
        tick, time = ack.tick, ack.time
    what = {"jam": "jammed", "clear": "cleared"}.get(args.kind, f"{args.kind} started")
    where = f"joint {joint}" if joint or not link else "link"
    if tick < 0:      # emulated drives with no controller stepping them yet
        print(f"{where} {args.kind} queued: it starts at the drives' next tick")
    else:
        print(f"{where} {what} at tick {tick} (plant time {time:.6f} s)")
    return 0


def _fault_run_endpoint(address, emulator: str) -> str | None:
    """The `hil set` endpoint of the `hil run` a fault goes to, or None for an emulator:
    --run's; with no address, your only `hil run` when no emulator serves ``emulator``."""
    from hilrig.drivers.endpoint import expand
    from hilrig.remote import runs

    if address.run_id is not None:
        run = runs.find_run(address.run_id)
        if run.endpoint:
            raise ConfigError(f"run {run.run_id} is a `hil control`: its plant is behind a "
                              "link, so faults go to its emulator (--connect ENDPOINT, the "
                              "emulator's --bind)")
        if not run.set_endpoint:
            raise ConfigError(f"run {run.run_id} takes no live faults (started with "
                              "--set-endpoint '')")
        return run.set_endpoint
    emulator = expand(emulator)
    if address.endpoint is not None or not emulator.startswith("ipc://") \
            or Path(emulator[len("ipc://"):]).exists():
        return None
    candidates = runs.fault_runs()
    if len(candidates) == 1:
        return candidates[0].set_endpoint
    if candidates:
        raise ConfigError(f"no emulator at {emulator} and several `hil run`s: name one with "
                          "--run " + " or ".join(run.run_id for run in candidates))
    from hilrig.remote.fault import FaultError

    raise FaultError(f"no emulator at {emulator} (is `hil emulate` running?) and no `hil run` "
                     "of yours takes live faults")


def _estop(args) -> int:
    """hil estop: 0 when every targeted run acknowledged; FaultError (exit 1) naming those
    that did not, once the others are stopped, or when there is none to stop."""
    from hilrig.remote import runs
    from hilrig.remote.fault import STOP_CATEGORIES, FaultError, send_estop

    address = run_address(args)
    if args.list:
        _list_runs(runs.list_runs(), runs.login_session())
        return 0
    if address.endpoint:
        targets = [(address.endpoint, address.endpoint)]
    elif address.run_id:
        run = runs.find_run(address.run_id)
        if not run.endpoint:
            raise ConfigError(f"run {run.run_id} has no e-stop endpoint (a `hil run`: Ctrl-C "
                              "stops it)")
        targets = [(f"run {run.run_id}", run.endpoint)]
    else:
        targets = [(f"run {run.run_id}", run.endpoint) for run in runs.list_runs()
                   if run.endpoint]
        if not targets:
            raise FaultError("no running `hil control` of yours to e-stop (hil estop "
                             "--connect ENDPOINT for one started elsewhere)")
    failed = []
    # every run at once: a hung run must not delay a healthy one's stop by its timeout
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        sent = [(name, endpoint, pool.submit(send_estop, endpoint, address.timeout,
                                             args.category))
                for name, endpoint in targets]
        for name, endpoint, answer in sent:      # printed in the run list's order
            try:
                tick = answer.result()
            except FaultError as exc:
                failed.append(f"{name}: {exc}")
                continue
            who = "the controller" if name == endpoint else name
            if args.category == 0:
                print(f"e-stop: {who} stopped its drives at tick {tick}", flush=True)
            else:
                print(f"e-stop: {who} began a category {args.category} stop "
                      f"({STOP_CATEGORIES[args.category]}) at tick {tick}", flush=True)
    if failed:
        raise FaultError("; ".join(failed))
    return 0


def _list_runs(found: list, session: int | None) -> None:
    """hil estop --list: one line per run of this user (remote.runs.Run), those of this
    login session (``session``) marked *."""
    if not found:
        print("no running `hil run` or `hil control` of yours")
        return
    print(f"{'run id':<8} {'pid':>7}  {'started':<19}  {'config':<24} e-stop endpoint "
          "(- for a `hil run`: Ctrl-C) | hil set endpoint | login session (* this one)")
    for run in found:
        print(f"{run.run_id:<8} {run.pid:>7}  {run.started:<19}  {run.config:<24} "
              f"{run.endpoint or '-'} | {run.set_endpoint or '-'} | "
              f"{'-' if run.session is None else run.session}"
              f"{'*' if session is not None and run.session == session else ''}")


def _set(args) -> int:
    """hil set: TuningError (exit 1) when the run refuses the change or does not answer."""
    from hilrig.live.tuning import parse_assignments, send_request
    from hilrig.remote import runs

    address = run_address(args)
    endpoint = address.endpoint or runs.tunable_run(address.run_id).set_endpoint
    if not args.assignments:
        values = send_request(endpoint, {"get": True}, address.timeout)["values"]
        for key, value in values.items():
            print(f"{key} = {value}")
        return 0
    parse_assignments(args.assignments)          # a malformed item: exit 2 here
    ack = send_request(endpoint, {"set": args.assignments}, address.timeout)
    changes = ", ".join(f"{k} = {v}" for k, v in ack["changes"].items())
    print(f"{changes}: taken at tick {ack['tick']} (plant time {ack['t']:.6f} s)")
    return 0
