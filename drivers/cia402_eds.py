"""The EDS file (CiA 306) of an emulated CiA 402 drive, for a configuration tool or a master.

``eds_text(cfg, node_id)`` is the object dictionary the emulated drive of that node
serves (``cia402.object_dictionary`` with the ratings, heartbeat and event timer of
the config), written in the electronic data sheet format: ``[FileInfo]``,
``[DeviceInfo]`` (baud rates, granularity 8, 4 RPDOs and 4 TPDOs, no LSS),
``[MandatoryObjects]`` (0x1000, 0x1001, 0x1018), ``[OptionalObjects]``,
``[ManufacturerObjects]`` (none) and a section per object and sub-index with
ParameterName, ObjectType, DataType, AccessType, DefaultValue and PDOMapping (1 on
the objects a master may map: controlword, target torque, statusword, the actual
values, ...). PDO COB-IDs are written relative to the node-id (``$NODEID+0x180``), so
the file serves any node of the rig; ``canopen.import_od(path, node_id)`` resolves them.

``hil canopen eds --node N [CONFIG] [-o FILE]`` writes it.
"""
from __future__ import annotations

import configparser
import datetime
import io
import re

import canopen
from hilrig.drivers import cia402
from hilrig.errors import ConfigError
from hilrig.schema import Config

EDS_VERSION = "4.0"
_PREDEFINED_BASES = (0x180, 0x200, 0x280, 0x300, 0x380, 0x400, 0x480, 0x500)


def drive_dictionary(cfg: Config, node_id: int) -> canopen.ObjectDictionary:
    """The object dictionary the emulated drive at ``node_id`` serves under ``cfg``."""
    can = cfg.link.canopen
    if node_id not in can.node_ids:
        raise ConfigError(f"--node {node_id}: not a drive of this config (link.canopen.node_ids "
                          f"= {list(can.node_ids)})")
    axis = list(can.node_ids).index(node_id)
    return cia402.object_dictionary(
        node_id, int(round(can.rated_torque[axis] * 1000)),
        int(round(can.rated_current[axis] * 1000)), can.max_torque,
        heartbeat_ms=heartbeat_ms(cfg), event_timer_ms=event_timer_ms(cfg))


def heartbeat_ms(cfg: Config) -> int:
    """0x1017 at power-on: ``link.canopen.heartbeat_period`` in ms (at least 1)."""
    return max(1, round(cfg.link.canopen.heartbeat_period * 1000))


def event_timer_ms(cfg: Config) -> int:
    """The default TPDOs' event timer: ``emulator.canopen.event_timer`` in ms (at least 1)."""
    return max(1, round(cfg.emulator.canopen.event_timer * 1000))


def eds_text(cfg: Config, node_id: int, now: datetime.datetime | None = None) -> str:
    """The EDS of the emulated drive at ``node_id`` (see the module docstring)."""
    d = drive_dictionary(cfg, node_id)
    for index in list(range(cia402.RPDO_COM, cia402.RPDO_COM + cia402.N_PDO)) + \
            list(range(cia402.TPDO_COM, cia402.TPDO_COM + cia402.N_PDO)):
        var = d[index][1]
        offset = var.default - node_id
        if offset & 0x7FF in _PREDEFINED_BASES:
            var.default_raw = f"$NODEID+0x{offset:X}"
    for obj in d.values():
        for var in obj.values() if hasattr(obj, "values") else (obj,):
            if isinstance(var.default, int) and var.default < 0:
                var.default_raw = str(var.default)      # canopen would write "0x-3"
    raw = io.StringIO()
    canopen.export_od(d, raw, doc_type="eds")
    parser = configparser.RawConfigParser()
    parser.optionxform = str
    parser.read_string(raw.getvalue())
    for section in parser.sections():
        if parser.has_option(section, "PDOMapping"):     # BOOLEAN: 0 or 1
            parser.set(section, "PDOMapping", str(int(parser.get(section, "PDOMapping"), 0)))
    now = now or datetime.datetime.now()
    stamp = {"Date": now.strftime("%m-%d-%Y"), "Time": now.strftime("%I:%M%p")}
    file_info = {"FileName": f"hilrig_cia402_node{node_id}.eds", "FileVersion": "1",
                 "FileRevision": "1", "EDSVersion": EDS_VERSION,
                 "Description": "hilrig emulated CiA 402 drive (cyclic synchronous torque)",
                 "CreationTime": stamp["Time"], "CreationDate": stamp["Date"],
                 "CreatedBy": "hil canopen eds", "ModificationTime": stamp["Time"],
                 "ModificationDate": stamp["Date"], "ModifiedBy": "hil canopen eds"}
    parser.remove_section("FileInfo")
    out = io.StringIO()
    out.write("[FileInfo]\n" + "".join(f"{k}={v}\n" for k, v in file_info.items()) + "\n")
    parser.write(out, space_around_delimiters=False)
    return re.sub(r"\n{3,}", "\n\n", out.getvalue())
