"""Shared fixtures: configs of the papers' robots, the wheel of this checkout, small helpers."""
import dataclasses
import fcntl
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hilrig.settings.config import load, resolve
from hilrig.schema import Config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"

# The suite's runs keep their records and default control sockets in a runtime folder of
# this test session's own (one per pytest-xdist worker; the processes tests start inherit
# it): a test's bare `hil estop` or `hil fault` never reaches a developer's runs or another
# worker's, and two workers' default endpoints never collide.
_RUNTIME = tempfile.mkdtemp(prefix="hilrig-tests-")
os.environ["XDG_RUNTIME_DIR"] = _RUNTIME


# Ctrl-C reaches the processes tests start, even when the suite itself was started with
# SIGINT ignored (a non-interactive shell ignores it in a background job, and a process
# inherits SIG_IGN across exec: Python then installs no KeyboardInterrupt handler). Tests
# that send SIGINT to `hil run`, `hil emulate` or `python -m can.logger` and wait for a
# clean end failed by the dozen there. A handler, unlike SIG_IGN, is reset at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config):
    shutil.rmtree(_RUNTIME, ignore_errors=True)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker more than the machine has CPUs. Many tests wait on other
    processes (a subprocess's start, a paced run's seconds of wall time, an emulator's
    readiness) and leave their core idle meanwhile: on 2 cores the suite took 428 s with
    2 workers and 325 s with 3, measured back to back. A fourth gained nothing in CI
    (1429 tests on a fresh clone: 363 s with 3, 361 s with 4), only load."""
    return (len(os.sched_getaffinity(0)) or 1) + 1


def config(name: str, *overrides: str) -> Config:
    """A config from configs/ with ``key=value`` overrides, resolved."""
    return load(CONFIGS / f"{name}.toml", list(overrides))


def arm_config(sim: dict | None = None, **plant) -> Config:
    """A serial-arm config built in code (paper 000's arm unless overridden)."""
    raw = {"plant": {"model": "serial_arm", **plant}, "sim": sim or {}}
    return resolve(raw)


def replaced(cfg, table: str, **changes):
    """``cfg`` with keys of one table changed (``table`` dotted: "link.serial"), not
    validated again."""
    name, _, rest = table.partition(".")
    inner = getattr(cfg, name)
    inner = replaced(inner, rest, **changes) if rest else dataclasses.replace(inner, **changes)
    return dataclasses.replace(cfg, **{name: inner})


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout (no build isolation: setuptools is installed),
    once per test run: pytest-xdist's workers share it, built by the first under a lock
    (builds at once in the one source tree, its build/ and .egg-info folders, all failed)."""
    if not all(importlib.util.find_spec(name) for name in ("pip", "setuptools", "wheel")):
        pytest.skip("pip wheel is impossible here (pip, setuptools or wheel missing)")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this run's
    out = shared / "wheel"
    with open(shared / "wheel.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not any(out.glob("hilrig-*.whl")):
            out.mkdir(exist_ok=True)
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
                           check=True, capture_output=True)
    (path,) = out.glob("hilrig-*.whl")
    return path
