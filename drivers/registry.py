"""Links by name: ``link.type`` in a config picks one, nothing else changes.

Each entry names a module and a class with ``from_config(cfg) -> Link``; the
module is imported only when its link is used, so a rig without CAN hardware
never imports the CAN stack.
"""
from __future__ import annotations

import importlib

from hilrig.drivers.link import Link

LINKS = {
    "inprocess": "hilrig.drivers.inprocess:PlantLink",
    "zmq": "hilrig.drivers.zmq_link:ZmqLink",
    "canopen": "hilrig.drivers.canopen_link:CanopenLink",
    "serial": "hilrig.drivers.serial_link:SerialLink",
}


def link_from_config(cfg: dict) -> Link:
    """The link ``cfg['link']['type']`` names, built from the config (not yet opened)."""
    name = cfg["link"]["type"]
    if name not in LINKS:
        raise ValueError(f"link.type: unknown link {name!r} (one of {sorted(LINKS)})")
    module, cls = LINKS[name].split(":")
    return getattr(importlib.import_module(module), cls).from_config(cfg)
