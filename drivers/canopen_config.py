"""The CANopen link's config: its ``[link.canopen]`` keys and rules, registered as the link
``canopen`` (entry-point group hilrig.links). The link itself (drivers.canopen_link, with
the CAN stack) is imported only when a run uses it."""
from __future__ import annotations

from hilrig.drivers.busload import bus_load, max_axes
from hilrig.drivers.cia402 import interpolation_period
from hilrig.drivers.link import LinkSpec
from hilrig.errors import ConfigError
from hilrig.schema import Key

ZMQ_DEFAULT_CHANNEL = "ipc://$RUNTIME/can"     # $RUNTIME: the runtime folder

KEYS = {   # CiA 402 drives in cyclic synchronous torque mode (docs/CANOPEN.md)
    "interface": Key("str", "virtual",
                     doc="python-can interface: socketcan, pcan, kvaser, virtual, "
                         "hilrig_zmq (emulated drives in another process), ..."),
    "channel": Key("str", None, doc="python-can channel (can0, PCAN_USBBUS1, "
                                    "ipc:///PATH or tcp://127.0.0.1:PORT for hilrig_zmq, ...); "
                                    "default ipc://$RUNTIME/can (your runtime folder) on hilrig_zmq, else hilrig"),
    "bitrate": Key("int", 1_000_000, positive=True,
                   doc="bit/s; the cycle must fit (docs/CANOPEN.md, bus-load plan)"),
    "node_ids": Key("ints", None, length="nact",
                    doc="CANopen node-id of each axis' drive, 1..127 (default 1..n)"),
    "master_id": Key("int", 127, positive=True,
                     doc="node-id under which the controller sends its heartbeat"),
    "counts_per_rev": Key("floats", 4096.0, length="nact", scalar_ok=True, positive=True,
                          doc="encoder increments per motor revolution (0x6064 unit)"),
    "rated_current": Key("floats", 2.0, length="nact", scalar_ok=True, positive=True,
                         doc="motor rated current 0x6075, A (basis of 0x6078)"),
    "rated_torque": Key("floats", None, length="nact", scalar_ok=True, positive=True,
                        doc="motor rated torque 0x6076 at the motor shaft, N m (basis "
                            "of 0x6071); default torque_constant * rated_current"),
    "max_torque": Key("int", 5000, positive=True,
                      doc="torque limit 0x6072, per-mille of the rated torque; the link "
                          "clamps commands to it"),
    "heartbeat_period": Key("float", 0.1, positive=True,
                            doc="heartbeat producer time of drives and controller, s"),
    "heartbeat_timeout": Key("float", 0.3, positive=True,
                             doc="consumer time: no heartbeat for this long means the "
                                 "peer is lost (both directions), s"),
    "tpdo_timeout": Key("float", None, positive=True,
                        doc="read waits at most this long after SYNC for the TPDOs, "
                            "s (default sim.dt / 2)"),
    "max_missed": Key("int", 3, positive=True,
                      doc="consecutive cycles without all TPDOs before the link is lost"),
    "sdo_timeout": Key("float", 0.3, positive=True, doc="SDO response timeout, s"),
    "boot_timeout": Key("float", 2.0, positive=True,
                        doc="wait for boot-up, and for each state change when enabling, s"),
    "quick_stop_deceleration": Key(
        "floats", None, length="nact", scalar_ok=True, positive=True,
        doc="quick stop deceleration 0x6085 written to each drive before a controlled stop "
            "(hil estop --category 1|2), rad/s^2 at the joint; unset: each joint's rate at "
            "the stop / (0.7 safety.stop_time), at rest within the stop time"),
}


def check(cfg: dict, sizes: dict) -> None:
    """Fill the table's defaults that depend on the plant; when link.type is "canopen",
    check what one key alone cannot (node-ids, heartbeat, the bus load of the cycle)."""
    can = cfg["link"]["canopen"]
    if can["channel"] is None:
        can["channel"] = ZMQ_DEFAULT_CHANNEL if can["interface"] == "hilrig_zmq" else "hilrig"
    if can["interface"] == "hilrig_zmq" and not can["channel"].startswith(("ipc://", "tcp://")):
        raise ConfigError(f"link.canopen.channel: the hilrig_zmq interface takes ipc:///PATH or "
                          f"tcp://127.0.0.1:PORT, got {can['channel']!r}")
    if can["node_ids"] is None:
        can["node_ids"] = list(range(1, sizes["nact"] + 1))
    if can["rated_torque"] is None:
        can["rated_torque"] = [k * i for k, i in zip(cfg["plant"]["motor"]["torque_constant"],
                                                     can["rated_current"])]
    if can["tpdo_timeout"] is None:
        can["tpdo_timeout"] = 0.5 * cfg["sim"]["dt"]
    if cfg["link"]["type"] != "canopen":
        return
    can, ctrl, sim = cfg["link"]["canopen"], cfg["controller"], cfg["sim"]
    name = "link.canopen."
    ids = can["node_ids"]
    if any(not 1 <= i <= 127 for i in ids) or len(set(ids)) != len(ids):
        raise ConfigError(f"{name}node_ids: must be distinct node-ids 1..127, got {ids}")
    if not 1 <= can["master_id"] <= 127 or can["master_id"] in ids:
        raise ConfigError(f"{name}master_id: must be 1..127 and not a drive's node-id, got "
                          f"{can['master_id']}")
    if can["max_torque"] > 32767:
        raise ConfigError(f"{name}max_torque: must be <= 32767 per-mille (0x6071 is INTEGER16), "
                          f"got {can['max_torque']}")
    if can["heartbeat_timeout"] <= can["heartbeat_period"]:
        raise ConfigError(f"{name}heartbeat_timeout: must exceed heartbeat_period "
                          f"({can['heartbeat_period']} s), got {can['heartbeat_timeout']} s")
    if cfg["emulator"]["canopen"]["event_timer"] > 65.535:
        raise ConfigError("emulator.canopen.event_timer: at most 65.535 s (0x1800:05 is UNSIGNED16 "
                          f"ms), got {cfg['emulator']['canopen']['event_timer']} s")
    if cfg["input"]["voltage"] is not None:
        raise ConfigError("input.voltage: CiA 402 drives in cyclic synchronous torque mode take "
                          "torques (link.type = 'canopen'); give input.torque")
    if ctrl["type"] == "pd" and ctrl["output"] != "torque":
        raise ConfigError("controller.output: CiA 402 drives in cyclic synchronous torque mode "
                          "take torques (link.type = 'canopen'); set controller.output = 'torque'")
    n, period, bitrate = sizes["nact"], sim["dt"], can["bitrate"]
    if bus_load(n, period, bitrate) > 1.0:
        raise ConfigError(
            f"sim.dt: {n} axes need {bus_load(n, period, bitrate):.0%} of a "
            f"{bitrate / 1e6:g} Mbit/s bus at a {period * 1e3:g} ms cycle (worst-case bit "
            f"stuffing); at most {max_axes(period, bitrate)} axes fit. Lengthen sim.dt, raise "
            "link.canopen.bitrate or split the axes over two buses (docs/CANOPEN.md)")
    try:
        interpolation_period(period)
    except ValueError as exc:
        raise ConfigError(f"sim.dt: {exc}") from None


CANOPEN = LinkSpec("canopen", "hilrig.drivers.canopen_link:CanopenLink", KEYS, check,
                   command_unit="N m")
