"""The default endpoints live in the user's own runtime folder (issue 28, item 9): the
emulator's default was the fixed path /tmp/hilrig-emulator, which another user could bind
first (posing as the emulator) or block; and the runtime folder's fallback was
/tmp/hilrig-UID, which another user could create first."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hilrig.drivers import endpoint as endpoints
from hilrig.remote.client import DEFAULT_ENDPOINT, connect

from rt_helpers import EmulatorProcess


def test_runtime_expands_to_the_users_own_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert DEFAULT_ENDPOINT == "ipc://$RUNTIME/emulator"
    assert endpoints.expand(DEFAULT_ENDPOINT) == f"ipc://{tmp_path}/hilrig/emulator"
    assert (tmp_path / "hilrig").stat().st_mode & 0o777 == 0o700
    assert endpoints.expand("ipc:///tmp/x") == "ipc:///tmp/x"         # others as they are
    assert endpoints.check(DEFAULT_ENDPOINT) == ("ipc", f"{tmp_path}/hilrig/emulator")


def test_without_a_session_folder_the_runtime_folder_is_in_the_home(tmp_path, monkeypatch):
    """Not /tmp/hilrig-UID, which another user could create first and so block every run."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert endpoints.runtime_dir() == tmp_path / ".cache" / "hilrig" / "run"
    assert (tmp_path / ".cache" / "hilrig" / "run").stat().st_mode & 0o777 == 0o700


@pytest.mark.system
def test_hil_emulate_and_connect_meet_at_the_default_endpoint(monkeypatch):
    """`hil emulate` with no --bind serves in the runtime folder and names the socket in
    its ready line; hilrig.connect() with no endpoint reaches it and reads the plant."""
    runtime = Path(tempfile.mkdtemp(prefix="hdef-", dir="/tmp"))     # a short ipc path
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime))
    emulator = EmulatorProcess("serial3_free", None, None, "--duration", "600", env=env)
    try:
        socket = runtime / "hilrig" / "emulator"
        assert emulator.ready.rstrip().endswith(f"on ipc://{socket}")      # the real path
        assert socket.is_socket() and socket.stat().st_mode & 0o777 == 0o600
        with connect() as plant:
            first = plant.read()
            assert plant.n_axes == 3 and np.all(np.isfinite(first.pos))
    finally:
        emulator.stop()
    assert not socket.exists()          # removed when the emulator closed it
    assert emulator.proc.returncode in (0, 130)

