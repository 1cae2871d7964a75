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


def command_unit(link_type: str, drive: str) -> str:
    """What the link ``link_type`` takes on a plant driven by ``drive`` (plant.drive): the
    unit its LinkSpec declares ("N m" for torque-mode drives), else the plant's ("N m" for
    a torque-driven plant, "V" for motors). The one answer to "does this link take
    torques": the config's checks and defaults, the command limits, the controller and
    the links all ask here."""
    declared = link_spec(link_type).command_unit
    if declared is not None:
        return declared
    return "N m" if drive == "torque" else "V"


def link_from_config(cfg: Config) -> Link:
    """The link ``cfg.link.type`` names, built from the config (not yet configured)."""
    spec = link_spec(cfg.link.type)
    return load_object(spec.implementation, "link.type").from_config(cfg)
