"""The configs shipped with the package (``hilrig.configs``): names, descriptions, text.

A built-in config is named after its file without ``.toml`` (``rrr3_pd`` is
``hilrig/configs/rrr3_pd.toml``); its description is the first line of its leading
comment. The files are read through ``importlib.resources``, so they are found the
same way from a checkout, an editable install or an installed wheel.
"""
from __future__ import annotations

import difflib
from importlib import resources
from typing import TYPE_CHECKING

from hilrig.errors import ConfigError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

PACKAGE = "hilrig.configs"
SUFFIX = ".toml"


def directory() -> Traversable:
    """Where the built-in configs live (a directory inside the installed package)."""
    return resources.files(PACKAGE)


def names() -> list[str]:
    """The built-in configs' names, sorted."""
    return sorted(entry.name[:-len(SUFFIX)] for entry in directory().iterdir()
                  if entry.name.endswith(SUFFIX) and entry.is_file())


def find(name: str) -> Traversable | None:
    """The file of the built-in config ``name``, or None if there is none of that name."""
    return directory() / f"{name}{SUFFIX}" if name in names() else None


def text(name: str) -> str:
    """The TOML text of the built-in config ``name``; ConfigError if there is none."""
    source = find(name)
    if source is None:
        raise ConfigError(f"no built-in config {name!r}; {suggestion(name)}")
    return source.read_text(encoding="utf-8")


def description(name: str) -> str:
    """The first line of the config's leading comment, without the ``#``."""
    lines = text(name).splitlines()
    first = lines[0] if lines else ""
    return first.lstrip("#").strip() if first.startswith("#") else ""


def closest(name: str, count: int = 3) -> list[str]:
    """The ``count`` built-in names nearest to ``name`` (to its stem, if it is a file name),
    nearest first."""
    stem = name.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(SUFFIX)
    return difflib.get_close_matches(stem, names(), n=count, cutoff=0.0)


def suggestion(name: str) -> str:
    """The hint for a name that is no built-in config: the closest ones."""
    return f"closest built-in: {', '.join(closest(name))} (`hil configs` lists them all)"
