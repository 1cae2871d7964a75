"""The running ``hil run`` and ``hil control`` runs of this user, so that ``hil estop``
and ``hil set`` can find them.

Each run gets a run id and endpoints of its own in the per-user runtime folder
(drivers.endpoint.runtime_dir, 0700), unless its options say otherwise: ``hil
control`` an e-stop endpoint ``ipc://RUNTIME/estop-RUN_ID``, both a live-tuning
endpoint ``ipc://RUNTIME/set-RUN_ID``. While it runs, ``RUNTIME/runs/RUN_ID.json``
(0600) records its run id, pid, endpoints ("" for none), config, start time and login
session; the record is removed when the run ends, and the record of a process that is
gone (killed) is removed by the next ``list_runs``.

Login sessions: several people may work under one uid (all root on a shared rig PC),
and the OS tells them apart only by their login session (the kernel's audit session,
``/proc/self/sessionid``: one per login, shared by every terminal, tmux pane and child
process of that login). A bare ``hil set`` or ``hil fault`` (no ``--run``) picks only a
run of its own login session, so that it never changes a colleague's run by default; a
bare ``hil estop`` still asks every run of the uid (for an e-stop, the safe side).
Where the kernel keeps no sessions (no audit: containers, logins without PAM) every run
is of the one session.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hilrig.drivers.endpoint import runtime_dir
from hilrig.errors import ConfigError


@dataclass(frozen=True)
class Run:
    run_id: str
    pid: int
    endpoint: str       # its e-stop endpoint ("" for none: `hil run`)
    config: str
    started: str        # local time, ISO 8601
    set_endpoint: str = ""     # where `hil set` reaches it ("" for none)
    session: int | None = None     # its login session (login_session; None: unknown)


NO_SESSION = 2**32 - 1      # /proc/self/sessionid of a process outside any login session


def login_session() -> int | None:
    """This process's login session (module docstring), or None where the kernel keeps
    none."""
    try:
        session = int(Path("/proc/self/sessionid").read_text())
    except (OSError, ValueError):
        return None
    return None if session == NO_SESSION else session


def new_run_id() -> str:
    """A short id, unique among this user's runs (6 hex digits)."""
    return secrets.token_hex(3)


def default_estop_endpoint(run_id: str) -> str:
    return f"ipc://{runtime_dir()}/estop-{run_id}"


def default_set_endpoint(run_id: str) -> str:
    return f"ipc://{runtime_dir()}/set-{run_id}"


def _folder() -> Path:
    folder = runtime_dir() / "runs"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def register(run_id: str, endpoint: str, config: str, set_endpoint: str = "") -> Path:
    """Record this process's run; returns the record's path (for ``unregister``)."""
    run = Run(run_id, os.getpid(), endpoint, config, time.strftime("%Y-%m-%dT%H:%M:%S"),
              set_endpoint, login_session())
    path = _folder() / f"{run_id}.json"
    partial = path.with_suffix(".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(run), out)
    os.replace(partial, path)
    return path


def unregister(path: Path) -> None:
    path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_runs() -> list[Run]:
    """This user's live runs, oldest first (records of dead processes are removed)."""
    runs = []
    for path in sorted(_folder().glob("*.json")):
        try:
            run = Run(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if _alive(run.pid):
            runs.append(run)
        else:
            path.unlink(missing_ok=True)
    return sorted(runs, key=lambda r: r.started)


def find_run(run_id: str) -> Run:
    """The live run ``run_id``; ConfigError naming the live ones if there is none."""
    runs = list_runs()
    for run in runs:
        if run.run_id == run_id:
            return run
    known = ", ".join(r.run_id for r in runs) or "none running"
    raise ConfigError(f"no running `hil run` or `hil control` with run id {run_id!r} (yours: "
                      f"{known}; hil estop --list)")


def tunable_run(run_id: str | None) -> Run:
    """The run ``hil set`` talks to: ``run_id``'s, else the only run of this login session
    that takes live changes; ConfigError when there is none or several (naming them)."""
    if run_id:
        run = find_run(run_id)
        if not run.set_endpoint:
            raise ConfigError(f"run {run_id} takes no live changes (started with "
                              "--set-endpoint '')")
        return run
    tunable = this_session([run for run in list_runs() if run.set_endpoint], "live changes")
    if len(tunable) == 1:
        return tunable[0]
    if not tunable:
        raise ConfigError("no running `hil run` or `hil control` of yours takes live changes "
                          "(hil set --connect ENDPOINT for one started elsewhere)")
    raise ConfigError("several runs take live changes: name one with --run "
                      + " or ".join(run.run_id for run in tunable))


def fault_runs() -> list[Run]:
    """This login session's running ``hil run`` runs that take live faults (through their
    `hil set` endpoint; a ``hil control`` has an e-stop endpoint and its faults go to its
    emulator)."""
    return this_session([run for run in list_runs() if run.set_endpoint and not run.endpoint],
                        "live faults")


def this_session(candidates: list[Run], what: str) -> list[Run]:
    """The runs of ``candidates`` started in this login session (all of them where the
    kernel keeps no sessions); ConfigError naming the others when only runs of other
    login sessions take ``what``: one of them is named with --run, never picked."""
    session = login_session()
    if session is None:
        return candidates
    mine = [run for run in candidates if run.session in (session, None)]
    if mine or not candidates:
        return mine
    others = " or ".join(f"{run.run_id} (pid {run.pid}, {run.config}, login session "
                         f"{run.session})" for run in candidates)
    raise ConfigError(f"no run of this login session (session {session}) takes {what}; "
                      f"another login's: {others}: name it with --run if it is yours to "
                      "change")
