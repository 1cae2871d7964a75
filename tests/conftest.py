"""Shared fixtures: configs of the papers' robots and small helpers."""
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
