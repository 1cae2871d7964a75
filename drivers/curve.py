"""CURVE keys of the control plane over tcp: ``hil keys`` makes them, servers and clients load them.

Over tcp every hilrig socket (the emulator, a controller's e-stop endpoint) is a CURVE
server (ZeroMQ's elliptic-curve encryption and authentication, RFC 26) and admits only
the clients whose public key lies in ``KEYS/authorized/``; a peer without a key (or with
another one) never completes the handshake, so none of its frames reaches hilrig.

Layout of the per-user key directory KEYS (``$HILRIG_KEYS``, else
``$XDG_CONFIG_HOME/hilrig/keys``, else ``~/.config/hilrig/keys``; 0700):

    server.key, server.key_secret    the servers' key pair (secret 0600)
    client.key, client.key_secret    the clients' key pair (secret 0600)
    authorized/client.key            public keys of the clients a server admits

Another machine's controller gets a copy of ``server.key`` and a client pair of its own,
whose ``client.key`` goes into ``authorized/`` here.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import zmq
import zmq.auth
from hilrig.errors import ConfigError

_authenticators: dict = {}     # one ZAP handler per ZeroMQ context: {id(context): [auth, users]}


def key_dir() -> Path:
    """This user's key directory (see the module's docstring)."""
    if os.environ.get("HILRIG_KEYS"):
        return Path(os.environ["HILRIG_KEYS"])
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "hilrig" / "keys"


def make_keys(directory: Path | None = None, force: bool = False) -> Path:
    """Create the server and client key pairs in ``directory`` (default key_dir()).

    Existing keys are kept unless ``force``. Returns the directory.
    """
    directory = Path(directory or key_dir())
    if (directory / "server.key_secret").exists() and not force:
        raise ConfigError(f"keys already exist in {directory} (hil keys --force replaces them, "
                          "and every copied key must then be copied again)")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    old = os.umask(0o077)
    try:
        for name in ("server", "client"):
            for suffix in (".key", ".key_secret"):
                (directory / f"{name}{suffix}").unlink(missing_ok=True)
            zmq.auth.create_certificates(str(directory), name)
        authorized = directory / "authorized"
        authorized.mkdir(mode=0o700, exist_ok=True)
        shutil.copyfile(directory / "client.key", authorized / "client.key")
    finally:
        os.umask(old)
    for secret in directory.glob("*.key_secret"):
        os.chmod(secret, 0o600)
    return directory


def _load(name: str, secret: bool = True) -> tuple[bytes, bytes | None]:
    """(public, secret) key of ``name`` ("server" or "client"); ConfigError when missing or
    readable by others."""
    directory = key_dir()
    path = directory / f"{name}.key_secret" if secret else directory / f"{name}.key"
    if not path.exists():
        raise ConfigError(f"tcp endpoints need CURVE keys: no {path} (run `hil keys` first)")
    if secret:
        info = path.stat()
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"{path}: a secret key must belong to you and be readable by "
                              "you only (chmod 600)")
    try:
        return zmq.auth.load_certificate(str(path))
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{path}: not a CURVE key file ({exc})") from None


def serve(socket: zmq.Socket) -> None:
    """Make ``socket`` (before its bind) a CURVE server admitting the authorized clients."""
    public, secret = _load("server")
    authorized = key_dir() / "authorized"
    context = socket.context
    entry = _authenticators.get(id(context))
    if entry is None:
        from zmq.auth.thread import ThreadAuthenticator

        auth = ThreadAuthenticator(context)
        auth.start()
        auth.configure_curve(domain="*", location=str(authorized))
        entry = _authenticators[id(context)] = [auth, 0]
    entry[1] += 1
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_server = True


def release(socket: zmq.Socket) -> None:
    """A served socket is closed: stop the ZAP handler when its context has no other."""
    entry = _authenticators.get(id(socket.context))
    if entry is not None:
        entry[1] -= 1
        if entry[1] <= 0:
            entry[0].stop()
            del _authenticators[id(socket.context)]


def client_keys() -> tuple[bytes, bytes, bytes]:
    """(server public, client public, client secret) keys; ConfigError when missing."""
    server_public, _ = _load("server", secret=False)
    return (server_public,) + _load("client")


def client(socket: zmq.Socket) -> None:
    """Make ``socket`` (before its connect) a CURVE client with this user's client keys."""
    server_public, public, secret = client_keys()
    socket.curve_serverkey = server_public
    socket.curve_publickey = public
    socket.curve_secretkey = secret
