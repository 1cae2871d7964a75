"""The live view's front door: a WebSocket handshake shim in front of the Foxglove SDK's server.

The Foxglove WebSocket protocol has two handshake names: ``foxglove.websocket.v1`` (the
protocol's own, offered by Foxglove Studio 1.x, Lichtblick and the ``@foxglove/ws-protocol``
client) and ``foxglove.sdk.v1`` (the name the Foxglove SDK's server accepts, and the only
one: it answers HTTP 400 to a client that offers only the old name, and has no option to
accept it). The shim listens on the address of ``--live``; the SDK's server listens on an
ephemeral loopback port behind it. For each client the shim reads the HTTP upgrade request
(at most MAX_REQUEST bytes, within HANDSHAKE_TIMEOUT s), and

- a client that offers ``foxglove.sdk.v1`` goes to the SDK unchanged;
- a client that offers only ``foxglove.websocket.v1`` goes to the SDK offering
  ``foxglove.sdk.v1``, and the SDK's answer goes back naming ``foxglove.websocket.v1``
  (the same protocol: the frames are the same, nothing else is rewritten);
- any other request is answered HTTP 400 with the reason, and the reason is logged (one
  line per refusal, at most one a second; the others are counted in the next one), as is
  a refusal by the SDK itself (its status line).

After the handshake the shim copies bytes both ways, one thread per direction and client,
acknowledging what it reads at once (``_copy``) and writing without Nagle's delay.
A client that reads slowly blocks only its own thread; the SDK's queue for that client
then fills and the SDK drops that client's oldest messages, as without the shim.
"""
from __future__ import annotations

import logging
import socket
import threading
import time

SDK_NAME = "foxglove.sdk.v1"
PROTOCOL_NAME = "foxglove.websocket.v1"
MAX_REQUEST = 16384          # bytes of an upgrade request's head, at most
HANDSHAKE_TIMEOUT = 10.0     # s for a client to send its request head
CHUNK = 65536                # bytes per copy
QUICKACK = getattr(socket, "TCP_QUICKACK", None)     # Linux's (None elsewhere: _copy)

log = logging.getLogger("hil.live")


class HandshakeRefused(Exception):
    """A request the shim does not pass on: the reason, for the log and the client."""


def _head(sock: socket.socket) -> tuple[bytes, bytes]:
    """(head up to and with the blank line, bytes after it) read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_REQUEST:
            raise HandshakeRefused(f"request head over {MAX_REQUEST} bytes")
        chunk = sock.recv(4096)
        if not chunk:
            raise HandshakeRefused("closed before the end of its request")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def rewrite_request(head: bytes) -> tuple[bytes, str | None]:
    """The upgrade request ``head`` as the SDK accepts it, and the name to give back in the
    answer (None: the SDK's own). HandshakeRefused naming what is wrong with it."""
    lines = head.decode("latin-1").split("\r\n")
    method = lines[0].split(" ")
    if len(method) != 3 or method[0] != "GET":
        raise HandshakeRefused(f"not a WebSocket upgrade request ({lines[0][:80]!r})")
    fields = [line.partition(":") for line in lines[1:] if line]
    upgrade = [v.strip().lower() for k, _, v in fields if k.strip().lower() == "upgrade"]
    if "websocket" not in upgrade:
        raise HandshakeRefused("not a WebSocket upgrade request (no 'Upgrade: websocket')")
    offered = [p.strip() for k, _, v in fields if k.strip().lower() == "sec-websocket-protocol"
               for p in v.split(",") if p.strip()]
    if SDK_NAME in offered:
        return head, None
    if PROTOCOL_NAME not in offered:
        raise HandshakeRefused(
            f"it offered the subprotocols {offered or 'none'}; this server speaks "
            f"{PROTOCOL_NAME} (also named {SDK_NAME})")
    kept = [line for line in lines[:-2]
            if line.partition(":")[0].strip().lower() != "sec-websocket-protocol"]
    return "\r\n".join(kept + [f"Sec-WebSocket-Protocol: {SDK_NAME}", "", ""]).encode(
        "latin-1"), PROTOCOL_NAME


def rewrite_answer(head: bytes, name: str) -> bytes:
    """The SDK's 101 answer naming ``name`` instead of its own subprotocol name."""
    lines = head.decode("latin-1").split("\r\n")
    return "\r\n".join(
        f"Sec-WebSocket-Protocol: {name}"
        if line.partition(":")[0].strip().lower() == "sec-websocket-protocol" else line
        for line in lines).encode("latin-1")


class Shim:
    """Listen on (host, port) (port 0: any free one, then ``port``) and pass clients on to
    the SDK's server at 127.0.0.1:``backend``. ``close()`` ends every connection."""

    def __init__(self, host: str, port: int, backend: int):
        self.backend = backend
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, port))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.refused = 0                # refusals so far
        self._unsaid = 0                # refusals not logged yet (rate limit)
        self._last_said = 0.0           # monotonic s of the last refusal logged
        self._sockets: set = set()
        self.last_down = 0.0            # monotonic s of the last bytes passed to a client
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="hil-live-shim", daemon=True)
        self._thread.start()

    def drain(self, quiet: float = 0.05, limit: float = 1.0) -> None:
        """Wait until no bytes went to any client for ``quiet`` s (at most ``limit`` s):
        the server's last messages, still queued when the view stops, reach the clients
        that read them (a stalled client is not waited for)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and time.monotonic() - self.last_down < quiet:
            time.sleep(quiet / 5)

    def _sent(self) -> None:
        self.last_down = time.monotonic()

    def close(self) -> None:
        self._closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self._thread.join(5.0)
        with self._lock:
            for sock in list(self._sockets):
                _shut(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, address = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client, address), daemon=True,
                             name="hil-live-client").start()

    def _track(self, *socks) -> None:
        with self._lock:
            if self._closed:
                raise OSError("the live view stopped")
            self._sockets.update(socks)

    def _serve(self, client: socket.socket, address) -> None:
        server = None
        try:
            self._track(client)
            client.settimeout(HANDSHAKE_TIMEOUT)
            try:
                head, rest = _head(client)
                head, name = rewrite_request(head)
            except HandshakeRefused as exc:
                self._refuse(address, str(exc))
                body = f"refused: {exc}\n".encode()
                client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
                               b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
                               % (len(body), body))
                return
            except socket.timeout:
                self._refuse(address, f"no complete upgrade request within "
                                      f"{HANDSHAKE_TIMEOUT:g} s")
                return
            client.settimeout(None)
            server = socket.create_connection(("127.0.0.1", self.backend), timeout=10.0)
            self._track(server)
            server.sendall(head + rest)
            answer, more = _head(server)
            server.settimeout(None)
            status = answer.split(b"\r\n", 1)[0].decode("latin-1")
            if " 101 " not in status + " ":
                self._refuse(address, f"the Foxglove SDK answered {status!r}")
            elif name is not None:
                answer = rewrite_answer(answer, name)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.sendall(answer + more)
            upstream = threading.Thread(target=_copy, args=(client, server), daemon=True,
                                        name="hil-live-upstream")
            upstream.start()
            _copy(server, client, self._sent)
            upstream.join()
        except (OSError, HandshakeRefused):
            pass                        # a client gone or the view stopped: nothing to say
        finally:
            for sock in (client, server):
                if sock is not None:
                    _shut(sock)
                    sock.close()
                    with self._lock:
                        self._sockets.discard(sock)

    def _refuse(self, address, reason: str) -> None:
        """Log why a client was refused: at most one line a second (the rest counted)."""
        self.refused += 1
        now = time.monotonic()
        if now - self._last_said < 1.0:
            self._unsaid += 1
            return
        also = f" ({self._unsaid} more refused since the last line)" if self._unsaid else ""
        self._last_said, self._unsaid = now, 0
        log.warning("live view: refused a client from %s:%s: %s%s", address[0], address[1],
                    reason, also)


def _copy(source: socket.socket, sink: socket.socket, sent=None) -> None:
    """Copy until ``source`` ends, then end ``sink``'s side (both directions end so);
    ``sent()`` after each piece passed on.

    ``source`` acknowledges what it receives at once (TCP_QUICKACK, re-armed before each
    read: Linux drops it again by itself). The SDK's server writes its socket with Nagle's
    algorithm on: a message waits until the previous one is acknowledged, and the
    kernel's delayed acknowledgement held each message here for up to 40 ms (measured,
    every channel at 1 kHz with the 3D ones: 15 ms median from the SDK to the client,
    against 0.7 ms acknowledging at once; docs/LIVE.md)."""
    try:
        while True:
            if QUICKACK is not None:
                source.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
            if sent is not None:
                sent()
    except OSError:
        pass
    _shut(sink)
    _shut(source)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
