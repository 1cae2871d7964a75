"""Finding a user's part: entry-point registries and "package.module:attribute" names.

Importable from every layer: plant models (``hilrig.plants``), control-law builders
(``hilrig.controllers``) and links (``hilrig.links``) are each one entry-point group, and
a config may also name a part directly by its module and attribute.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from importlib.metadata import entry_points
from typing import Any

from hilrig.errors import ConfigError


def registered(group: str) -> dict[str, str]:
    """The entry points of ``group``: name -> "module:attribute"."""
    return {ep.name: ep.value for ep in entry_points(group=group)}


def _import_here(module_name: str):
    """Import a module from the installed packages or, when none has its top-level name,
    from the current folder (a user's module or package beside their config).

    Only that module (or package, whose submodules then follow) is taken from the current
    folder: the folder is never put on ``sys.path``, so a file there named like an
    installed package (a planted ``matplotlib.py``) is never imported in its place.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        if exc.name != top:
            raise
    spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd()])
    if spec is None:
        raise ModuleNotFoundError(f"No module named {top!r} (installed, or in the current "
                                  f"folder {os.getcwd()})", name=top)
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[top]
        raise
    return importlib.import_module(module_name)


def load_object(reference: str, key: str) -> Any:
    """The object a "package.module:attribute" string names; ConfigError names ``key``."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"{key}: expected 'package.module:function', got {reference!r}")
    try:
        module = _import_here(module_name)
    except ImportError as exc:
        raise ConfigError(f"{key}: cannot import {module_name!r}: {exc}") from None
    target = module
    try:
        for part in attribute.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise ConfigError(f"{key}: module {module_name!r} has no {attribute!r}") from None
    return target


def lookup(group: str, name: str, key: str, expected: type | tuple[type, ...],
           references: bool = False) -> Any:
    """The part registered as ``name`` in the entry-point ``group`` (or, with
    ``references``, named directly as "package.module:attribute"), checked to be an
    ``expected`` instance. ConfigError names ``key``, the known names and the nearest one.
    """
    known = registered(group)
    if name not in known and not (references and ":" in name):
        hint = difflib.get_close_matches(name, list(known), n=1)
        raise ConfigError(f"{key}: no {key.split('.')[0]} {name!r} is registered"
                          + (f" (did you mean {hint[0]!r}?)" if hint else "")
                          + f"; known: {', '.join(sorted(known))}"
                          + (", or 'package.module:NAME'" if references else ""))
    target = load_object(known.get(name, name), key)
    if not isinstance(target, expected):
        kinds = expected if isinstance(expected, tuple) else (expected,)
        raise ConfigError(f"{key}: {name!r} is a {type(target).__name__}, not a "
                          + " or ".join(kind.__name__ for kind in kinds))
    return target
