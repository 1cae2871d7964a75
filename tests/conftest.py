"""Shared fixtures: configs of the papers' robots and small helpers."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hilrig.rt.config import load, resolve
from hilrig.schema import Config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


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
