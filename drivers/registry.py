"""Links by name: ``link.type`` in a config picks one, nothing else changes.

Links are LinkSpecs (drivers.link) found in the entry-point group ``hilrig.links``;
hilrig's own four are registered there (pyproject.toml) as a user's package registers
its own. A spec names its Link class as "module:Class", imported only when its link is
used, so a rig without CAN hardware never imports the CAN stack.
"""
from __future__ import annotations

from functools import lru_cache

from hilrig.drivers.link import Link, LinkSpec
from hilrig.plugins import load_object, lookup, registered
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
    return lookup(GROUP, name, "link.type", LinkSpec)


def link_from_config(cfg: Config) -> Link:
    """The link ``cfg.link.type`` names, built from the config (not yet configured)."""
    spec = link_spec(cfg.link.type)
    return load_object(spec.implementation, "link.type").from_config(cfg)
