"""The controller a config names: a registered builder (``controller.type``) or the
user's own law (``controller.law = "package.module:function"``).

Controllers are ControllerSpecs found in the entry-point group ``hilrig.controllers``
(name -> the spec: its builder, keys and rules); hilrig's own (open_loop, pd,
feedforward) are registered there too (pyproject.toml). A law named by ``controller.law`` gets
``controller.params`` as its params (followed by the plant's model block with
``controller.with_model``: plant.model_kernels) and ``controller.state_size`` zeros as its
state; the sizes it declares (controllers.interface.declare_sizes) are checked when the config is
loaded, and a compiled one is tried once in Python then, before it compiles
(``check_law``).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from hilrig.controllers.interface import (
    Controller,
    ControllerSpec,
    check_declared_sizes,
    compile_law,
    detection_record,
    trial_call,
)
from hilrig.errors import ConfigError
from hilrig.plant import model_kernels
from hilrig.plugins import load_object, lookup
from hilrig.schema import Config
from numba.core.ccallback import CFunc
from numba.core.registry import CPUDispatcher

GROUP = "hilrig.controllers"


class ControllerError(ConfigError):
    """The configured controller cannot be found or built."""


@lru_cache(maxsize=None)
def controller_spec(name: str) -> ControllerSpec:
    """The ControllerSpec ``controller.type`` names (entry-point group hilrig.controllers);
    ConfigError with the known names otherwise."""
    return lookup(GROUP, name, "controller.type", ControllerSpec)


def controller_from_config(cfg: Config, unit: str,
                           allow_python: bool = False) -> Controller:
    """The controller of ``cfg.controller`` for a link that takes ``unit`` ("V" or "N m":
    the link's ``command_unit``, or hilrig.drivers.registry.command_unit of the config).

    ``allow_python``: whether a plain Python law is acceptable (``hil control`` runs one;
    the compiled loops of ``hil run`` and ``hil sim`` cannot).
    """
    c = cfg.controller
    if c.law is None:
        return controller_spec(c.type).build(cfg, unit)
    target = load_object(c.law, "controller.law")
    params = np.array(c.params, dtype=float)
    if c.with_model:
        params = np.concatenate([params, model_kernels.block(cfg)])
    state = np.zeros(c.state_size)
    detection = detection_record(c.detection_slot)
    if isinstance(target, (CFunc, CPUDispatcher)):
        return Controller(compile_law(target), params, state, name=c.law, detection=detection)
    if isinstance(target, type):       # a class: its instance is the law
        target = target(params)
    if not callable(target):
        raise ControllerError(f"controller.law: {c.law!r} is not callable")
    if not allow_python:
        raise ControllerError(
            f"controller.law: {c.law!r} is a plain Python callable; run it with `hil "
            "control` (any link.type, inprocess included), or decorate it with @numba.njit "
            "to run it in the compiled loop of `hil run` and `hil sim`")
    return Controller(target, params, state, compiled=False, name=c.law, detection=detection)


def check_law(law: str, params: list, state_size: int, n_outputs: int,
              with_model: bool = False) -> None:
    """The law ``law`` ("module:function") against the config's sizes: those it declares
    (controllers.interface.declare_sizes), then, compiled, its trial call in Python
    (controllers.interface.trial_call). ConfigError in one line when they disagree.
    Imports the law's module and compiles nothing (settings.config calls it on load).
    A law that cannot be loaded here is left to the commands that run it, which say so in
    one line (``controller_from_config``): ``hil emulate`` loads the same config on a host
    that may not have the controller's module. With ``with_model`` (the plant's model block
    follows the params) the declared sizes count controller.params only and there is no
    trial call: the model's kernels would compile for it."""
    try:
        target = load_object(law, "controller.law")
    except ConfigError:
        return
    check_declared_sizes(target, law, len(params), state_size, n_outputs)
    if isinstance(target, (CFunc, CPUDispatcher)) and not with_model:
        trial_call(target, law, np.array(params, dtype=float), np.zeros(state_size), n_outputs)
