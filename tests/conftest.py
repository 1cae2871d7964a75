"""Shared fixtures: configs of the papers' robots, the wheel of this checkout, small helpers."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hilrig.rt.config import load, resolve

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


def config(name: str, *overrides: str) -> dict:
    """A config from configs/ with ``key=value`` overrides, resolved."""
    return load(CONFIGS / f"{name}.toml", list(overrides))


def arm_config(sim: dict | None = None, **plant) -> dict:
    """A serial-arm config built in code (paper 000's arm unless overridden)."""
    raw = {"plant": {"model": "serial_arm", **plant}, "sim": sim or {}}
    return resolve(raw)


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout (no build isolation: setuptools is installed)."""
    if not all(importlib.util.find_spec(name) for name in ("pip", "setuptools", "wheel")):
        pytest.skip("pip wheel is impossible here (pip, setuptools or wheel missing)")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(ROOT)], check=True, capture_output=True)
    (path,) = out.glob("hilrig-*.whl")
    return path
