"""The packet-serial link's config: its ``[link.serial]`` keys and rules, registered as the
link ``serial`` (entry-point group hilrig.links). The link itself (drivers.serial_link)
is imported only when a run uses it."""
from __future__ import annotations

from hilrig.drivers.link import LinkSpec
from hilrig.errors import ConfigError
from hilrig.schema import Key

KEYS = {  # RoboClaw-style packet serial (drivers/serial_link.py)
    "port": Key("str", "unix://$RUNTIME/roboclaw",
                doc="serial device path (/dev/ttyACM0; a path where the emulator links its "
                    "pty), or unix://PATH, the emulator's socket ($RUNTIME: this user's "
                    "runtime folder; docs/RIGPC.md: a pty is not real-time)"),
    "baud": Key("int", 460800, choices=(2400, 9600, 19200, 38400, 57600, 115200,
                                        230400, 460800),
                doc="TTL serial baud rate, bit/s (USB and ptys ignore it)"),
    "axes": Key("pairs", None, length="nact",
                doc="[address, channel] per actuated joint: address 128..135 "
                    "(0x80..0x87), channel 1 (M1) or 2 (M2); default: two motors per "
                    "controller from 0x80 up"),
    "counts_per_rev": Key("floats", 2048.0, length="nact", scalar_ok=True,
                          positive=True,
                          doc="quadrature encoder counts per motor revolution"),
    "supply_voltage": Key("float", 0.0, minimum=0.0,
                          doc="motor supply, V: duty = u / supply; 0: read each "
                              "controller's main battery voltage when the link opens"),
    "timeout": Key("float", 0.002, positive=True,
                   doc="longest wait for one reply, s"),
    "retries": Key("int", 1, minimum=0, doc="repeats of a failed exchange within a tick"),
    "budget": Key("float", 0.004, positive=True,
                  doc="longest one read or one write may take (all its exchanges and "
                      "retries), s"),
    "drive_timeout": Key("float", 0.0, minimum=0.0,
                         doc="drive-side serial timeout (cmd 14), s, in steps of 0.1 "
                             "up to 25.5: the drive stops its motors when no valid "
                             "packet arrives for this long; 0: off"),
    "max_current": Key("floats", 0.0, length="nact", scalar_ok=True, minimum=0.0,
                       doc="motor current limit written to the drive at open "
                           "(cmds 133/134), A; 0: keep the drive's setting"),
    "command": Key("str", "duty", choices=("duty", "speed"),
                   doc="duty: DutyM1M2 (duty = u / supply); speed: SpeedM1M2, the drive's "
                       "velocity PID holds speed = duty x QPPS / 32767 counts/s"),
    "on_crc_error": Key("str", "retry", choices=("retry", "stop"),
                        doc="a reply with a bad CRC (or a corrupted ACK): retry (counted in "
                            "crc_errors, the exchange repeated; one line when the link "
                            "recovers) or stop (the run stops at the first, in one line)"),
    "pipeline": Key("bool", False,
                    doc="send each controller's read requests in one write and wait for "
                        "their replies together, timeout per request: one round trip per "
                        "controller and tick instead of four to six (a pty delivers each "
                        "with a kernel worker of normal priority, late on a busy host)"),
    "overcurrent_ticks": Key("int", 20, minimum=0,
                             doc="an over-current warning on this many consecutive "
                                 "reads is a drive fault (a stalled or jammed joint); "
                                 "0: warnings are not faults"),
}


def check(cfg: dict, sizes: dict) -> None:
    """Fill the default axis map of ``link.serial`` and check what one key alone cannot."""
    serial = cfg["link"]["serial"]
    if serial["axes"] is None:
        serial["axes"] = [[0x80 + j // 2, 1 + j % 2] for j in range(sizes["nact"])]
        if serial["axes"][-1][0] > 0x87:
            raise ConfigError(f"link.serial.axes: {sizes['nact']} joints need more than the 8 "
                              "controller addresses 0x80..0x87")
    for i, (address, channel) in enumerate(serial["axes"]):
        if not 0x80 <= address <= 0x87:
            raise ConfigError(f"link.serial.axes[{i}]: address must be 128..135 (0x80..0x87), "
                              f"got {address}")
        if channel not in (1, 2):
            raise ConfigError(f"link.serial.axes[{i}]: channel must be 1 (M1) or 2 (M2), "
                              f"got {channel}")
        if [address, channel] in serial["axes"][:i]:
            raise ConfigError(f"link.serial.axes[{i}]: motor M{channel} of 0x{address:02X} is "
                              "already mapped to another joint")
    if "://" in serial["port"]:
        from hilrig.drivers.protocol_unix import url_path

        try:
            url_path(serial["port"])    # unix:///PATH or unix://$RUNTIME/NAME, nothing else
        except ConfigError as exc:
            raise ConfigError(f"link.serial.port: {exc}") from None
    units = serial["drive_timeout"] * 10.0
    if units > 255.0 + 1e-9 or abs(units - round(units)) > 1e-6:
        raise ConfigError(f"link.serial.drive_timeout: must be a multiple of 0.1 s up to 25.5 s, "
                          f"got {serial['drive_timeout']}")
    if cfg["link"]["type"] != "serial":
        return
    if cfg["plant"]["drive"] == "torque":
        raise ConfigError("link.type: 'serial' drives DC motors by duty cycle; set plant.drive = "
                          "'voltage' or 'voltage_full'")
    if cfg["emulator"]["mode"] != "lockstep" and 2.0 * serial["budget"] > cfg["sim"]["dt"]:
        raise ConfigError(f"link.serial.budget: a read and a write may take 2 x "
                          f"{serial['budget']} s, more than one tick (sim.dt = "
                          f"{cfg['sim']['dt']} s)")


SERIAL = LinkSpec("serial", "hilrig.drivers.serial_link:SerialLink", KEYS, check)
