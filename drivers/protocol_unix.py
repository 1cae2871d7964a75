"""The serial line ``unix://PATH``: packet-serial bytes over a Unix-domain stream socket.

The emulated drives (devices.roboclaw_drive, ``hil emulate``) serve a socket at PATH when
``link.serial.port`` is such a URL, and the link (drivers.serial_link) opens it with
pyserial's ``serial_for_url``, which finds the class ``Serial`` here once ``register`` has
put this package on pyserial's ``protocol_handler_packages`` (the module's name,
``protocol_unix``, is how pyserial finds a scheme's handler; pyserial's own
``protocol_socket`` does the same for TCP). Why not a pty: a pty hands its bytes to the
other end through a kernel worker of normal priority, which a busy host delays by tens of
milliseconds (docs/RIGPC.md, "A pty is not real-time"); a socket's bytes are in the
peer's queue when ``write`` returns. A real drive is a device path (/dev/ttyACM0), opened
as before.

``$RUNTIME/`` at the start of PATH is this user's runtime folder (drivers.endpoint: 0700,
checked), so the default, ``unix://$RUNTIME/roboclaw``, is a place no other user can take
or block. The rules of every hilrig endpoint hold (drivers.endpoint): the server's socket
file is created 0600 whatever the umask, a path that a live process serves is refused
and a dead one's socket file replaced (``listen``); the client talks only to a server of
its own user (the peer's credentials, SO_PEERCRED, checked at ``open``), so a stranger
who bound the path first is refused, root included. The server side takes one client at
a time (devices.roboclaw_drive: a second one is closed at once with one line, as a bus
takes one master).

Baud rate, parity and the modem lines mean nothing on a socket: they are accepted and
ignored, as a pty ignores the baud rate.
"""
from __future__ import annotations

import errno
import fcntl
import os
import select
import socket
import stat
import struct
import termios

from hilrig.drivers import endpoint
from hilrig.errors import ConfigError
from serial.serialutil import PortNotOpenError, SerialBase, SerialException, Timeout

SCHEME = "unix://"
PACKAGE = "hilrig.drivers"          # on pyserial's protocol_handler_packages (``register``)
_PEERCRED = struct.Struct("3i")     # SO_PEERCRED: pid, uid, gid


def register() -> None:
    """Let pyserial's ``serial_for_url`` open ``unix://`` URLs (idempotent)."""
    import serial

    if PACKAGE not in serial.protocol_handler_packages:
        serial.protocol_handler_packages.append(PACKAGE)


def is_url(port) -> bool:
    """Whether ``port`` (link.serial.port) names a socket, not a device path."""
    return isinstance(port, str) and port.lower().startswith(SCHEME)


def url_path(url: str) -> str:
    """The path of ``unix://PATH``, ``$RUNTIME`` not yet expanded; ConfigError (one line)
    when it is not an absolute path or one in ``$RUNTIME/`` (checks nothing on disk)."""
    path = url[len(SCHEME):] if is_url(url) else ""
    if "\0" in path or not (path.startswith("/") or path.startswith(f"{endpoint.RUNTIME}/")) \
            or path.endswith("/"):
        raise ConfigError(f"serial port {url!r}: expected unix:///ABSOLUTE/PATH or "
                          f"unix://{endpoint.RUNTIME}/NAME")
    return path


def socket_path(url: str) -> str:
    """The socket file of ``url``: ``$RUNTIME/`` made this user's runtime folder (created
    0700 and checked); ConfigError naming the URL when the path cannot be a socket's."""
    path = url_path(url)
    if path.startswith(f"{endpoint.RUNTIME}/"):
        path = f"{endpoint.runtime_dir()}/{path[len(endpoint.RUNTIME) + 1:]}"
    if len(path.encode()) > endpoint.MAX_IPC_PATH:
        raise ConfigError(f"serial port {url!r}: socket path longer than "
                          f"{endpoint.MAX_IPC_PATH} bytes")
    return path


def expanded(url: str) -> str:
    """``url`` with its socket's real path (``socket_path``), for messages."""
    return SCHEME + socket_path(url)


def listen(url: str) -> tuple[socket.socket, tuple]:
    """The emulator's listening socket at ``url``'s path, its file 0600, and that file
    (drivers.endpoint.socket_file, for ``remove_socket_file``). ConfigError (one line)
    when the folder is missing, a live process serves the path (another emulator), or it
    is not a socket; a dead process's socket file is replaced (drivers.endpoint.claim_ipc)."""
    path = socket_path(url)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ConfigError(f"serial port {url!r}: folder {folder} does not exist")
    endpoint.claim_ipc(path, url, "emulated drives")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)                 # the socket file is born owner-only
    try:
        server.bind(path)
    except OSError as exc:
        server.close()
        raise ConfigError(f"emulated drives endpoint {url}: cannot bind ({exc.strerror})") \
            from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    server.listen(2)
    server.setblocking(False)
    return server, endpoint.socket_file(path)


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of ``conn`` (SO_PEERCRED)."""
    return _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                            _PEERCRED.size))[1]


class Serial(SerialBase):
    """pyserial's Serial over the Unix-domain stream socket of a ``unix://PATH`` URL.

    Non-blocking underneath (``fileno`` is the socket's: drivers.serial_link selects on
    it and uses os.read/os.write); ``read`` and ``write`` honour pyserial's ``timeout``
    and ``write_timeout``. The other end closing is SerialException("... closed ...") in
    ``read`` and EOF (os.read gives b"") on the descriptor.
    """

    def open(self) -> None:
        """Connect to the socket of ``self.port``; SerialException naming the path and
        the cause (no such socket, nobody serving it, a server of another user)."""
        if self._port is None:
            raise SerialException("Port must be configured before it can be used.")
        if self.is_open:
            raise SerialException("Port is already open.")
        try:
            path = socket_path(self.portstr)
        except ConfigError as exc:
            raise SerialException(str(exc)) from None
        try:
            if not stat.S_ISSOCK(os.stat(path).st_mode):
                raise SerialException(f"{path} is not a socket")
        except FileNotFoundError:
            raise SerialException(f"no socket at {path} (is `hil emulate` running?)") \
                from None
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            uid = peer_uid(conn)
            if uid != os.getuid():
                raise SerialException(f"{path} is served by another user (uid {uid}): "
                                      "refusing to talk to it")
        except SerialException:         # an OSError too: first
            conn.close()
            raise
        except OSError as exc:
            conn.close()
            why = "nobody serves it (a stale socket file)" \
                if exc.errno == errno.ECONNREFUSED else exc.strerror
            raise SerialException(f"cannot connect to {path}: {why}") from None
        conn.setblocking(False)
        self._socket = conn
        self.is_open = True
        self.reset_input_buffer()

    def close(self) -> None:
        if self.is_open:
            self._socket.close()
            self._socket = None
            self.is_open = False

    def fileno(self) -> int:
        if not self.is_open:
            raise PortNotOpenError()
        return self._socket.fileno()

    @property
    def in_waiting(self) -> int:
        """Bytes received and not yet read."""
        if not self.is_open:
            raise PortNotOpenError()
        return struct.unpack("i", fcntl.ioctl(self._socket, termios.FIONREAD, b"\0" * 4))[0]

    def read(self, size: int = 1) -> bytes:
        """Up to ``size`` bytes within ``timeout`` (None: until ``size`` came)."""
        if not self.is_open:
            raise PortNotOpenError()
        data = bytearray()
        timeout = Timeout(self._timeout)
        while len(data) < size:
            if not select.select((self._socket,), (), (), timeout.time_left())[0]:
                break
            try:
                chunk = self._socket.recv(size - len(data))
            except BlockingIOError:
                continue
            except OSError as exc:
                raise SerialException(f"read failed: {exc}") from None
            if not chunk:
                raise SerialException("the other end closed the socket")
            data += chunk
            if timeout.expired():
                break
        return bytes(data)

    def write(self, data) -> int:
        """All of ``data``, waiting for room within ``write_timeout`` (None: as long as
        it takes; 0: what fits now); the count written."""
        if not self.is_open:
            raise PortNotOpenError()
        view = memoryview(bytes(data))
        timeout, sent = Timeout(self._write_timeout), 0
        while sent < len(view):
            try:
                sent += self._socket.send(view[sent:])
            except BlockingIOError:
                pass
            except OSError as exc:
                raise SerialException(f"write failed: {exc}") from None
            if sent == len(view) or timeout.is_non_blocking:
                break
            if not select.select((), (self._socket,), (), timeout.time_left())[1]:
                break
        return sent

    def reset_input_buffer(self) -> None:
        """Discard what has arrived."""
        if not self.is_open:
            raise PortNotOpenError()
        try:
            while self._socket.recv(4096):
                pass
        except BlockingIOError:
            pass
        except OSError as exc:
            raise SerialException(f"read failed: {exc}") from None

    def reset_output_buffer(self) -> None:
        """Nothing to do: what ``write`` sent is already in the peer's queue."""

    # a socket has no line settings or modem lines: accepted, ignored
    def _reconfigure_port(self, force_update: bool = False) -> None:
        pass

    def _update_break_state(self) -> None:
        pass

    def _update_rts_state(self) -> None:
        pass

    def _update_dtr_state(self) -> None:
        pass

    @property
    def cts(self) -> bool:
        return True

    @property
    def dsr(self) -> bool:
        return True

    @property
    def ri(self) -> bool:
        return False

    @property
    def cd(self) -> bool:
        return True
