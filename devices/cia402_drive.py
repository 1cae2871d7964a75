"""Emulated CiA 402 drives: CANopen nodes that answer on a CAN bus, with the plant behind them.

One ``EmulatedDrives`` is the set of drives of one robot on one bus: a
``DriveNode`` (devices.canopen_node: ``canopen.LocalNode`` made strict) per axis (it
gives the SDO server, the NMT slave with boot-up and heartbeat producer, the EMCY
producer, the error history 0x1003 and the object dictionary of
``cia402.object_dictionary``), and by hand what the library leaves out
(docs/PROTOCOLS.md §3.2): the CiA 402 state machine, synchronous and event-driven
PDOs, the heartbeat consumer (0x1016) and the drive's protections.

An NMT reset (node or communication) takes a drive off the bus for
``emulator.canopen.boot_time`` (INITIALISING: no heartbeat, SDO or PDO, NMT commands
ignored), then it sends its boot-up frame and enters PRE-OPERATIONAL, as a real drive
does tens of milliseconds after the command, so a master that starts listening after
sending the reset (``canopen``'s ``nmt.state = 'RESET'; nmt.wait_for_bootup()``) hears it.
At ``start`` (power on) the drives boot at once.

After a reset the drives have the default PDO mapping of ``cia402`` (event-driven,
transmission type 255: TPDOs on their event timer and on a statusword change, RPDO
data applied on reception) and produce heartbeats (0x1017 from
``link.canopen.heartbeat_period``). While no operational drive has a synchronous PDO,
the plant runs on its own clock (one step every sim.dt of wall-clock time once a drive
is OPERATIONAL), so a master that sends no SYNC sees the arm move.

Once a master maps synchronous PDOs (``CanopenLink`` does), the bus cycle is the plant
clock: each SYNC advances the plant (a ``PlantLink``) by one step of ``sim.dt``, so a
run is deterministic whatever the wall-clock timing. Per SYNC, as a real drive does:

1. latch the actual values of every axis (position in encoder increments with
   quantisation, velocity in increments/s, current in per-mille of the rated
   current; optional Gaussian noise) and send the synchronous TPDOs (after
   ``emulator.canopen.latency`` s);
2. apply the RPDO data received since the previous SYNC (controlword through the
   state machine, target torque): one cycle of transport delay by design; start the
   jams of ``faults.jam`` whose time t1 (plant time) has come;
3. turn each target torque into the plant's input and step the plant. In
   cyclic synchronous torque mode the drive runs a current loop: i = tau_m / K_m,
   V = R_a i + K_e r qd, clamped to +-supply_voltage (a torque-driven plant
   takes the joint torque r tau_m). Outside OPERATION ENABLED the power stage
   shorts the motor: 0 V (dynamic braking through the back-EMF, as
   ``PlantLink.safe_stop``), or 0 N m for a torque-driven plant.

SDO writes to the controlword act at once (acyclic). Leaving NMT OPERATIONAL
while enabled quick-stops the drive. Faults (state FAULT, an EMCY with the code,
0x603F and 0x1001 set): an injected fault, the controller's heartbeat lost
(0x8130), the I2t protection (0x2310), an invalid plant state (0x6100). A fault
reset (rising edge of controlword bit 7) clears them.

SDO writes of a mode that 0x6502 does not list are refused (abort 0x06090030).

SYNC watchdog (when ``emulator.canopen.sync_timeout`` > 0; 0, the default, is off): an
OPERATION ENABLED drive that heard a SYNC and then hears none for that long reacts as its
abort connection option code 0x6007 says (CiA 402: 1, the default, FAULT with EMCY 0x8100; 2 disable voltage; 3 quick
stop; 0 nothing).

Link faults (devices.link_faults; ``[[faults.KIND]]`` in the config, ``inject`` live), on
the drive of a table's ``joint`` (0: every drive), over plant time: ``drop`` (its TPDOs
of a SYNC not sent), ``delay`` (sent ``delay`` s after the others; the bus' reader waits),
``corrupt`` (each TPDO one byte short: a wrong-length PDO), ``bus_off``
(BUS_OFF_ERROR_FRAMES error frames, which python-can's virtual bus and hilrig_zmq
carry, then nothing in or out: no PDO, SDO, EMCY, heartbeat, NMT; its own heartbeat
consumer then loses the master, FAULT 0x8130), ``heartbeat_loss`` (its heartbeat stops,
PDOs go on), ``sync_loss`` (it hears no SYNC: no TPDO, no set-point applied, and its SYNC
watchdog reacts; the plant, the physical world, goes on stepping at every SYNC on the
bus). Each start and end is one line and an event in the plant log.

Quick stop (IEC 60204-1 controlled stops): with the quick stop option code 0x605A = 2
(the default: slow down on the quick stop ramp, then SWITCH ON DISABLED) or 6 (... and
stay in QUICK STOP ACTIVE, holding), a drive in QUICK STOP ACTIVE brings its joint to rest
on its quick stop deceleration 0x6085 (increments/s^2, which the master writes before
the stop: drivers.canopen_link), and at 0 (its power-up value) within
``safety.stop_time`` (the stop servo of drivers.controlled_stop); other codes brake at
0 V or 0 N m.

Not emulated: SYNC counters, RTR PDOs, quick stop option codes other than 2 and 6, node
guarding, LSS.

Run the drives in another process with ``serve`` (``hil emulate``) on the
``hilrig_zmq`` interface (drivers.zmqcan), which relays frames between processes.
"""
from __future__ import annotations

import copy
import logging
import math
import struct
import threading
import time

import can
import canopen
import numpy as np
from canopen.objectdictionary import SIGNED_TYPES
from canopen.sdo import SdoAbortedError
from hilrig.devices.canopen_node import ABORT_VALUE_RANGE, DriveNode
from hilrig.devices.fault_server import FaultServer
from hilrig.devices.link_faults import LinkFaults
from hilrig.devices.plant_log import PlantLog
from hilrig.drivers import cia402
from hilrig.drivers.cia402_eds import event_timer_ms, heartbeat_ms
from hilrig.drivers.cia402 import State
from hilrig.drivers.controlled_stop import ControlledStop
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import LinkError, Measurement
from hilrig.errors import ConfigError
from hilrig.plant.factory import (
    correction_id,
    fault_schedule,
    motor_params,
    plant_from_config,
)
from hilrig.plant.model import METHODS
from hilrig.plant.stepping import apply_schedule
from hilrig.schema import Config
from hilrig.telemetry.recorder import TelemetryError
from hilrig.timing.sched import spawning

log = logging.getLogger(__name__)

_FORMATS = {(8, False): "B", (8, True): "b", (16, False): "H", (16, True): "h",
            (32, False): "I", (32, True): "i"}
_SUPERVISION_PERIOD = 0.005   # s, heartbeat-consumer check
_RESYNC = 0.1                 # s: the free-running clock further behind than this re-anchors
BUS_OFF_ERROR_FRAMES = 32     # error frames a node causes before bus-off (TEC 256 = 32 x 8)
# CiA 402 abort connection option code (0x6007): the reaction to a lost SYNC
ABORT_NO_ACTION, ABORT_FAULT, ABORT_DISABLE_VOLTAGE, ABORT_QUICK_STOP = 0, 1, 2, 3


def bus_config_from(cfg: Config) -> dict:
    """python-can keyword arguments for the drives' bus from ``link.canopen``.

    On ``hilrig_zmq`` the drives run the hub (they start first; the controller joins),
    its ZeroMQ I/O thread at ``emulator.fifo_priority``.
    """
    can_cfg = cfg.link.canopen
    bus = {"interface": can_cfg.interface, "channel": can_cfg.channel,
           "bitrate": can_cfg.bitrate}
    if bus["interface"] == "hilrig_zmq":
        bus["hub"] = True
        bus["fifo_priority"] = cfg.emulator.fifo_priority
    return bus


class _Pdo:
    """One configured PDO of a node: COB-ID, transmission type, packing of its entries."""

    def __init__(self, cob_id: int, trans_type: int, entries: list[tuple[int, int]],
                 layout: struct.Struct, inhibit: float = 0.0, event_timer: float = 0.0):
        self.cob_id, self.trans_type = cob_id, trans_type
        self.entries, self.layout = entries, layout
        self.inhibit, self.event_timer = inhibit, event_timer     # s (0: none)
        self.last_sent = -math.inf                  # time.monotonic() of the last frame
        self.due = -math.inf                        # time.monotonic() the event timer expires
        self.last_statusword: int | None = None

    @property
    def synchronous(self) -> bool:
        """Transmission types 0..240 act on SYNC; 254/255 are event-driven."""
        return self.trans_type <= 240


class DriveAxis:
    """The state of one emulated drive (node) apart from its object dictionary.

    Values in wire units: ``target`` and ``max_torque`` per-mille of the rated
    torque; ``position`` increments; ``velocity`` increments/s; ``current`` and
    ``torque`` per-mille of the rated current / torque.
    """

    def __init__(self, axis: int, node: DriveNode):
        self.axis, self.node = axis, node
        self.state = State.SWITCH_ON_DISABLED
        self.controlword = 0
        self.mode = 0
        self.target = 0
        self.pending: dict[int, int] = {}       # RPDO data latched for the next SYNC
        self.max_torque = node.object_dictionary[cia402.MAX_TORQUE].default
        self.error_code = 0
        self.position = self.velocity = self.current = self.torque = 0
        self.tpdos: list[_Pdo] = []
        self.rpdos: dict[int, _Pdo] = {}
        self.pdo_dirty = True
        self.consumer: tuple[int, float] | None = None   # (producer node-id, timeout s)
        self.last_heartbeat: float | None = None
        self.i2t = 0.0
        self.drop_tpdos = 0
        self.bus_off = False                   # link fault: off the bus (nothing in or out)
        self.last_sync: float | None = None    # time.monotonic() of the last SYNC heard, enabled
        self.boot_at: float | None = None      # time.monotonic() of the boot-up after a reset
        self.heartbeat_at: float | None = None   # ... and of the first heartbeat after it

    @property
    def statusword(self) -> int:
        follows = self.state == State.OPERATION_ENABLED and self.mode == cia402.MODE_CST
        return cia402.statusword(self.state, follows)

    def operational(self) -> bool:
        return self.node.nmt.state == "OPERATIONAL"

    def apply_controlword(self, word: int) -> None:
        state, transition = cia402.next_state(self.state, word, self.controlword)
        if state == State.OPERATION_ENABLED and self.state != state:
            self.last_sync = None               # the SYNC watchdog starts at the next SYNC
        if transition is None and word != self.controlword:
            log.info("node %d: '%s' (controlword 0x%04X) is no transition from %s; ignored",
                     self.node.id, cia402.command_name(word), word, self.state.label)
        self.state = state
        if self.state == State.SWITCH_ON_DISABLED and self.error_code:
            self.error_code = 0                     # fault reset acknowledged
            self.node.emcy.reset()
        self.controlword = word

    @property
    def error_register(self) -> int:
        """0x1001: bit 0 generic error, bit 4 communication error (codes 0x8xxx)."""
        if not self.error_code:
            return 0
        return 0x01 | (0x10 if self.error_code & 0xF000 == 0x8000 else 0)

    def enter_fault(self, code: int) -> None:
        if self.state == State.FAULT:
            return
        self.state, self.error_code = State.FAULT, code
        self.node.push_error(code)
        if not self.bus_off:
            self.node.emcy.send(code, self.error_register)

    def values(self) -> dict[int, int]:
        """The objects a TPDO may carry, as last latched (wire units)."""
        return {cia402.STATUSWORD: self.statusword, cia402.POSITION_ACTUAL: self.position,
                cia402.VELOCITY_ACTUAL: self.velocity, cia402.CURRENT_ACTUAL: self.current,
                cia402.TORQUE_ACTUAL: self.torque, cia402.MODES_DISPLAY: self.mode,
                cia402.ERROR_CODE: self.error_code, cia402.ERROR_REGISTER: self.error_register}


class EmulatedDrives:
    """The CiA 402 drives of the robot in ``cfg``, with its plant, on one CAN bus.

    Args:
        cfg: a resolved config (settings.config): the plant, ``sim.dt`` (the SYNC period and
            plant step), ``link.canopen`` (node-ids, encoder and motor ratings),
            ``emulator.canopen`` (latency, noise, supply voltage, I2t).
        bus_config: python-can keyword arguments (interface, channel, ...); default
            ``bus_config_from(cfg)``.
        log_path: telemetry of the plant (devices.plant_log), one row per plant step.

    The drives' threads (the bus' reader, which answers each SYNC and steps the plant,
    the heartbeat producers, the supervision, the clock) run at SCHED_FIFO
    ``emulator.fifo_priority`` (timing.sched.spawning); the plant log's writer below
    them, at SCHED_FIFO 1 (it shares the interpreter lock with the reader that steps
    the plant: timing.sched.helper_priority).

    Fault-injection hooks (thread-safe; axes are 1-based): ``inject_fault``,
    ``stop_heartbeat``, ``drop_tpdos``, ``drop_syncs``, ``jam``; link faults: ``inject``.
    """

    def __init__(self, cfg: Config, bus_config: dict | None = None, log_path=None):
        integrator = cfg.sim.integrator
        if integrator not in METHODS:
            raise ConfigError(f"sim.integrator: the emulated drives step with a fixed-step "
                              f"integrator ({sorted(METHODS)}), got {integrator!r}")
        can_cfg, emu = cfg.link.canopen, cfg.emulator.canopen
        self.h = cfg.sim.dt
        self.plant = PlantLink(plant_from_config(cfg), self.h, METHODS[integrator],
                               correction_id(cfg))
        self.plant.open()                       # the drives' power stages decide the input
        self.plant.brakes[:] = cfg.safety.brake     # holding brakes: _brakes
        self.plant.brake_time = cfg.safety.brake_time
        self.has_brakes = any(cfg.safety.brake)     # none: _step pays one attribute test
        self.schedule = fault_schedule(cfg)       # faults.jam, started at plant time t1
        n = self.plant.n_axes
        self.meas = Measurement(n)
        self.voltage_driven = self.plant.command_unit == "V"
        motors = motor_params(cfg)
        self.ratio, self.k_m = motors.gear_ratio, motors.torque_constant
        self.r_a, self.k_e = motors.resistance, motors.back_emf_constant
        self.counts_per_rad = np.array(can_cfg.counts_per_rev) * self.ratio / (2 * math.pi)
        self.rated_torque = np.array(can_cfg.rated_torque)       # N m at the motor
        self.rated_current = np.array(can_cfg.rated_current)     # A
        self.supply = emu.supply_voltage
        # quick stop with option code 2 or 6 (0x605A): the drives' stop servo, over
        # safety.stop_time (the controller's config says the same: drivers.controlled_stop)
        self.stop_time = cfg.safety.stop_time
        self.stop_servo = ControlledStop(self.plant.plant, self.h, METHODS[integrator],
                                         correction_id(cfg),
                                         self.supply if self.plant.command_unit == "V"
                                         else cfg.emulator.max_torque)
        self._stopping = np.zeros(len(cfg.link.canopen.node_ids), dtype=bool)
        self.i2t_time = emu.i2t_time
        self.latency = emu.latency
        self.boot_time = emu.boot_time
        self.noise = (emu.position_noise, emu.velocity_noise, emu.current_noise)
        self.rng = np.random.default_rng(emu.seed)
        self.master_id = can_cfg.master_id
        self.bus_config = bus_config if bus_config is not None else bus_config_from(cfg)
        self.node_ids = list(can_cfg.node_ids)
        self.max_torque = can_cfg.max_torque
        self.heartbeat_ms, self.event_timer_ms = heartbeat_ms(cfg), event_timer_ms(cfg)
        self.plant_log = PlantLog(cfg, log_path, self.plant) if log_path else None
        self.log_loss: str | None = None   # after stop: the rows the log lost, named
        self.fifo_priority = cfg.emulator.fifo_priority
        self.free_steps = 0         # plant steps of the free-running clock (no SYNC in use)
        self.u = np.zeros(n)
        self.lock = threading.RLock()
        self.axes: list[DriveAxis] = []
        self.network: canopen.Network | None = None
        self.syncs = 0
        self.drop_sync_count = 0
        self.sync_timeout = emu.sync_timeout
        self.link_faults = LinkFaults(cfg, "canopen", n)    # [[faults.KIND]] and inject
        self._late: list[tuple[float, int, bytes]] = []    # (delay s, COB-ID, data) this SYNC
        self.plant_failed = False
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._clock: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> None:
        """Compile the plant kernels, connect, create the nodes and boot them (PRE-OPERATIONAL)."""
        scratch = copy.deepcopy(self.plant)     # the first SYNC must not wait for numba
        p = scratch.plant
        apply_schedule(p.params, p.jams, self.schedule.copy(), p.t, p.x, 0.0)
        scratch.read(self.meas)
        scratch.write(self.u)
        with spawning(self.fifo_priority):      # every thread of the drives, compiled first
            self._start_bus()

    def _start_bus(self) -> None:
        """Connect, create the nodes, boot them, start supervision and clock."""
        net = canopen.Network()
        net.NOTIFIER_CYCLE = 0.05   # stop() then waits at most this long for the receiver
        net.connect(**self.bus_config)
        self.network = net
        for axis, node_id in enumerate(self.node_ids, start=1):
            d = cia402.object_dictionary(
                node_id, int(round(self.rated_torque[axis - 1] * 1000)),
                int(round(self.rated_current[axis - 1] * 1000)), self.max_torque,
                self.heartbeat_ms, self.event_timer_ms)
            node = DriveNode(node_id, d)
            net.add_node(node)
            drive = DriveAxis(axis, node)
            node.add_read_callback(lambda drive=drive, **kw: self._on_sdo_read(drive, **kw))
            node.add_write_callback(lambda drive=drive, **kw: self._on_sdo_write(drive, **kw))
            for k in range(cia402.N_PDO):
                net.subscribe(0x200 + 0x100 * k + node_id,
                              lambda can_id, data, ts, drive=drive: self._on_rpdo(drive, can_id,
                                                                                   data))
            self.axes.append(drive)
        net.subscribe(0x000, self._on_nmt)
        net.subscribe(0x080, self._on_sync)
        net.subscribe(0x700 + self.master_id, self._on_master_heartbeat)
        now = time.monotonic()
        for drive in self.axes:
            self._boot(drive, now)      # power on: the boot-up frame, PRE-OPERATIONAL
        self._supervisor = threading.Thread(target=self._supervise, daemon=True,
                                            name="cia402 emulator supervision")
        self._supervisor.start()
        self._clock = threading.Thread(target=self._run_clock, daemon=True,
                                       name="cia402 emulator clock")
        self._clock.start()

    def stop(self, reason: str = "stopped") -> None:
        """Stop heartbeats, supervision and clock, leave the bus, close the log. Idempotent."""
        self._stop.set()
        for name in ("_supervisor", "_clock"):
            thread = getattr(self, name)
            if thread is not None:
                thread.join(1.0)
                setattr(self, name, None)
        if self.plant_log is not None:
            with self.lock:
                self.log_loss = self.plant_log.close(reason)
                self.plant_log = None
        if self.network is not None:
            for drive in self.axes:
                drive.node.nmt.stop_heartbeat()
            self.network.disconnect()
            self.network = None

    def __enter__(self) -> "EmulatedDrives":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- fault injection (axes 1-based) ---------------------------------------------------
    def inject_fault(self, axis: int, code: int = 0x2310) -> None:
        """Put drive ``axis`` into FAULT with an EMCY carrying ``code``."""
        with self.lock:
            self._axis(axis).enter_fault(code)

    def stop_heartbeat(self, axis: int) -> None:
        """Drive ``axis`` stops producing heartbeats (it keeps answering PDOs)."""
        with self.lock:
            self._axis(axis).node.nmt.stop_heartbeat()

    def drop_tpdos(self, axis: int, cycles: int = 1) -> None:
        """Drive ``axis`` sends no TPDOs on the next ``cycles`` SYNCs."""
        with self.lock:
            self._axis(axis).drop_tpdos += cycles

    def drop_syncs(self, cycles: int = 1) -> None:
        """All drives miss the next ``cycles`` SYNCs (no TPDOs, the plant does not advance)."""
        with self.lock:
            self.drop_sync_count += cycles

    def jam(self, joint: int, duration: float = 0.1) -> None:
        """Jam the plant's ``joint`` (1-based) now, decelerating over ``duration`` s."""
        with self.lock:
            self.plant.plant.start_jam(joint, duration)

    # -- link faults (devices.link_faults) ---------------------------------------------
    def inject(self, kind: str, params: dict, duration: float, joint: int = 0) -> None:
        """A link fault (``drop``, ``delay``, ``corrupt``, ``bus_off``, ``heartbeat_loss``,
        ``sync_loss``) on the drive of ``joint`` (1-based; 0: every drive) from the next
        plant step on, for ``duration`` s (inf: permanent); thread-safe. ConfigError (one
        line) for a kind or parameter the drives lack. Returns its window
        (devices.link_faults.Window)."""
        return self.link_faults.inject(kind, params, duration, joint)

    def _link_fault_changes(self, t: float) -> None:
        """Start and end the link faults due at plant time ``t``: the drives' state
        (bus-off, heartbeat) and one line and one event (plant log) each."""
        for change, window in self.link_faults.update(t, self.syncs):
            start = change == "start"
            drives = self.axes if window.joint == 0 else [self.axes[window.joint - 1]]
            if window.kind == "bus_off":
                for drive in drives:
                    self._set_bus_off(drive, start)
            elif window.kind == "heartbeat_loss":
                for drive in drives:
                    self._set_heartbeat(drive, not start)
            log.warning("link fault %s %s at SYNC %d (t = %.6f s)", window.describe(),
                        "started" if start else "ended", self.syncs, t)
            if self.plant_log is not None:
                self.plant_log.event("link_fault" if start else "link_fault_clear", t=t,
                                     fault=window.kind, joint=window.joint, tick=self.syncs,
                                     live=window.live, t2=window.t2, **window.params)

    def _brakes(self) -> None:
        """Holding brakes (``safety.brake``; PlantLink.engage_brakes): a drive without power
        (not OPERATION ENABLED nor QUICK STOP ACTIVE: switched off, disabled, faulted)
        brakes its joint by the jam law; powered again, the brake lets go. One line and a
        plant-log event (``brake``, ``brake_released``) per change."""
        powered = np.array([d.state in (State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE)
                            for d in self.axes])
        t = self.plant.plant.t
        for kind, changed in (("brake", self.plant.engage_brakes(~powered)),
                              ("brake_released", self.plant.release_brakes(powered))):
            if changed.any():
                joints = [int(j) + 1 for j in np.flatnonzero(changed)]
                log.warning("%s on joints %s at SYNC %d", "brakes engaged" if kind == "brake"
                            else "brakes released", joints, self.syncs)
                if self.plant_log is not None:
                    self.plant_log.event(kind, t=t, joints=joints, tick=self.syncs)

    def _set_bus_off(self, drive: DriveAxis, off: bool) -> None:
        """Bus-off: the node first disturbs the bus with BUS_OFF_ERROR_FRAMES error frames
        (its transmit error counter reaching 256), then sends and hears nothing: no PDO,
        SDO, EMCY or heartbeat; its power stage holds its last set-point until its own
        supervision (the master's heartbeat, now unheard) reacts. Back on the bus, it
        resumes its heartbeat and sends EMCY 0x8140 (recovered from bus-off)."""
        if off == drive.bus_off:
            return
        if off:
            for _ in range(BUS_OFF_ERROR_FRAMES):
                self.network.bus.send(can.Message(arbitration_id=0x40, is_error_frame=True,
                                                  is_extended_id=False, dlc=8,
                                                  data=bytes(8)))
        drive.bus_off = off
        drive.node.sdo_silent = off
        self._set_heartbeat(drive, not off)
        if not off:
            drive.node.emcy.send(0x8140, drive.error_register)

    def _set_heartbeat(self, drive: DriveAxis, on: bool) -> None:
        period = drive.node.sdo[cia402.HEARTBEAT_PRODUCER].raw
        if on and period and not drive.bus_off and drive.boot_at is None:
            drive.node.nmt.start_heartbeat(period)
        elif not on:
            drive.node.nmt.stop_heartbeat()

    def _deaf(self, drive: DriveAxis) -> bool:
        """Whether ``drive`` misses this SYNC (bus-off, or a ``sync_loss``)."""
        joints = (drive.axis,)
        return drive.bus_off or self.link_faults.on("sync_loss", joints)

    def _tpdo_fault(self, drive: DriveAxis) -> tuple[str | None, float]:
        """What the active link faults do to ``drive``'s TPDOs of this SYNC: ("drop", 0)
        none is sent (also when the drive is deaf), ("corrupt", 0) each one byte short (a
        wrong-length PDO), ("delay", s) sent s late, or (None, 0)."""
        faults, joints = self.link_faults, (drive.axis,)
        if self._deaf(drive) or faults.active("drop", joints) is not None:
            return "drop", 0.0
        if faults.active("corrupt", joints) is not None:
            return "corrupt", 0.0
        late = faults.active("delay", joints)
        if late is not None:
            return "delay", late.params["delay"]
        return None, 0.0

    def _send_late(self) -> None:
        """The delayed TPDOs of this SYNC, each ``delay`` s after the others (the bus'
        reader waits: a drive that answers late holds up the cycle as on a real bus)."""
        started = time.monotonic()
        for delay, cob_id, payload in sorted(self._late, key=lambda item: item[0]):
            time.sleep(max(0.0, started + delay - time.monotonic()))
            self.network.send_message(cob_id, payload)
        self._late.clear()

    def _sync_lost(self, drive: DriveAxis, silent: float) -> None:
        """No SYNC for ``silent`` s while enabled: the reaction of 0x6007 (CiA 402 abort
        connection option code): 1 FAULT with EMCY 0x8100, 2 disable voltage, 3 quick
        stop, 0 nothing."""
        drive.last_sync = None
        reaction = drive.node.sdo[cia402.ABORT_CONNECTION].raw
        log.warning("node %d: no SYNC for %.3f s (emulator.canopen.sync_timeout = %g s): "
                    "abort connection option code %d", drive.node.id, silent,
                    self.sync_timeout, reaction)
        if reaction == ABORT_FAULT:
            drive.enter_fault(0x8100)
        elif reaction == ABORT_DISABLE_VOLTAGE:
            drive.state = State.SWITCH_ON_DISABLED
        elif reaction == ABORT_QUICK_STOP:
            drive.state = State.QUICK_STOP_ACTIVE

    def state(self, axis: int) -> State:
        """The CiA 402 state of drive ``axis``."""
        with self.lock:
            return self._axis(axis).state

    def _axis(self, axis: int) -> DriveAxis:
        if not 1 <= axis <= len(self.axes):
            raise ValueError(f"axis must be 1..{len(self.axes)}, got {axis}")
        return self.axes[axis - 1]

    # -- SDO ---------------------------------------------------------------------------
    def _on_sdo_read(self, drive: DriveAxis, index: int, subindex: int, od) -> int | None:
        with self.lock:
            values = drive.values()
            values.update({cia402.CONTROLWORD: drive.controlword,
                           cia402.MODES_OF_OPERATION: drive.mode,
                           cia402.TARGET_TORQUE: drive.target})
            return values.get(index)

    def _on_sdo_write(self, drive: DriveAxis, index: int, subindex: int, od, data: bytes) -> None:
        value = od.decode_raw(data)
        with self.lock:
            if index == cia402.CONTROLWORD:
                drive.apply_controlword(value)
            elif index == cia402.MODES_OF_OPERATION:
                if not supported_mode(value):
                    raise SdoAbortedError(ABORT_VALUE_RANGE)     # not listed in 0x6502
                drive.mode = value
            elif index == cia402.TARGET_TORQUE:
                drive.target = value
            elif index == cia402.MAX_TORQUE:
                drive.max_torque = value
            elif index == cia402.HEARTBEAT_CONSUMER and subindex == 1:
                producer, ms = (value >> 16) & 0x7F, value & 0xFFFF
                drive.consumer = (producer, ms / 1000.0) if producer and ms else None
                drive.last_heartbeat = None          # monitoring starts at the next heartbeat
            elif index == cia402.HEARTBEAT_PRODUCER:
                drive.heartbeat_at = None           # the node's NMT slave has (re)started it
            elif cia402.RPDO_COM <= index < cia402.TPDO_MAP + cia402.N_PDO:
                drive.pdo_dirty = True

    # -- PDO configuration ---------------------------------------------------------------
    def _read_pdos(self, drive: DriveAxis) -> None:
        """Parse the PDO communication and mapping objects of ``drive`` into packers."""
        node = drive.node
        drive.tpdos, drive.rpdos = [], {}
        for com, mapping, is_tpdo in ((cia402.TPDO_COM, cia402.TPDO_MAP, True),
                                      (cia402.RPDO_COM, cia402.RPDO_MAP, False)):
            for k in range(cia402.N_PDO):
                cob_id = node.sdo[com + k][1].raw
                if cob_id & cia402.PDO_DISABLED:
                    continue
                entries, fmt = [], "<"
                for sub in range(1, node.sdo[mapping + k][0].raw + 1):
                    entry = node.sdo[mapping + k][sub].raw
                    index, subindex, bits = entry >> 16, (entry >> 8) & 0xFF, entry & 0xFF
                    obj = node.object_dictionary[index]
                    signed = obj.data_type in SIGNED_TYPES
                    entries.append((index, subindex))
                    fmt += _FORMATS[(bits, signed)]
                inhibit = 1e-4 * node.sdo[com + k][3].raw                # 100 µs units
                timer = 1e-3 * node.sdo[com + k][5].raw if is_tpdo else 0.0  # ms
                pdo = _Pdo(cob_id & 0x7FF, node.sdo[com + k][2].raw, entries, struct.Struct(fmt),
                           inhibit, timer)
                if is_tpdo:
                    drive.tpdos.append(pdo)
                else:
                    drive.rpdos[pdo.cob_id] = pdo
        drive.pdo_dirty = False

    # -- bus callbacks (the notifier thread) ---------------------------------------------
    def _on_nmt(self, can_id: int, data: bytes, timestamp: float) -> None:
        command, target = data[0], data[1]
        with self.lock:
            for drive in self.axes:
                if target not in (0, drive.node.id) or drive.boot_at is not None \
                        or drive.bus_off:
                    continue            # another node's, or this one is booting or off: deaf
                if command in (cia402.NMT_RESET_NODE, cia402.NMT_RESET_COMMUNICATION):
                    self._reset(drive, command == cia402.NMT_RESET_NODE)
                elif command == cia402.NMT_START:
                    self._read_pdos(drive)
                elif drive.state == State.OPERATION_ENABLED:
                    drive.state = State.QUICK_STOP_ACTIVE     # left OPERATIONAL while enabled

    def _reset(self, drive: DriveAxis, application: bool) -> None:
        """Reset node (``application``) or communication: the objects back to their
        defaults, and the boot-up ``boot_time`` from now (``_boot_due``); the node's NMT
        slave has already stopped the heartbeat."""
        node = drive.node
        if application:
            node.data_store.clear()
            drive.state, drive.mode, drive.target, drive.error_code = \
                State.SWITCH_ON_DISABLED, 0, 0, 0
        else:
            for index in list(node.data_store):
                if index < 0x2000:
                    del node.data_store[index]
        drive.controlword, drive.pending = 0, {}
        drive.consumer, drive.last_heartbeat, drive.pdo_dirty = None, None, True
        drive.boot_at, drive.heartbeat_at = time.monotonic() + self.boot_time, None

    def _boot(self, drive: DriveAxis, now: float) -> None:
        """The boot-up frame now, the heartbeat from one producer time (0x1017) later."""
        drive.boot_at = None
        drive.node.nmt.boot()
        period = 1e-3 * drive.node.sdo[cia402.HEARTBEAT_PRODUCER].raw
        drive.heartbeat_at = now + period if period else None

    def _boot_due(self, now: float) -> None:
        """Send the boot-ups whose boot time is over, and start the heartbeats due."""
        for drive in self.axes:
            if drive.boot_at is not None and now >= drive.boot_at:
                self._boot(drive, now)
            elif drive.heartbeat_at is not None and now >= drive.heartbeat_at:
                drive.heartbeat_at = None
                drive.node.nmt.start_heartbeat(drive.node.sdo[cia402.HEARTBEAT_PRODUCER].raw)

    def _on_master_heartbeat(self, can_id: int, data: bytes, timestamp: float) -> None:
        now = time.monotonic()
        with self.lock:
            for drive in self.axes:
                if drive.consumer is not None and drive.consumer[0] == self.master_id \
                        and not drive.bus_off:
                    drive.last_heartbeat = now

    def _on_rpdo(self, drive: DriveAxis, can_id: int, data: bytes) -> None:
        with self.lock:
            if drive.pdo_dirty and drive.operational():
                self._read_pdos(drive)
            pdo = drive.rpdos.get(can_id)
            if pdo is None or not drive.operational() or len(data) < pdo.layout.size \
                    or drive.bus_off:
                return
            values = dict(zip((index for index, _ in pdo.entries),
                              pdo.layout.unpack_from(data)))
            if pdo.synchronous:
                drive.pending.update(values)
            else:
                self._apply(drive, values)

    def _apply(self, drive: DriveAxis, values: dict[int, int]) -> None:
        if supported_mode(values.get(cia402.MODES_OF_OPERATION, 0)):
            drive.mode = values[cia402.MODES_OF_OPERATION]   # an unlisted mode is ignored
        if cia402.CONTROLWORD in values:
            drive.apply_controlword(values[cia402.CONTROLWORD])
        if cia402.TARGET_TORQUE in values:
            drive.target = values[cia402.TARGET_TORQUE]

    def _on_sync(self, can_id: int, data: bytes, timestamp: float) -> None:
        with self.lock:
            if self.drop_sync_count:
                self.drop_sync_count -= 1
                return
            if not self._sync_driven():
                return          # no synchronous PDO: the plant runs on the free clock
            self.syncs += 1
            frames = self._sample()
            if self.latency:
                time.sleep(self.latency)
            for cob_id, payload in frames:
                self.network.send_message(cob_id, payload)
            if self._late:
                self._send_late()
            now = time.monotonic()
            for drive in self.axes:
                if not self.link_faults.idle and self._deaf(drive):
                    continue                    # bus-off, or no SYNC heard: nothing applied
                if drive.state == State.OPERATION_ENABLED:
                    drive.last_sync = now
                if drive.pending:
                    self._apply(drive, drive.pending)
                    drive.pending = {}
            self._step()

    def _sync_driven(self) -> bool:
        """The plant clock is SYNC when any operational drive has a synchronous PDO."""
        for drive in self.axes:
            if not drive.operational():
                continue
            if drive.pdo_dirty:
                self._read_pdos(drive)
            if any(pdo.synchronous for pdo in drive.tpdos) or \
                    any(pdo.synchronous for pdo in drive.rpdos.values()):
                return True
        return False

    def _run_clock(self) -> None:
        """Event-driven TPDOs, boot-ups, and the plant's own clock while no PDO is synchronous.

        Sleeps to absolute deadlines (so nothing drifts): at every plant tick (every
        sim.dt of wall-clock time), if some drive is OPERATIONAL and no PDO is
        synchronous, latch the actual values and step the plant (as the SYNC does
        otherwise); at every wake-up, the plant tick or the earliest event timer or boot
        time, send the boot-ups that are due and each event-driven TPDO (type 254/255)
        whose event timer expired or whose statusword changed, its inhibit time respected.
        A statusword change and a reset's boot-up wait for the next wake-up (at most
        sim.dt).
        """
        next_tick = time.monotonic() + self.h
        wake = next_tick
        while True:
            if self._stop.wait(max(wake - time.monotonic(), 0.0)):
                return
            now = time.monotonic()
            with self.lock:
                if self.network is None:
                    return
                self._boot_due(now)
                if now >= next_tick:
                    next_tick = now if now - next_tick > _RESYNC else next_tick
                    next_tick += self.h
                    running = any(drive.operational() for drive in self.axes)
                    if running and not self._sync_driven():
                        self._sample()
                        self._step()
                        self.free_steps += 1
                for cob_id, payload in self._event_frames(now):
                    self.network.send_message(cob_id, payload)
                wake = min([next_tick] + self._deadlines())

    def _deadlines(self) -> list[float]:
        """The pending boot-ups and event timers, time.monotonic() s."""
        times = [t for drive in self.axes for t in (drive.boot_at, drive.heartbeat_at)
                 if t is not None]
        for drive in self.axes:
            if drive.operational() and not drive.pdo_dirty:
                times += [max(pdo.due, pdo.last_sent + pdo.inhibit) for pdo in drive.tpdos
                          if pdo.event_timer and not pdo.synchronous]
        return times

    def _event_frames(self, now: float) -> list[tuple[int, bytes]]:
        """The event-driven TPDO frames due at ``now``: event timer expired or statusword
        changed. A timer sent on time stays on its grid (the next expiry one period after
        this one, not after ``now``); one sent for a change, or late by over a period,
        restarts from ``now``."""
        frames = []
        for drive in self.axes:
            if not drive.operational():
                continue
            if drive.pdo_dirty:
                self._read_pdos(drive)
            values = None
            for pdo in drive.tpdos:
                if pdo.synchronous or now - pdo.last_sent < pdo.inhibit:
                    continue
                if values is None:
                    values = drive.values()
                changed = pdo.last_statusword != values[cia402.STATUSWORD] and \
                    any(index == cia402.STATUSWORD for index, _ in pdo.entries)
                expired = pdo.event_timer and now >= pdo.due
                if changed or expired:
                    on_grid = expired and now - pdo.due < pdo.event_timer
                    pdo.due = (pdo.due if on_grid else now) + pdo.event_timer
                    pdo.last_sent, pdo.last_statusword = now, values[cia402.STATUSWORD]
                    frames.append((pdo.cob_id, pdo.layout.pack(
                        *(values.get(index, 0) for index, _ in pdo.entries))))
        return frames

    def _sample(self) -> list[tuple[int, bytes]]:
        """Latch every axis' actual values; the synchronous TPDO frames due at this SYNC."""
        meas = self.meas
        self.plant.read(meas)
        sd_q, sd_v, sd_i = self.noise
        frames = []
        for j, drive in enumerate(self.axes):
            q, v = meas.pos[j], meas.vel[j]
            i = meas.current[j] if self.voltage_driven else self._motor_torque(j) / self.k_m[j]
            if sd_q:
                q += self.rng.normal(0.0, sd_q)
            if sd_v:
                v += self.rng.normal(0.0, sd_v)
            if sd_i:
                i += self.rng.normal(0.0, sd_i)
            drive.position = _clamp(round(q * self.counts_per_rad[j]), 2 ** 31)
            drive.velocity = _clamp(round(v * self.counts_per_rad[j]), 2 ** 31)
            drive.current = _clamp(round(i / self.rated_current[j] * 1000.0), 2 ** 15)
            drive.torque = _clamp(round(i * self.k_m[j] / self.rated_torque[j] * 1000.0), 2 ** 15)
            if not drive.operational():
                continue
            if drive.pdo_dirty:
                self._read_pdos(drive)
            if drive.drop_tpdos:
                drive.drop_tpdos -= 1
                continue
            fault, delay = None, 0.0
            if self.link_faults.active_count:
                fault, delay = self._tpdo_fault(drive)
                if fault == "drop":
                    continue
            values = drive.values()
            for pdo in drive.tpdos:
                if 1 <= pdo.trans_type <= 240 and self.syncs % pdo.trans_type == 0:
                    payload = pdo.layout.pack(*(values.get(index, 0) for index, _ in pdo.entries))
                    if fault == "corrupt":
                        frames.append((pdo.cob_id, payload[:-1]))   # a wrong-length PDO
                    elif fault == "delay":
                        self._late.append((delay, pdo.cob_id, payload))
                    else:
                        frames.append((pdo.cob_id, payload))
        return frames

    def _motor_torque(self, j: int) -> float:
        """The motor torque drive j commands now, N m (0 unless enabled in CST)."""
        drive = self.axes[j]
        if drive.state != State.OPERATION_ENABLED or drive.mode != cia402.MODE_CST:
            return 0.0
        limit = min(drive.max_torque, 32767)
        return max(-limit, min(limit, drive.target)) * 1e-3 * self.rated_torque[j]

    def _step(self) -> None:
        """Turn the target torques into plant inputs; advance the plant one step."""
        if self.plant_failed:
            return
        qd = self.meas.vel
        for j, drive in enumerate(self.axes):
            tau = self._motor_torque(j)
            if not self.voltage_driven:
                self.u[j] = self.ratio[j] * tau
                continue
            if drive.state != State.OPERATION_ENABLED:
                self.u[j] = 0.0
                continue
            volts = self.r_a[j] * tau / self.k_m[j] + self.k_e[j] * self.ratio[j] * qd[j]
            self.u[j] = max(-self.supply, min(self.supply, volts))
        self._quick_stop()
        if self.has_brakes:
            self._brakes()
        p = self.plant.plant
        apply_schedule(p.params, p.jams, self.schedule, p.t, p.x, 1e-9 * self.h)
        if not self.link_faults.idle:
            self._link_fault_changes(p.t)
        if self.plant_log is not None:
            self.plant_log.record(self.u, self.meas.current)
        try:
            self.plant.write(self.u)
        except LinkError as exc:
            log.error("emulated plant failed: %s", exc)
            self.plant_failed = True
            for drive in self.axes:
                drive.enter_fault(0x6100)
            return
        if self.i2t_time:
            self._i2t()

    def _quick_stop(self) -> None:
        """Drives in QUICK STOP ACTIVE whose option code 0x605A is 2 (slow down on the quick
        stop ramp, then SWITCH ON DISABLED) or 6 (... and stay in QUICK STOP ACTIVE,
        holding) decelerate to rest on their quick stop deceleration 0x6085 (0, the
        power-up value: within ``stop_time``; drivers.controlled_stop sets their inputs),
        then 2 disables the drive; other codes brake at 0 V / 0 N m."""
        servo, stopping = self.stop_servo, self._stopping
        if not servo.active and all(drive.state != State.QUICK_STOP_ACTIVE
                                    for drive in self.axes):
            return                           # the usual cycle: no drive quick-stopping
        for j, drive in enumerate(self.axes):
            stopping[j] = drive.state == State.QUICK_STOP_ACTIVE and \
                drive.node.sdo[cia402.QUICK_STOP_OPTION].raw in (2, 6)
        if not stopping.any():
            servo.stop()
            return
        if not servo.active:
            servo.start(2, self.stop_time, stopping, [
                drive.node.sdo[cia402.QUICK_STOP_DECELERATION].raw / self.counts_per_rad[j]
                for j, drive in enumerate(self.axes)])
        servo.joints[:] = stopping
        if servo.elapsed >= servo.stop_time - 1e-9:
            for j, drive in enumerate(self.axes):
                if stopping[j] and drive.node.sdo[cia402.QUICK_STOP_OPTION].raw == 2:
                    drive.state = State.SWITCH_ON_DISABLED     # at rest: power removed
                    stopping[j] = False
                    self.u[j] = 0.0
            servo.joints[:] = stopping
            if not stopping.any():
                servo.stop()
                return
        servo.command(self.u)

    def _i2t(self) -> None:
        self.plant.read(self.meas)
        for j, drive in enumerate(self.axes):
            i = self.meas.current[j] if self.voltage_driven else self._motor_torque(j) / self.k_m[j]
            rated2 = self.rated_current[j] ** 2
            drive.i2t = max(0.0, drive.i2t + (i * i - rated2) * self.h)
            if drive.i2t > rated2 * self.i2t_time:
                drive.enter_fault(0x2310)

    def _supervise(self) -> None:
        """Heartbeat consumer (0x1016): the controller's heartbeat lost -> FAULT 0x8130;
        SYNC watchdog: an enabled drive that heard SYNC and hears none for
        ``emulator.canopen.sync_timeout`` s reacts as its 0x6007 says (``_sync_lost``)."""
        while not self._stop.wait(_SUPERVISION_PERIOD):
            now = time.monotonic()
            with self.lock:
                for drive in self.axes:
                    if self.sync_timeout and drive.last_sync is not None and \
                            now - drive.last_sync > self.sync_timeout:
                        self._sync_lost(drive, now - drive.last_sync)
                    if drive.consumer is None or drive.last_heartbeat is None:
                        continue
                    if now - drive.last_heartbeat > drive.consumer[1]:
                        drive.last_heartbeat = None
                        log.warning("node %d: heartbeat of node %d lost", drive.node.id,
                                    drive.consumer[0])
                        drive.enter_fault(0x8130)


def _clamp(value: int, bound: int) -> int:
    return max(-bound, min(bound - 1, value))


def supported_mode(mode: int) -> bool:
    """Whether 0x6502 lists ``mode`` (0x6060 value): only those are accepted."""
    return 1 <= mode <= 32 and bool(cia402.SUPPORTED_MODE_BITS >> (mode - 1) & 1)


def serve(cfg: Config, bus_config: dict | None = None, stop_event: threading.Event | None = None,
          ready=None, duration: float | None = None, log_path=None,
          fault_endpoint: str | None = None) -> str:
    """Run the emulated drives of ``cfg`` until ``stop_event`` is set (or forever).

    The entry point of ``hil emulate`` for ``link.type = "canopen"``. For the drives
    in their own process use ``link.canopen.interface = "hilrig_zmq"``: this process
    then runs the hub, and the controller's process joins the same channel.

    Args:
        cfg: a resolved config.
        bus_config: python-can keyword arguments; default ``bus_config_from(cfg)``.
        stop_event: a threading or multiprocessing Event; None: run until interrupted.
        ready: an optional Event, set once the drives have booted.
        duration: stop after this many seconds of wall-clock time (None: no limit).
        log_path: telemetry of the plant (.mcap), flushed on every way out.
        fault_endpoint: where `hil fault` reaches the drives' link faults
            (devices.fault_server; None: nowhere).
    Returns:
        why it stopped: "duration reached", "stopped" or "interrupted".
    Raises:
        TelemetryError naming the count if the plant log lost rows (after stopping the
        drives, at once or at the end, as ``telemetry.on_overrun`` says).
    """
    logging.getLogger("canopen").setLevel(logging.WARNING)   # not a line per SDO transfer
    drives = EmulatedDrives(cfg, bus_config, log_path)
    reason = "stopped"
    faults = None
    try:
        drives.start()
        if fault_endpoint is not None:
            faults = FaultServer(drives, fault_endpoint)
        log.info("emulated CiA 402 drives %s on %s", drives.node_ids, drives.bus_config)
        if ready is not None:
            ready.set()
        stop_event = stop_event if stop_event is not None else threading.Event()
        end = None if duration is None else time.monotonic() + duration
        while not stop_event.is_set():
            left = 0.5 if end is None else min(0.5, end - time.monotonic())
            if left <= 0.0:
                reason = "duration reached"
                break
            if drives.plant_log is not None and drives.plant_log.lost():
                reason = "telemetry ring overrun"      # the log names the count
                break
            stop_event.wait(left)
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        if faults is not None:
            faults.close()
        drives.stop(reason)
    if drives.log_loss is not None:
        raise TelemetryError(drives.log_loss)
    return reason

