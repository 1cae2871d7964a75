"""Live changes as configs: which keys of a run's config may change while it runs, and
the config with such a change applied and validated (settings.config.resolve), with the
law's params and command limits it gives. Used by the live view and ``hil set``
(live.params) and by the replay of a log's changes (rt.replay).
"""
from __future__ import annotations

import difflib

import numpy as np
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.limits import config_limits
from hilrig.errors import ConfigError
from hilrig.schema import Config
from hilrig.settings.config import resolve

# [controller] keys that shape the controller rather than tune it: never live
STRUCTURAL = ("type", "law", "state_size", "detection_slot", "output", "torque_to_voltage")
SAFETY_KEYS = ("safety.max_command", "safety.max_slew")
# keys whose default is "not set" (the drives' range or no slew limit; start at q0): the value [] sets them back
UNSETTABLE = ("safety.max_command", "safety.max_slew", "controller.start")

def raw_config(resolved: dict) -> dict:
    """A resolved config as a dict (``Config.to_dict()``, a log's ``meta``) made a raw
    config that ``resolve`` accepts again: unset keys (None) left out."""
    if isinstance(resolved, dict):
        return {k: raw_config(v) for k, v in resolved.items() if v is not None}
    if isinstance(resolved, list):
        return [raw_config(v) for v in resolved]
    return resolved


def live_keys(cfg: Config) -> list[str]:
    """The dotted keys this config's run can change live."""
    controller = [f"controller.{name}" for name in cfg.to_dict()["controller"]
                  if name not in STRUCTURAL]
    if cfg.controller.law is None:
        controller.remove("controller.params")   # the built-in laws' params are derived
    else:
        controller = ["controller.params"]        # a user's law: its params only
    return sorted(controller) + list(SAFETY_KEYS)


def changed_config(cfg: Config, changes: dict) -> Config:
    """``cfg`` with ``changes`` (dotted key -> value) applied and validated as a config;
    ConfigError naming the key and the reason."""
    allowed = live_keys(cfg)
    raw = raw_config(cfg.to_dict())
    for key, value in changes.items():
        if key not in allowed:
            near = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{key}: not a live parameter of this run{hint}; live: "
                              + ", ".join(allowed))
        table, name = key.split(".", 1)
        if value == [] and key in UNSETTABLE:
            raw.get(table, {}).pop(name, None)      # [] unsets a key whose default is unset
        else:
            raw.setdefault(table, {})[name] = value
    return resolve(raw)


def controller_arrays(cfg: Config, unit: str, n_params: int,
                      nact: int) -> tuple[np.ndarray, np.ndarray]:
    """The law's params and the (2, nact) command limits of ``cfg`` for a link that takes
    ``unit``; ConfigError if the params no longer have ``n_params`` values (a structural
    change)."""
    params = controller_from_config(cfg, unit, allow_python=True).params
    if len(params) != n_params:
        raise ConfigError(f"controller: this change gives the law {len(params)} params instead "
                          f"of {n_params}: not a live change (restart the run)")
    return params, config_limits(cfg, nact, unit)
