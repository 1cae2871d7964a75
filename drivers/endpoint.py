"""Control-plane endpoints: checked, never taken over, reachable by their owner only.

``bind`` is how every hilrig server socket (the emulator, a controller's e-stop
endpoint) takes its endpoint, ``connect`` how every client reaches one:

- **checked**: ``ipc://PATH`` (its folder must exist; at most 107 bytes), ``tcp://HOST:PORT``
  (port 1..65535, ``*`` to bind any) or ``inproc://NAME``; anything else is a ConfigError
  naming the endpoint.
- **never taken over**: binding an ipc path that a live process serves is refused (a
  ZeroMQ ipc bind would silently replace its socket file, stealing its peers); the socket
  file of a dead process is removed first. A tcp port in use is refused too.
- **owner only**: an ipc socket is created 0600 whatever the umask (the kernel then lets
  only its owner, and root, connect), and ``connect`` refuses an ipc socket file of
  another user (a squatter who bound the path first; root is not stopped by the mode); ``runtime_dir`` is a per-user 0700 folder for the
  default ones. Over tcp, CURVE authentication (drivers.curve) admits only holders of
  this user's keys, and a bind other than loopback is announced with a warning.

``$RUNTIME`` in an ipc endpoint stands for this user's runtime folder (``runtime_dir``):
the default emulator endpoint is ``ipc://$RUNTIME/emulator`` (EMULATOR), so that no other
user can take or block it, as they could a fixed path in /tmp. ``bind`` and ``connect``
expand it (``expand``).

``context`` makes the ZeroMQ context of a link or an emulator, its I/O threads at the
loop's real-time priority (timing.sched).
"""
from __future__ import annotations

import logging
import os
import socket as sockets
import stat
import tempfile
from pathlib import Path

import zmq
from hilrig.drivers import curve
from hilrig.errors import ConfigError
from hilrig.timing.sched import fifo_refusal

log = logging.getLogger("hil.endpoint")

MAX_IPC_PATH = 107          # sun_path of a Unix socket, without the terminating NUL
RUNTIME = "$RUNTIME"        # in an ipc endpoint: this user's runtime folder
EMULATOR = f"ipc://{RUNTIME}/emulator"     # the emulator's default endpoint
_socket_files: dict = {}    # {id(socket): (path, (st_dev, st_ino))} of the ipc files bound


def _leave_to_exit(ctx: zmq.Context) -> None:
    """A ZeroMQ context dropped without being closed is left to the process's exit.

    pyzmq's own ``Context.__del__`` destroys it: it closes the sockets it still finds, then
    terminates, and terminating waits for every socket to close. When the garbage collector
    frees a context together with one of its sockets (a cycle), the socket's weak entry is
    already gone and its own finalizer has not run yet, so the termination waits forever in
    whatever thread collected (a run's loop, the test suite: seen). Leaving it open costs its
    I/O thread until exit; every hilrig part closes its context itself."""


zmq.Context.__del__ = _leave_to_exit


def runtime_dir() -> Path:
    """This user's folder for run records and default sockets, created 0700.

    ``$XDG_RUNTIME_DIR/hilrig`` when that is set (the session's own folder), else
    ``~/.cache/hilrig/run`` (in the user's home, where no other user can create it first),
    else, with no writable home, ``/tmp/hilrig-UID``. A folder that is not a directory owned
    by this user with no access for others is refused (someone else may have planted it).
    """
    base = os.environ.get("XDG_RUNTIME_DIR")
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    if base and Path(base).is_dir():
        path = Path(base) / "hilrig"
    elif os.access(home if home.is_dir() else home.parent, os.W_OK):
        path = home / "hilrig" / "run"
    else:
        path = Path(tempfile.gettempdir()) / f"hilrig-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise ConfigError(f"runtime folder {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() \
            or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"runtime folder {path} is not a folder of yours with mode 0700: "
                          "refusing to put control sockets there")
    return path


def expand(endpoint: str) -> str:
    """``endpoint`` with a leading ``ipc://$RUNTIME/`` made this user's runtime folder
    (created 0700, and checked: ``runtime_dir``); any other endpoint as it is."""
    prefix = f"ipc://{RUNTIME}/"
    if isinstance(endpoint, str) and endpoint.startswith(prefix):
        return f"ipc://{runtime_dir()}/{endpoint[len(prefix):]}"
    return endpoint


def check(endpoint: str, binding: bool = False) -> tuple[str, str]:
    """(transport, address) of a valid endpoint, else ConfigError naming what is wrong.

    ``binding``: the endpoint is to be bound (a tcp port may then be ``*``). ``$RUNTIME``
    is expanded first (``expand``).
    """
    endpoint = expand(endpoint)
    if not isinstance(endpoint, str) or "://" not in endpoint:
        raise ConfigError(f"endpoint {endpoint!r}: expected ipc://PATH or tcp://HOST:PORT")
    transport, address = endpoint.split("://", 1)
    if transport == "ipc":
        if not address or "\0" in address:
            raise ConfigError(f"endpoint {endpoint!r}: ipc:// needs a socket path")
        if len(address.encode()) > MAX_IPC_PATH:
            raise ConfigError(f"endpoint {endpoint!r}: ipc path longer than "
                              f"{MAX_IPC_PATH} bytes")
        folder = Path(address).parent
        if not folder.is_dir():
            raise ConfigError(f"endpoint {endpoint!r}: folder {folder} does not exist")
    elif transport == "tcp":
        host, _, port = address.rpartition(":")
        if not host:
            raise ConfigError(f"endpoint {endpoint!r}: expected tcp://HOST:PORT")
        if not (binding and port == "*"):
            if not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ConfigError(f"endpoint {endpoint!r}: tcp port {port!r} is not a number "
                                  "in 1..65535")
    elif transport == "inproc":
        if not address:
            raise ConfigError(f"endpoint {endpoint!r}: inproc:// needs a name")
    else:
        raise ConfigError(f"endpoint {endpoint!r}: expected ipc://PATH or tcp://HOST:PORT")
    return transport, address


def is_loopback(address: str) -> bool:
    """True for a tcp ``HOST:PORT`` whose host is this machine's loopback."""
    host = address.rpartition(":")[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def claim_ipc(path: str, endpoint: str, what: str) -> None:
    """Refuse ``path`` when a live process serves it; remove a dead process's socket file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigError(f"{what} endpoint {endpoint}: {path} exists and is not a socket")
    probe = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except ConnectionRefusedError:         # nobody listens: a dead process's file
        try:
            os.unlink(path)
        except OSError as exc:
            raise ConfigError(f"{what} endpoint {endpoint}: cannot remove the stale socket "
                              f"{path}: {exc.strerror}") from None
        log.info("removed the stale socket %s of a process that is gone", path)
        return
    except PermissionError:
        raise ConfigError(f"{what} endpoint {endpoint} belongs to another user") from None
    except OSError:
        pass                               # a live but busy listener: in use
    finally:
        probe.close()
    raise ConfigError(f"{what} endpoint {endpoint} is in use by a running process "
                      "(another hil? stop it or choose another endpoint)")


def bind(socket: zmq.Socket, endpoint: str, what: str = "server") -> None:
    """Bind ``socket`` to ``endpoint`` as described in the module's docstring.

    ``what`` names the server in messages ("emulator", "e-stop"). ConfigError (one line)
    for an invalid, taken or unbindable endpoint. ``close`` closes the socket.
    """
    endpoint = expand(endpoint)
    transport, address = check(endpoint, binding=True)
    if transport == "ipc":
        claim_ipc(address, endpoint, what)
        old = os.umask(0o077)            # the socket file is born owner-only
        try:
            _bind(socket, endpoint, what)
        finally:
            os.umask(old)
        os.chmod(address, 0o600)
        _socket_files[id(socket)] = socket_file(address)
    elif transport == "tcp":
        if not is_loopback(address):
            log.warning("%s endpoint %s is reachable from other machines (CURVE keys "
                        "required; the default is loopback)", what, endpoint)
        curve.serve(socket)
        try:
            _bind(socket, endpoint, what)
        except ConfigError:
            curve.release(socket)
            raise
    else:
        _bind(socket, endpoint, what)


def _bind(socket: zmq.Socket, endpoint: str, what: str) -> None:
    try:
        socket.bind(endpoint)
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EADDRINUSE:
            raise ConfigError(f"{what} endpoint {endpoint} is in use by a running "
                              "process") from None
        raise ConfigError(f"{what} endpoint {endpoint}: cannot bind ({exc.strerror})") from None


def close(socket: zmq.Socket, endpoint: str) -> None:
    """Close a socket that ``bind`` bound, releasing what it took: its CURVE handler, its
    ipc socket file (ZeroMQ leaves the file behind; removed only if it is still the one
    this socket made)."""
    if endpoint.startswith("tcp://"):
        curve.release(socket)
    made = _socket_files.pop(id(socket), None)
    socket.close(0)
    if made is not None:
        remove_socket_file(made)


def socket_file(path: str) -> tuple:
    """The socket file at ``path`` as a server just made it: (path, its identity), for
    ``remove_socket_file``."""
    info = os.lstat(path)
    return path, (info.st_dev, info.st_ino)


def remove_socket_file(made: tuple) -> None:
    """Remove the socket file ``made`` (``socket_file``) if it is still that file: not a
    newer server's at the same path."""
    path, identity = made
    try:
        info = os.lstat(path)
        if (info.st_dev, info.st_ino) == identity:
            os.unlink(path)
    except OSError:
        pass


def _refuse_strangers(path: str, endpoint: str, what: str) -> None:
    """ConfigError when the ipc socket file at ``path`` (if there is one yet) belongs to
    another user: someone who bound the path first (a squatter) is never talked to, even
    by root, whom the file's mode does not stop."""
    try:
        owner = os.lstat(path).st_uid
    except FileNotFoundError:
        return                   # not bound yet: ZeroMQ connects once it is (ours, 0600)
    except OSError as exc:
        raise ConfigError(f"{what} endpoint {endpoint}: {exc.strerror}") from None
    if owner != os.getuid():
        raise ConfigError(f"{what} endpoint {endpoint} belongs to another user (uid {owner}): "
                          "refusing to talk to it (stop theirs, or choose another endpoint)")


def connect(socket: zmq.Socket, endpoint: str, what: str = "server") -> None:
    """Connect ``socket`` to ``endpoint`` (expanded, checked; tcp with this user's CURVE
    client keys)."""
    endpoint = expand(endpoint)
    transport, address = check(endpoint)
    if transport == "tcp":
        curve.client(socket)
    elif transport == "ipc":
        _refuse_strangers(address, endpoint, what)
    try:
        socket.connect(endpoint)
    except zmq.ZMQError as exc:
        raise ConfigError(f"{what} endpoint {endpoint}: cannot connect ({exc.strerror})") \
            from None


def context(fifo_priority: int = 0) -> zmq.Context:
    """A new ZeroMQ context whose I/O threads run at SCHED_FIFO ``fifo_priority`` (the
    loop's, timing.sched), so that a loop at that priority is never kept waiting by its
    own sockets' traffic; 0, or a process without the right (said once), keeps normal
    scheduling. The options take effect at the first socket; ``term`` it when done (one
    dropped unclosed is left to the process's exit: ``_leave_to_exit``)."""
    ctx = zmq.Context()
    if fifo_priority > 0 and fifo_refusal(fifo_priority) is None:
        # set only once allowed: libzmq aborts the process when its threads are refused
        ctx.set(zmq.THREAD_SCHED_POLICY, os.SCHED_FIFO)
        ctx.set(zmq.THREAD_PRIORITY, fifo_priority)
    return ctx
