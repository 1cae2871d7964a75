"""The controller a config names: a registered builder (``controller.type``) or the
user's own law (``controller.law = "package.module:function"``).

Builders are found in the entry-point group ``hilrig.controllers`` (name -> a function
``build(cfg, unit) -> Controller``); hilrig's own (open_loop, pd, feedforward) are
registered there too (pyproject.toml). A law named by ``controller.law`` gets
``controller.params`` as its params and ``controller.state_size`` zeros as its state.
"""
from __future__ import annotations

import importlib
import os
import sys
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

import numpy as np
from hilrig.controllers.interface import Controller, compile_law
from hilrig.errors import ConfigError
from numba.core.ccallback import CFunc
from numba.core.registry import CPUDispatcher

GROUP = "hilrig.controllers"


class ControllerError(ConfigError):
    """The configured controller cannot be found or built."""


def command_unit(cfg: dict) -> str:
    """What the configured link takes: "N m" for torque plants and CANopen drives
    (cyclic synchronous torque), else "V"."""
    torque_link = cfg["plant"]["drive"] == "torque" or cfg["link"]["type"] == "canopen"
    return "N m" if torque_link else "V"


@lru_cache(maxsize=None)
def builders() -> dict[str, str]:
    """Registered controller builders: name -> "module:attribute"."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def _import_here(module_name: str):
    """Import a module from the installed packages or, as ``python -m`` would, from the
    current directory (a user's law beside their config)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.split(".")[0] or os.getcwd() in sys.path:
            raise
    sys.path.insert(0, os.getcwd())
    return importlib.import_module(module_name)


def load_object(reference: str, key: str) -> Any:
    """The object a "package.module:attribute" string names; ControllerError names ``key``."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ControllerError(f"{key}: expected 'package.module:function', got {reference!r}")
    try:
        module = _import_here(module_name)
    except ImportError as exc:
        raise ControllerError(f"{key}: cannot import {module_name!r}: {exc}") from None
    try:
        target = module
        for part in attribute.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise ControllerError(f"{key}: module {module_name!r} has no {attribute!r}") from None
    return target


def controller_from_config(cfg: dict, unit: str | None = None,
                           allow_python: bool = False) -> Controller:
    """The controller of ``cfg['controller']`` for a link that takes ``unit`` ("V" or "N m";
    default ``command_unit(cfg)``).

    ``allow_python``: whether a plain Python law is acceptable (``hil control`` runs one;
    the compiled loops of ``hil run`` and ``hil sim`` cannot).
    """
    unit = command_unit(cfg) if unit is None else unit
    c = cfg["controller"]
    if c["law"] is None:
        if c["type"] not in builders():
            raise ControllerError(f"controller.type: no controller {c['type']!r} is registered "
                                  f"(known: {', '.join(sorted(builders()))})")
        return load_object(builders()[c["type"]], "controller.type")(cfg, unit)
    target = load_object(c["law"], "controller.law")
    params = np.array(c["params"], dtype=float)
    state = np.zeros(c["state_size"])
    if isinstance(target, (CFunc, CPUDispatcher)):
        return Controller(compile_law(target), params, state, name=c["law"])
    if isinstance(target, type):       # a class: its instance is the law
        target = target(params)
    if not callable(target):
        raise ControllerError(f"controller.law: {c['law']!r} is not callable")
    if not allow_python:
        raise ControllerError(
            f"controller.law: {c['law']!r} is a plain Python callable; run it with `hil "
            "control` (any link.type, inprocess included), or decorate it with @numba.njit "
            "to run it in the compiled loop of `hil run` and `hil sim`")
    return Controller(target, params, state, compiled=False, name=c["law"])
