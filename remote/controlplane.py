"""The control-plane commands: ``hil estop`` (one run, every run, ``--list``) and ``hil keys``.

    hil estop                 e-stop every running `hil control` of this user
    hil estop RUN_ID          e-stop that run (its id is printed when it starts)
    hil estop --list          run id, pid, endpoints, config, start time of each run
    hil estop --connect EP    e-stop the controller serving the e-stop endpoint EP
    hil keys [--force]        make the CURVE key pairs that tcp endpoints require
"""
from __future__ import annotations

import sys

from hilrig.drivers import curve
from hilrig.errors import ConfigError
from hilrig.remote import runs
from hilrig.remote.fault import FaultError, send_estop


def estop(args) -> int:
    """``hil estop``: 0 when every targeted run acknowledged, 1 otherwise."""
    if args.list:
        found = runs.list_runs()
        if not found:
            print("no running `hil run` or `hil control` of yours")
            return 0
        print(f"{'run id':<8} {'pid':>7}  {'started':<19}  {'config':<24} e-stop endpoint "
              "(- for a `hil run`: Ctrl-C) | hil set endpoint")
        for run in found:
            print(f"{run.run_id:<8} {run.pid:>7}  {run.started:<19}  {run.config:<24} "
                  f"{run.endpoint or '-'} | {run.set_endpoint or '-'}")
        return 0
    if args.connect:
        targets = [(args.connect, args.connect)]
    elif args.run_id:
        run = runs.find_run(args.run_id)
        if not run.endpoint:
            raise ConfigError(f"run {run.run_id} has no e-stop endpoint (a `hil run`: Ctrl-C "
                              "stops it)")
        targets = [(f"run {run.run_id}", run.endpoint)]
    else:
        targets = [(f"run {run.run_id}", run.endpoint) for run in runs.list_runs()
                   if run.endpoint]
        if not targets:
            print("hil: no running `hil control` of yours to e-stop (hil estop --connect "
                  "ENDPOINT for one started elsewhere)", file=sys.stderr)
            return 1
    status = 0
    for name, endpoint in targets:
        try:
            tick = send_estop(endpoint, args.timeout)
        except FaultError as exc:
            print(f"hil: {name}: {exc}", file=sys.stderr)
            status = 1
            continue
        who = "the controller" if name == endpoint else name
        print(f"e-stop: {who} stopped its drives at tick {tick}")
    return status


def keys(args) -> int:
    """``hil keys``: create this user's CURVE key pairs (refused if they exist, unless --force)."""
    directory = curve.make_keys(args.dir, args.force)
    print(f"wrote the server and client key pairs in {directory} (secrets 0600); another "
          f"machine's client needs a copy of {directory / 'server.key'} and a client key "
          f"pair whose public key goes into {directory / 'authorized'}")
    return 0
