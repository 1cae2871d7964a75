"""The config's declarations and its typed form, importable from every layer.

Every key of a config is declared once. The common tables ([sim], [loop], [safety], the
common keys of [plant], [controller] and [link], ...) are the static frozen dataclasses
below: each field is annotated with the Python type of its resolved value and carries the
rest of its declaration (``key(default, ...)``: range, choices, length, doc), so an editor
and a type checker know that ``cfg.sim.dt`` is a float, and settings.config validates
against the ``Key``s the same fields give (``declarations``). A part that owns more keys
declares them as ``Key``s: a plant model its ``[plant]`` keys, a controller type its
``[controller]`` keys, a link its ``[link.NAME]`` table (a user's package likewise);
``typed`` then makes the tables they extend subclasses of the static ones, made at run
time from those Keys (``dataclasses.make_dataclass``), so their keys are typed attributes
too.

Adding a key to a common table is one field in its class below; adding a table is one
class and its field in ``Config``.

No ``from __future__ import annotations`` here: the fields' types are the classes
themselves (``dataclasses.fields(cfg.sim)`` says ``float``, not ``"float"``).
"""
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Optional


@dataclass(frozen=True)
class Key:
    """Declaration of one config key.

    kind: "float", "int", "bool", "str", "floats" (list of numbers, or one number
    broadcast when ``scalar_ok``), "ints", "bools" (list of true/false, or one broadcast
    when ``scalar_ok``), "pairs" (list of [int, int]). length: None,
    an int, or the name of a size resolved from the plant ("nq" coordinates, "nact"
    actuated joints). doc: what the value means, with its unit.
    """

    kind: str
    default: Any = None
    length: Any = None
    choices: tuple = ()
    minimum: Optional[float] = None
    positive: bool = False
    scalar_ok: bool = False
    required: bool = False
    doc: str = ""
    infinite_ok: bool = False     # a float that may be +-inf (a limit switched off on purpose)


# the Python type of a resolved value of each kind (lists become tuples)
ANNOTATIONS = {"float": float, "int": int, "bool": bool, "str": str,
               "floats": tuple[float, ...], "ints": tuple[int, ...], "bools": tuple[bool, ...],
               "pairs": tuple[tuple[int, int], ...]}
KINDS = {annotation: kind for kind, annotation in ANNOTATIONS.items()}


def key(default: Any = None, **options: Any) -> Any:
    """A key of a common table: the field's annotation is its kind (``float``: "float",
    ``tuple[float, ...]``: "floats", ``X | None``: unset by default), ``default`` and
    ``options`` (``Key``'s other fields: length, choices, minimum, positive, ...) the rest
    of its ``Key``. The dataclass field has no default: a table is made from a resolved
    config, whose defaults settings.config filled in."""
    Key("", default, **options)           # a misspelt option fails here, at import
    return field(metadata={"key": dict(default=default, **options)})


def table() -> Any:
    """A field that holds a table (its annotation a Table class) or a list of tables
    (``tuple[TableClass, ...]``: a TOML table or an array of tables)."""
    return field()


@dataclass(frozen=True)
class Table:
    """Base of the frozen dataclass of every table of a resolved config (no fields: a
    table that no class declares, a link's own, starts here)."""

    def to_dict(self) -> dict:
        """The table as in the resolved config: a plain nested dict (lists, not tuples)."""
        return plain(self)


class Tables(dict):
    """The declarations of a list of tables (``faults.jam``): a TOML table or an array of
    tables, each checked against these keys."""


# -- the common tables ------------------------------------------------------------------

@dataclass(frozen=True)
class SimTable(Table):
    """[sim]: the run's length, step and integrator; what the offline runs' controller
    sees and when its command acts (the real-time paths take theirs from the link or
    emulator)."""

    duration: float = key(10.0, positive=True, doc="run length, s")
    dt: float = key(0.001, positive=True, doc="fixed step and control period, s")
    integrator: str = key("rk4", choices=("rk4", "euler", "rosenbrock", "accurate"),
                          doc="rosenbrock: linearly implicit, for stiff chains (plant.rosenbrock)")
    rtol: float = key(1e-10, positive=True, doc="accurate path relative tolerance")
    atol: float = key(1e-12, positive=True, doc="accurate path absolute tolerance")
    accurate_method: str = key("DOP853", choices=("DOP853", "Radau", "BDF", "RK45", "LSODA"))
    control: str = key("sampled", choices=("sampled", "continuous"),
                       doc="sampled: command held over each step (a real controller); "
                           "continuous: evaluated at every instant (accurate path only)")
    position_noise: float = key(0.0, minimum=0.0,
                                doc="std of Gaussian noise on each measured joint position, "
                                    "rad (m for a prismatic joint); offline fixed-step runs")
    velocity_noise: float = key(0.0, minimum=0.0,
                                doc="std of Gaussian noise on each measured joint rate, "
                                    "rad/s; offline fixed-step runs")
    noise_seed: int = key(0, minimum=0, doc="seed of the measurement noise")
    command_latency: float = key(0.0, minimum=0.0,
                                 doc="a command acts this long after the measurement it was "
                                     "computed from (a whole number of sim.dt; zero before "
                                     "the first arrives), s; offline fixed-step runs")


@dataclass(frozen=True)
class MotorTable(Table):
    """[plant.motor]: the DC motors and gears, one value per actuated joint (eq. 16)."""

    rotor_inertia: tuple[float, ...] = key(0.01, length="nact", scalar_ok=True, minimum=0.0)
    resistance: tuple[float, ...] = key(3.0, length="nact", scalar_ok=True, positive=True)
    inductance: tuple[float, ...] = key(1e-3, length="nact", scalar_ok=True, positive=True)
    torque_constant: tuple[float, ...] = key(3.0, length="nact", scalar_ok=True,
                                             positive=True)
    back_emf_constant: tuple[float, ...] = key(0.1, length="nact", scalar_ok=True,
                                               minimum=0.0)
    viscous_friction: tuple[float, ...] = key(0.0, length="nact", scalar_ok=True,
                                              minimum=0.0)
    gear_ratio: tuple[float, ...] = key(10.0, length="nact", scalar_ok=True, positive=True)


@dataclass(frozen=True)
class PlantTable(Table):
    """[plant]: the keys of every model; the model's own keys (its PlantModel's ``keys``)
    are fields of the subclass ``typed`` makes for it."""

    model: str = key(required=True,
                     doc="a registered plant model (entry-point group hilrig.plants; a "
                         "wrong name lists them), or 'package.module:MODEL'")
    # unset: filled in from the model (its default drive, q0 = qd0 = 0)
    drive: str = key(None, choices=("torque", "voltage", "voltage_full"),
                     doc="torque-driven joints, or DC motors (voltage_full: current as a state)")
    q0: tuple[float, ...] = key(None, length="nq",
                                doc="initial coordinates, rad (m for x_C, y_C)")
    qd0: tuple[float, ...] = key(None, length="nq", doc="initial rates")
    motor: MotorTable = table()

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            """A model's own key (a field of the subclass made at run time)."""


@dataclass(frozen=True)
class InputTable(Table):
    """[input]: the constant command of an open-loop run."""

    voltage: Optional[tuple[float, ...]] = key(None, length="nact", scalar_ok=True,
                                               doc="constant motor voltages, V")
    torque: Optional[tuple[float, ...]] = key(None, length="nact", scalar_ok=True,
                                              doc="constant joint torques, N m")


@dataclass(frozen=True)
class ControllerTable(Table):
    """[controller]: the keys of every controller; a controller type's own keys (its
    ControllerSpec's ``keys``) are fields of the subclass ``typed`` makes for it."""

    type: str = key("open_loop",
                    doc="a registered controller (entry-point group hilrig.controllers): "
                        "open_loop, pd, feedforward (computed-torque feed-forward from the "
                        "model's inverse dynamics plus PD on the error: serial and URDF "
                        "arms), or a package's own")
    law: Optional[str] = key(None,
                             doc="the user's own law, 'package.module:function' "
                                 "(controllers/interface.py: law(t, pos, vel, cur, params, "
                                 "state, u)); replaces controller.type")
    params: tuple[float, ...] = key([], doc="controller.law's params array")
    state_size: int = key(0, minimum=0,
                          doc="length of controller.law's state array (zeros at the start)")
    detection_slot: Optional[int] = key(None, minimum=0,
                                        doc="the entry of controller.law's state where it "
                                            "reports a detected fault: 0 none, else a "
                                            "nonzero code (the 1-based joint it blames); "
                                            "the first tick it turns nonzero is the "
                                            "fault_detected event (docs/FAULTS.md). Unset: "
                                            "the law reports none")
    with_model: bool = key(False,
                           doc="append the plant's rigid-body model block to controller.law's "
                               "params, for plant.model_kernels (URDF and serial arms)")
    # unset: filled in from what the link takes
    output: str = key(None, choices=("voltage", "torque"),
                      doc="what the law computes; on a voltage-driven plant torque goes to "
                          "volts by controller.torque_to_voltage")

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            """A controller type's own key (a field of the subclass made at run time)."""


@dataclass(frozen=True)
class LoopTable(Table):
    """[loop]: the paced real-time loop."""

    overrun: str = key("skip", choices=("skip", "catch_up", "stop"),
                       doc="after a missed deadline: skip the missed ticks, run them "
                           "back to back, or stop safely after max_overruns")
    max_overruns: int = key(10, minimum=1, doc="overruns before a 'stop' policy stops")
    spin: float = key(5e-4, minimum=0.0,
                      doc="busy-wait this long before each deadline (sleep until then), s; at "
                          "most half the period, so that SCHED_FIFO is never throttled")
    rehearse: float = key(3e-5, minimum=0.0,
                          doc="this long before each deadline, inside the spin, run the "
                              "tick's arithmetic once on scratch copies, so that the real "
                              "tick finds its code and data in cache, s (0: off)")
    cpu: int = key(-1, minimum=-1, doc="pin the loop to this CPU (-1: no pinning)")
    fifo_priority: int = key(80, minimum=0,
                             doc="SCHED_FIFO priority of the loop thread (0: normal "
                                 "scheduling); refused without root or CAP_SYS_NICE, and "
                                 "reported")
    gc_freeze: bool = key(True, doc="gc.freeze() and disable the collector while running")
    correction: str = key("worker", choices=("inline", "worker"),
                          doc="3RRR constraint correction in real time: in the tick (inline) "
                              "or in a worker thread off the critical path; --fast runs inline")
    worker_poll: float = key(1e-4, positive=True,
                             doc="the correction worker's sleep between checks, s")


@dataclass(frozen=True)
class TelemetryTable(Table):
    """[telemetry]: the run's log writer and its ring."""

    on_overrun: str = key("stop", choices=("stop", "warn"),
                          doc="a paced loop whose log writer fell behind its ring lost rows: "
                              "stop the run safely, or go on saying so on stderr; either "
                              "way its summary and exit code (1) name the count (--fast "
                              "and lockstep loops wait for the writer and lose none)")
    ring_rows: int = key(0, minimum=0,
                         doc="rows the telemetry ring holds (0: 4 s of ticks, at least "
                             "4096; at least 16 otherwise)")


@dataclass(frozen=True)
class SafetyTable(Table):
    """[safety]: the command limits, the joints' position and rate limits
    (controllers.limits) and the links' watchdog."""

    max_command: Optional[tuple[float, ...]] = key(
        None, length="nact", scalar_ok=True, positive=True, infinite_ok=True,
        doc="clamp |u| per axis (V or N m); unset: the drives' range "
            "(emulator.supply_voltage or emulator.max_torque), or for torques a URDF's "
            "<limit effort> where lower; inf: no clamp (warned)")
    max_slew: Optional[tuple[float, ...]] = key(
        None, length="nact", scalar_ok=True, positive=True, infinite_ok=True,
        doc="clamp the change of u per second (V/s or N m/s), per tick of the controller "
            "and of the emulator; unset or inf: none")
    watchdog_ticks: int = key(10, minimum=1,
                              doc="links: no fresh measurement for this many ticks -> safe stop")
    position_min: Optional[tuple[float, ...]] = key(
        None, length="nact", scalar_ok=True, infinite_ok=True,
        doc="a measured joint position below this stops the run safely, rad (m); unset: the "
            "URDF's <limit lower>, else none; -inf: none")
    position_max: Optional[tuple[float, ...]] = key(
        None, length="nact", scalar_ok=True, infinite_ok=True,
        doc="a measured joint position above this stops the run safely, rad (m); unset: the "
            "URDF's <limit upper>, else none; inf: none")
    max_rate: Optional[tuple[float, ...]] = key(
        None, length="nact", scalar_ok=True, positive=True, infinite_ok=True,
        doc="a measured joint rate beyond +-this stops the run safely, rad/s (m/s); unset: "
            "the URDF's <limit velocity>, else none; inf: none")
    tick_timeout: Optional[float] = key(
        None, positive=True,
        doc="a controller law that has not returned this long after its tick began stops the "
            "run from outside the loop's thread: the drives safe-stopped, the log closed, exit "
            "1 (rt.law_watchdog), s; unset: max(0.25 s, 100 ticks)")
    stop_time: float = key(0.5, positive=True,
                           doc="`hil estop --category 1|2` (IEC 60204-1 controlled stops): "
                               "the drives bring the joints to rest within this, s")
    brake: tuple[bool, ...] = key(
        False, length="nact", scalar_ok=True,
        doc="a holding brake per actuated joint (true, false, or one per joint): it engages "
            "when the emulated drives lose power (a category 0 or 1 stop, a safe stop) and "
            "stops the joint by the jam law over brake_time, then holds it; chains only")
    brake_time: float = key(0.1, minimum=0.0,
                            doc="the holding brakes' deceleration phase of the jam law, s "
                                "(0: blocked at once)")


@dataclass(frozen=True)
class LinkTable(Table):
    """[link]: the keys of every link; a link's own table ``[link.NAME]`` (its LinkSpec's
    ``keys``) is a field of the subclass ``typed`` makes for a config that has it."""

    type: str = key("inprocess",
                    doc="a registered link (entry-point group hilrig.links): inprocess (this "
                        "process), zmq (the ZeroMQ emulator), canopen or serial (drives), or "
                        "a package's own; its own keys are the table [link.TYPE]")
    endpoint: str = key("ipc://$RUNTIME/emulator",
                        doc="ZeroMQ endpoint of the emulator ($RUNTIME: this user's runtime "
                            "folder, $XDG_RUNTIME_DIR/hilrig or ~/.cache/hilrig/run, 0700)")
    timeout: float = key(0.1, positive=True,
                         doc="no measurement for this long: the link is lost, s")
    first_measurement_timeout: float = key(1.0, positive=True,
                                           doc="the first tick waits this long for the "
                                               "link's first valid measurement (commands "
                                               "held at zero until then), s")

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            """A link's own table (a field of the subclass made at run time)."""


@dataclass(frozen=True)
class EmulatorCanopenTable(Table):
    """[emulator.canopen]: the emulated CiA 402 drives (devices/cia402_drive.py)."""

    latency: float = key(0.0, minimum=0.0,
                         doc="the drives send their TPDOs this long after SYNC, s")
    position_noise: float = key(0.0, minimum=0.0,
                                doc="std of Gaussian noise on the position, rad at the joint")
    velocity_noise: float = key(0.0, minimum=0.0,
                                doc="std of Gaussian noise on the velocity, rad/s at the joint")
    current_noise: float = key(0.0, minimum=0.0, doc="std of current noise, A")
    seed: int = key(0, minimum=0, doc="seed of the noise generator")
    supply_voltage: float = key(48.0, positive=True,
                                doc="the current loop's voltage is clamped to +-this, V")
    i2t_time: float = key(0.0, minimum=0.0,
                          doc="I2t protection: fault 0x2310 when the integral of i^2 - "
                              "i_rated^2 exceeds i_rated^2 * i2t_time (0: off), s")
    event_timer: float = key(0.01, minimum=0.001,
                             doc="event timer of the drives' default (event-driven) "
                                 "TPDOs, s (at most 65.535); the EDS carries it")
    boot_time: float = key(0.03, minimum=0.0,
                           doc="from an NMT reset to the drive's boot-up frame, s: "
                               "off the bus meanwhile (real drives: tens of ms)")
    sync_timeout: float = key(0.0, minimum=0.0,
                              doc="an enabled drive that heard SYNC hears none for this "
                                  "long: it reacts as its abort connection option code "
                                  "0x6007 says (default: FAULT, EMCY 0x8100), s; 0 (the "
                                  "default): not monitored")


@dataclass(frozen=True)
class EmulatorSerialTable(Table):
    """[emulator.serial]: the emulated packet-serial drives (devices/roboclaw_drive.py)."""

    battery_voltage: float = key(24.0, positive=True,
                                 doc="main battery, V: motor voltage = duty x battery")
    latency: float = key(0.0, minimum=0.0,
                         doc="a request is executed and answered this long after its last "
                             "byte arrived, s")
    position_noise: float = key(0.0, minimum=0.0,
                                doc="std of the noise on encoder counts, counts")
    speed_noise: float = key(0.0, minimum=0.0,
                             doc="std of the noise on encoder speeds, counts/s")
    current_noise: float = key(0.0, minimum=0.0, doc="std of the noise on motor currents, A")
    seed: int = key(0, minimum=0, doc="seed of the noise generator")


@dataclass(frozen=True)
class EmulatorTable(Table):
    """[emulator]: the emulated plant and its drives (hil emulate, the devices)."""

    mode: str = key("free", choices=("free", "lockstep"),
                    doc="free: keeps real time, holds the latest command; lockstep: one step "
                        "per command")
    command_timeout: float = key(0.02, positive=True,
                                 doc="free mode: a command older than this puts the plant in "
                                     "its safe state (zero input), s")
    supply_voltage: float = key(48.0, positive=True,
                                doc="the emulated drives' supply: a voltage command is "
                                    "saturated at +-this, V")
    max_torque: float = key(1000.0, positive=True,
                            doc="the emulated drives' peak joint torque: a torque command is "
                                "saturated at +-this, N m")
    fifo_priority: int = key(70, minimum=0,
                             doc="SCHED_FIFO priority of `hil emulate`: the thread that steps "
                                 "the plant and the threads it waits on (ZeroMQ I/O, the CAN "
                                 "bus' reader); below loop.fifo_priority, so that on a shared "
                                 "CPU the controller's threads come first (0: normal "
                                 "scheduling); refused without root or CAP_SYS_NICE, and said")
    cpu: int = key(-1, minimum=-1,
                   doc="pin the thread that steps the plant (ZeroMQ emulator, serial drives) "
                       "to this CPU (-1: no pinning)")
    spin: float = key(5e-5, minimum=0.0,
                      doc="free mode: busy-wait this long before each step's deadline (sleep "
                          "until then), s; at most half the period. Short: the emulator "
                          "sleeps, the controller spins (loop.spin), and both fit on two "
                          "cores")
    canopen: EmulatorCanopenTable = table()
    serial: EmulatorSerialTable = table()

    def drive_range(self, unit: str) -> float:
        """The drives' range for commands in ``unit``: ``supply_voltage`` (V) for "V",
        ``max_torque`` (N m) for "N m"."""
        return self.supply_voltage if unit == "V" else self.max_torque


@dataclass(frozen=True)
class AnalyzeTable(Table):
    """[analyze]: hil analyze (analysis.modal)."""

    actuator_stiffness: tuple[float, ...] = key(
        1e4, length="nact", scalar_ok=True, positive=True,
        doc="3RRR: angular stiffness of each actuator about its q0 angle, N m/rad "
            "(illustrative default)")
    wrench: tuple[float, ...] = key([0.0, 0.0, 0.0], length=3,
                                    doc="3RRR: external wrench on the platform, F_x, F_y (N), "
                                        "M_z (N m)")
    grid: int = key(50, minimum=2, doc="points per side of the stiffness maps")


@dataclass(frozen=True)
class FrictionTable(Table):
    """[friction]: joint friction of the serial chains (plant.friction, docs/FRICTION.md),
    on the joint side, one value per coordinate or one for all; N m and rad (N and m for a
    prismatic joint). Unset: the URDF's <dynamics damping friction> for a URDF arm, else 0.
    The motor side's plant.motor.viscous_friction is separate."""

    viscous: Optional[tuple[float, ...]] = key(
        None, length="nq", scalar_ok=True, minimum=0.0,
        doc="viscous friction, N m s/rad (N s/m); unset: the URDF's damping, else 0")
    coulomb: Optional[tuple[float, ...]] = key(
        None, length="nq", scalar_ok=True, minimum=0.0,
        doc="Coulomb (sliding) friction, N m (N); unset: the URDF's friction, else 0")
    static: Optional[tuple[float, ...]] = key(
        None, length="nq", scalar_ok=True, minimum=0.0,
        doc="breakaway friction (holds a joint at rest), N m (N), >= coulomb; unset: "
            "coulomb (no Stribeck hump)")
    stribeck_velocity: tuple[float, ...] = key(
        0.01, length="nq", scalar_ok=True, positive=True,
        doc="Stribeck velocity v_s: static decays to coulomb as exp(-(qd/v_s)^2), rad/s (m/s)")
    stick_velocity: float = key(
        1e-6, positive=True,
        doc="a joint slower than this at a step boundary (or whose rate reversed over the "
            "step) sticks if friction can hold it, rad/s (m/s)")


@dataclass(frozen=True)
class JamTable(Table):
    """One table of [faults.jam]: a joint that jams."""

    joint: int = key(required=True, doc="1-based joint")
    t1: float = key(required=True, minimum=0.0, doc="jam start, s")
    duration: float = key(0.1, minimum=0.0, doc="jamming phase dt, s")


# -- link faults (devices.link_faults, docs/LINK_FAULTS.md): in the emulated devices ------

@dataclass(frozen=True)
class LinkFaultTable(Table):
    """A communication fault of an emulated device: when, how long, which drive."""

    joint: int = key(0, minimum=0,
                     doc="CAN: the drive of this 1-based joint; serial: the controller that "
                         "drives it; 0: every drive (the ZeroMQ plant has one link: 0)")
    t1: float = key(required=True, minimum=0.0, doc="start, s of the device's plant time")
    duration: float = key(float("inf"), minimum=0.0, infinite_ok=True,
                          doc="how long it lasts, s; inf: permanent")


@dataclass(frozen=True)
class RandomLinkFaultTable(LinkFaultTable):
    """A link fault that hits each reply with a probability (seeded)."""

    probability: float = key(1.0, minimum=0.0,
                             doc="chance that a reply is hit, 0..1 (1: every one)")
    seed: int = key(0, minimum=0, doc="seed of the draws (one generator per table)")


@dataclass(frozen=True)
class DropTable(RandomLinkFaultTable):
    """[[faults.drop]]: replies dropped (STATEs, TPDOs, serial replies)."""


@dataclass(frozen=True)
class CorruptTable(RandomLinkFaultTable):
    """[[faults.corrupt]]: replies corrupted (a malformed ZeroMQ frame, a wrong-length CAN
    PDO, a serial reply with a bad CRC)."""


@dataclass(frozen=True)
class CrcErrorTable(RandomLinkFaultTable):
    """[[faults.crc_error]]: serial replies with a bad CRC."""


@dataclass(frozen=True)
class DelayTable(LinkFaultTable):
    """[[faults.delay]]: replies sent late."""

    delay: float = key(required=True, minimum=0.0, doc="added delay of each reply, s")


@dataclass(frozen=True)
class BusOffTable(LinkFaultTable):
    """[[faults.bus_off]]: the CAN node goes bus-off (error frames, then no frame at all)."""


@dataclass(frozen=True)
class HeartbeatLossTable(LinkFaultTable):
    """[[faults.heartbeat_loss]]: the CAN node's heartbeats stop (PDOs go on)."""


@dataclass(frozen=True)
class SyncLossTable(LinkFaultTable):
    """[[faults.sync_loss]]: the drive hears no SYNC from the master."""


@dataclass(frozen=True)
class StallTable(LinkFaultTable):
    """[[faults.stall]]: the serial line stops answering (requests get no reply)."""


@dataclass(frozen=True)
class FaultTrigger(Table):
    """The keys every ``[[faults.KIND]]`` table has (docs/FAULTS.md): where and when.

    A fault is pending until t1; from t1 it starts at the first tick boundary where its
    condition holds (none: at once), and it lasts ``duration`` s (inf: until cleared).
    With ``mean_on`` and ``mean_off`` it is intermittent: seeded on/off phases of
    exponentially distributed lengths from t1 to the end of the run."""

    joint: int = key(1, minimum=1, doc="1-based joint (a sensor fault: the joint whose "
                                       "channel it corrupts)")
    t1: float = key(0.0, minimum=0.0, doc="earliest start, s")
    duration: float = key(float("inf"), positive=True, infinite_ok=True,
                          doc="how long the fault lasts once started, s (inf: permanent)")
    when_joint: Optional[int] = key(None, minimum=1, doc="condition: the 1-based joint "
                                                         "whose signal is compared")
    when_signal: str = key("q", choices=("q", "qd"), doc="condition: the joint's position "
                                                         "(rad or m) or rate (rad/s or m/s)")
    above: Optional[float] = key(None, doc="condition: the signal is above this")
    below: Optional[float] = key(None, doc="condition: the signal is below this")
    mean_on: Optional[float] = key(None, positive=True,
                                   doc="intermittent: mean length of an on phase, s")
    mean_off: Optional[float] = key(None, positive=True,
                                    doc="intermittent: mean length of an off phase, s")
    seed: int = key(0, minimum=0, doc="intermittent phases' and noise bursts' seed")


@dataclass(frozen=True)
class SensorFaultTrigger(FaultTrigger):
    """The keys of every sensor fault: the trigger's and the measured channel."""

    channel: str = key("position", choices=("position", "rate", "current"),
                       doc="what the law sees corrupted: position (rad or m), rate "
                           "(rad/s or m/s), current (A)")


@dataclass(frozen=True)
class FreeSwingTable(FaultTrigger):
    """[[faults.free_swing]]: the drive gives no torque; the joint swings freely."""


@dataclass(frozen=True)
class EffectivenessTable(FaultTrigger):
    """[[faults.effectiveness]]: the drive's torque scaled by ``factor``."""

    factor: float = key(0.5, minimum=0.0, doc="torque multiplier (1: healthy, 0: none)")


@dataclass(frozen=True)
class TorqueOffsetTable(FaultTrigger):
    """[[faults.torque_offset]]: a torque added to the drive's."""

    torque: float = key(required=True, doc="added joint torque, N m")


@dataclass(frozen=True)
class WindingOpenTable(FaultTrigger):
    """[[faults.winding_open]]: the winding is open; no current, no torque."""


@dataclass(frozen=True)
class WindingShortTable(FaultTrigger):
    """[[faults.winding_short]]: the winding is shorted (V = 0 across it): back-EMF brakes."""


@dataclass(frozen=True)
class SupplySagTable(FaultTrigger):
    """[[faults.supply_sag]]: the drive's voltage scaled by ``factor`` and limited."""

    factor: float = key(0.5, minimum=0.0, doc="the voltage the winding gets per volt "
                                              "commanded")
    max_voltage: float = key(float("inf"), positive=True, infinite_ok=True,
                             doc="what the sagging supply can give at most, V")


@dataclass(frozen=True)
class BrakeTable(FaultTrigger):
    """[[faults.brake]]: a brake engages: the joint stops by the jam law (plant.jam)."""

    stop_time: float = key(0.1, minimum=0.0, doc="deceleration phase dt of the jam law, s "
                                                 "(0: blocked at once)")


@dataclass(frozen=True)
class FrictionFaultTable(FaultTrigger):
    """[[faults.friction]]: the joint's friction raised by a viscous term."""

    viscous: float = key(required=True, minimum=0.0, doc="added viscous friction, N m s/rad")


@dataclass(frozen=True)
class SensorBiasTable(SensorFaultTrigger):
    """[[faults.sensor_bias]]: the channel reads ``bias`` off."""

    bias: float = key(required=True, doc="offset, the channel's unit")


@dataclass(frozen=True)
class SensorDriftTable(SensorFaultTrigger):
    """[[faults.sensor_drift]]: the channel's error grows at ``rate`` from the onset."""

    rate: float = key(required=True, doc="drift, the channel's unit per s")


@dataclass(frozen=True)
class SensorStuckTable(SensorFaultTrigger):
    """[[faults.sensor_stuck]]: the channel reads a constant."""

    value: Optional[float] = key(None, doc="the value it is stuck at (unset: the true "
                                           "value at the onset)")


@dataclass(frozen=True)
class SensorDropoutTable(SensorFaultTrigger):
    """[[faults.sensor_dropout]]: no fresh value: the last one the law saw is held."""


@dataclass(frozen=True)
class QuantizeTable(SensorFaultTrigger):
    """[[faults.quantize]]: the channel reads in whole steps (floor, as an encoder counts)."""

    counts_per_rev: Optional[float] = key(None, positive=True,
                                          doc="encoder counts per revolution (step 2 pi / "
                                              "counts_per_rev rad)")
    step: Optional[float] = key(None, positive=True, doc="step size, the channel's unit")


@dataclass(frozen=True)
class CountJumpTable(SensorFaultTrigger):
    """[[faults.count_jump]]: the reading jumps once (lost or extra counts) and keeps the
    offset."""

    counts: float = key(1.0, doc="counts lost (< 0) or gained (> 0)")
    counts_per_rev: float = key(4096.0, positive=True, doc="counts per revolution")
    size: Optional[float] = key(None, doc="the jump in the channel's unit (instead of counts)")


@dataclass(frozen=True)
class NoiseBurstTable(SensorFaultTrigger):
    """[[faults.noise_burst]]: seeded Gaussian noise on the channel while it lasts."""

    std: float = key(required=True, minimum=0.0, doc="standard deviation, the channel's "
                                                     "unit")


@dataclass(frozen=True)
class FaultsTable(Table):
    """[faults]: scheduled faults (docs/FAULTS.md); each a table or a list of tables."""

    jam: tuple[JamTable, ...] = table()
    free_swing: tuple[FreeSwingTable, ...] = table()
    effectiveness: tuple[EffectivenessTable, ...] = table()
    torque_offset: tuple[TorqueOffsetTable, ...] = table()
    winding_open: tuple[WindingOpenTable, ...] = table()
    winding_short: tuple[WindingShortTable, ...] = table()
    supply_sag: tuple[SupplySagTable, ...] = table()
    brake: tuple[BrakeTable, ...] = table()
    friction: tuple[FrictionFaultTable, ...] = table()
    sensor_bias: tuple[SensorBiasTable, ...] = table()
    sensor_drift: tuple[SensorDriftTable, ...] = table()
    sensor_stuck: tuple[SensorStuckTable, ...] = table()
    sensor_dropout: tuple[SensorDropoutTable, ...] = table()
    quantize: tuple[QuantizeTable, ...] = table()
    count_jump: tuple[CountJumpTable, ...] = table()
    noise_burst: tuple[NoiseBurstTable, ...] = table()
    # link faults, in the emulated devices (devices.link_faults)
    drop: tuple[DropTable, ...] = table()
    delay: tuple[DelayTable, ...] = table()
    corrupt: tuple[CorruptTable, ...] = table()
    bus_off: tuple[BusOffTable, ...] = table()
    heartbeat_loss: tuple[HeartbeatLossTable, ...] = table()
    sync_loss: tuple[SyncLossTable, ...] = table()
    crc_error: tuple[CrcErrorTable, ...] = table()
    stall: tuple[StallTable, ...] = table()


@dataclass(frozen=True)
class Config(Table):
    """A resolved config, typed and immutable: one frozen dataclass per table.

    Made by ``typed`` from the declarations that validated it: the common tables are the
    classes above, and a table that a plant model, a controller type or a link extends is a
    subclass of its class with those keys as typed attributes (``cfg.plant.lengths``,
    ``cfg.link.canopen.node_ids``). ``to_dict()`` is the resolved dict (the ``meta`` of
    every log); ``replace(**changes)`` a derived config (not validated again).
    """

    sim: SimTable = table()
    plant: PlantTable = table()
    input: InputTable = table()
    controller: ControllerTable = table()
    loop: LoopTable = table()
    telemetry: TelemetryTable = table()
    safety: SafetyTable = table()
    friction: FrictionTable = table()
    link: LinkTable = table()
    emulator: EmulatorTable = table()
    analyze: AnalyzeTable = table()
    faults: FaultsTable = table()

    def replace(self, **changes: Any) -> "Config":
        """A copy with the given top-level tables replaced (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


# -- declarations from the classes, classes from declarations ------------------------------

def declarations(cls: type) -> dict:
    """The declarations of a static table class (``Config`` gives settings.config's
    SCHEMA): key -> ``Key`` (its kind from the field's annotation, the rest from ``key``),
    a table's dict of declarations, or a list of tables' ``Tables``."""
    out: dict = {}
    hints = typing.get_type_hints(cls)
    for f, (name, how, sub) in zip(dataclasses.fields(cls), _layout(cls)):
        if how == "table":
            out[name] = declarations(sub)
        elif how == "tables":
            out[name] = Tables(declarations(sub))
        else:
            kind, optional = _kind(hints[name], f"{cls.__name__}.{name}")
            spec = out[name] = Key(kind, **f.metadata["key"])
            if optional and (spec.default is not None or spec.required):
                raise TypeError(f"{cls.__name__}.{name}: annotated as optional but never "
                                "unset (it has a default or is required)")
    return out


def typed(resolved: dict, schema: dict) -> Config:
    """The typed view of a resolved config, of the classes that ``schema`` (the
    declarations that validated it) gives: the common tables' classes, extended by the
    keys a plant model, a controller type or a link declared; lists as tuples, a list of
    tables (faults.jam) as a tuple of dataclasses."""
    cfg: Config = _build(_extended(Config, _shape(Config, schema), "Config"), resolved)
    return cfg


def retyped(table: Table, key: str, resolved: Any) -> Table:
    """``table`` (a typed table) with its key ``key`` replaced by the typed view of
    ``resolved`` (the resolved value, or table, or list of tables, that typed would have
    read there): equal to typed() of the whole with that one change."""
    cls: type = type(table)
    for name, how, sub in _layout(cls):
        if name == key:
            break
    else:
        raise KeyError(key)
    value = (_build(sub, resolved) if how == "table" else
             tuple(_build(sub, item) for item in resolved) if how == "tables" else
             _frozen(resolved))
    return dataclasses.replace(table, **{key: value})


def plain(value: Any) -> Any:
    """A typed table (or one of its values) as in the resolved dict: dicts and lists."""
    if isinstance(value, Table):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [plain(item) for item in value]
    return value


@lru_cache(maxsize=None)
def _layout(cls: type) -> tuple:
    """(name, how, class) per field of a table class: how "table" (class: its table's),
    "tables" (class: each table's) or "value" (class None)."""
    hints = typing.get_type_hints(cls)
    layout = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if _is_table(hint):
            layout.append((f.name, "table", hint))
        elif typing.get_origin(hint) is tuple and _is_table(typing.get_args(hint)[0]):
            layout.append((f.name, "tables", typing.get_args(hint)[0]))
        else:
            layout.append((f.name, "value", None))
    return tuple(layout)


@lru_cache(maxsize=None)
def _kinds(cls: type) -> dict:
    """Key kind per value field of a table class (its annotation's: ``_kind``)."""
    hints = typing.get_type_hints(cls)
    return {name: _kind(hints[name], f"{cls.__name__}.{name}")[0]
            for name, how, _ in _layout(cls) if how == "value"}


def _is_table(hint: Any) -> bool:
    return typing.get_origin(hint) is None and isinstance(hint, type) and issubclass(hint, Table)


def _kind(hint: Any, name: str) -> tuple:
    """(Key kind, optional) of a field's annotation: ``float`` -> ("float", False),
    ``tuple[float, ...] | None`` -> ("floats", True)."""
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        rest = [arg for arg in args if arg is not type(None)]
        hint = rest[0] if len(rest) == 1 else None
    if hint not in KINDS:
        raise TypeError(f"{name}: a key's annotation must be one of "
                        f"{', '.join(map(str, KINDS))} (or one of them | None), got {hint}")
    return KINDS[hint], optional


def _shape(base: type, schema: dict) -> tuple:
    """What the table that ``schema`` declares adds to its class ``base`` (a static table
    class, or Table for a table no class declares): ((key, what), ...) with what a Key's
    (kind, optional) or a table's ("table" or "tables", its base, its shape, its class
    name); a key of ``base`` of the same kind is left out, so () when ``base`` is the
    class. Hashable, all that the classes depend on: equal schemas share classes."""
    fields = {name: (how, sub) for name, how, sub in _layout(base)}
    kinds = _kinds(base)
    shape: list[tuple] = []
    for key, spec in schema.items():
        how, sub = fields.get(key, (None, None))
        if isinstance(spec, dict):
            if how not in ("table", "tables"):
                how, sub = ("tables" if isinstance(spec, Tables) else "table"), Table
            inner = _shape(sub, spec)
            if inner or key not in fields:
                name = sub.__name__ if sub is not Table else \
                    _child(base.__name__, key)
                shape.append((key, (how, sub, inner, name)))
        elif kinds.get(key) != spec.kind:
            shape.append((key, (spec.kind, spec.default is None and not spec.required)))
    return tuple(shape)


def _child(name: str, key: str) -> str:
    """The class name of table ``key`` that no class declares inside the table of class
    ``name``: LinkCanopen in LinkTable."""
    return name.removesuffix("Table") + key.title().replace("_", "")


@lru_cache(maxsize=None)
def _extended(base: type, shape: tuple, name: str) -> type:
    """The class of a table whose static class is ``base`` and that adds ``shape``
    (``_shape``): ``base`` itself if it adds nothing, else a frozen dataclass subclass made
    now, which pickles as its plain table and shape (nothing imports it by name)."""
    if not shape:
        return base
    fields: list[tuple[str, Any]] = []
    for key, what in shape:
        if len(what) == 4:        # a table or a list of tables
            how, sub, inner, child = what
            cls: Any = _extended(sub, inner, child)
            fields.append((key, tuple[cls, ...] if how == "tables" else cls))
        else:
            kind, optional = what
            fields.append((key, Optional[ANNOTATIONS[kind]] if optional else ANNOTATIONS[kind]))
    return dataclasses.make_dataclass(
        name, fields, bases=(base,), frozen=True,
        namespace={"__module__": __name__, "__reduce__": _reduce,
                   "_made": (base, shape, name)})


def _reduce(table: Table) -> tuple:
    # a class made at run time: pickle the plain table and what makes its class
    return _rebuild, (plain(table), *getattr(type(table), "_made"))


def _rebuild(value: dict, base: type, shape: tuple, name: str) -> Any:
    return _build(_extended(base, shape, name), value)


def _build(cls: type, value: dict) -> Any:
    """An instance of table class ``cls`` from its resolved dict ``value``."""
    values = {}
    for name, how, sub in _layout(cls):
        item = value[name]
        values[name] = (_build(sub, item) if how == "table" else
                        tuple(_build(sub, v) for v in item) if how == "tables" else
                        _frozen(item))
    return cls(**values)


def _frozen(value: Any) -> Any:
    return tuple(_frozen(item) for item in value) if isinstance(value, list) else value
