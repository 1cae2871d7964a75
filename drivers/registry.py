"""Links by name: ``link.type`` in a config picks one, nothing else changes.

Links are LinkSpecs (drivers.link) found in the entry-point group ``hilrig.links``;
hilrig's own four are registered there (pyproject.toml) as a user's package registers
its own. A spec names its Link class as "module:Class", imported only when its link is
used, so a rig without CAN hardware never imports the CAN stack.
"""
from __future__ import annotations

import difflib
from functools import lru_cache

from hilrig.drivers.link import Link, LinkSpec
from hilrig.errors import ConfigError
from hilrig.plugins import load_object, registered
from hilrig.schema import Config

GROUP = "hilrig.links"
INPROCESS = LinkSpec("inprocess", "hilrig.drivers.inprocess:PlantLink")
ZMQ = LinkSpec("zmq", "hilrig.drivers.zmq_link:ZmqLink")


@lru_cache(maxsize=None)
def links() -> dict[str, str]:
    """Registered links: name -> "module:attribute" of their LinkSpec."""
    return registered(GROUP)


@lru_cache(maxsize=None)
def link_spec(name: str) -> LinkSpec:
    """The LinkSpec ``link.type`` names; ConfigError with the known names otherwise."""
    if name not in links():
        hint = difflib.get_close_matches(name, list(links()), n=1)
        raise ConfigError(f"link.type: no link {name!r} is registered"
                          + (f" (did you mean {hint[0]!r}?)" if hint else "")
                          + f"; known: {', '.join(sorted(links()))}")
    spec = load_object(links()[name], "link.type")
    if not isinstance(spec, LinkSpec):
        raise ConfigError(f"link.type: {links()[name]!r} is a {type(spec).__name__}, not a "
                          "hilrig.drivers.link.LinkSpec")
    return spec


def link_from_config(cfg: Config) -> Link:
    """The link ``cfg.link.type`` names, built from the config (not yet configured)."""
    spec = link_spec(cfg.link.type)
    return load_object(spec.implementation, "link.type").from_config(cfg)
