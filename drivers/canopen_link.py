"""The CANopen CiA 402 link: drives in cyclic synchronous torque mode over python-can.

Any python-can interface works (socketcan, pcan, kvaser, virtual, hilrig_zmq,
...). The ``canopen`` package does the configuration (SDO, PDO mapping, NMT);
the cycle is written by hand (docs/CANOPEN.md):

``configure``: boot, SDO configuration, PDO mapping, NMT start, every drive in
SWITCH ON DISABLED (power stage off): ``read`` works, ``write`` raises.
``activate``: shutdown, switch on, enable operation, all drives step by step
together, each step confirmed by the statusword; ``enabled_at_ns`` is the
first statusword showing OPERATION ENABLED.

``read``: send SYNC, wait at most ``tpdo_timeout`` for TPDO1 (statusword,
position) and TPDO2 (velocity, current) of every axis, convert to joint units.
``write``: one RPDO1 per axis (controlword "enable operation", target torque in
per-mille of the rated torque); the drives apply it at the next SYNC.

Units: positions in rad and velocities in rad/s at the joint
(increments / (counts_per_rev r / 2 pi)), currents in A, commands in N m at the
joint (motor torque tau / r, in per-mille of the rated torque, clamped to
``max_torque``). Axes are numbered from 1 in messages and in ``DriveFault.axis``.

Documented reactions (each names the axis, its node-id and the cause):

- TPDOs missing after ``tpdo_timeout`` (a dropped SYNC or PDO): ``read`` returns
  False, the measurement keeps its previous value; ``max_missed`` such cycles in
  a row raise ``LinkTimeout`` naming the missing TPDOs' nodes, and the CAN error
  frames seen since ``configure`` if any (``error_frames``: a node going bus-off).
- A TPDO of the wrong length (corrupted): discarded and counted (``bad_frames``,
  the first said in one line); its cycle is then incomplete, as above.
- EMCY with an error code, or a statusword showing FAULT: ``DriveFault`` with the
  drive's code and a plain-language text (cia402.describe_error).
- A drive no longer OPERATION ENABLED (quick stop, disabled) once active: ``LinkError``.
- No heartbeat from a drive for ``heartbeat_timeout``: ``LinkTimeout``; a
  heartbeat showing another NMT state (reset, stopped): ``LinkError``.
- A command that is not finite: ``LinkError`` (nothing is sent).
- ``safe_stop``: quick stop, then disable voltage, on every drive (RPDO + SYNC
  each, no waiting); later ``write`` calls send nothing, ``read`` raises LinkError
  (the base, drivers.link, keeps the lifecycle). That is stop category 0.
- ``controlled_stop`` (IEC 60204-1 categories 1, 2): the quick stop deceleration 0x6085
  and option code 0x605A (2 or 6) over SDO, then quick stop in every RPDO; ``read``
  accepts QUICK STOP ACTIVE (and, category 1, SWITCH ON DISABLED at the end of the ramp).

Threads: the bus' reader (python-can's notifier, which hands the TPDOs to ``read``), the
controller's heartbeat sender and, on ``hilrig_zmq``, the bus' ZeroMQ I/O thread run at
``fifo_priority``, the loop's (timing.sched.spawning), since ``read`` waits on them.
"""
from __future__ import annotations

import logging
import math
import queue
import struct
import threading
import time

import can
import canopen
import numpy as np
from canopen.sdo.exceptions import SdoAbortedError, SdoCommunicationError
from hilrig.drivers import cia402
from hilrig.drivers.cia402 import State
from hilrig.drivers.controlled_stop import RAMP
from hilrig.drivers.link import DriveFault, Link, LinkError, LinkState, LinkTimeout, Measurement
from hilrig.plant.factory import motor_params
from hilrig.schema import Config
from hilrig.timing.sched import spawning

log = logging.getLogger(__name__)

_TPDO1 = struct.Struct("<Hi")    # statusword, position actual (increments)
_TPDO2 = struct.Struct("<ih")    # velocity actual (increments/s), current actual (per-mille)
_RPDO1 = struct.Struct("<Hh")    # controlword, target torque (per-mille)
_TPDO_SIZE = 6                    # bytes of TPDO1 and of TPDO2
_SYNC = can.Message(arbitration_id=0x080, is_extended_id=False, data=b"")


class _ErrorFrames(can.Listener):
    """Counts the CAN error frames on the bus into ``link.error_frames`` (the bus' reader
    thread; canopen's own listener ignores them)."""

    def __init__(self, link: "CanopenLink"):
        self.link = link

    def on_message_received(self, msg: can.Message) -> None:
        if msg.is_error_frame:
            self.link.error_frames += 1


class CanopenLink(Link):
    """CiA 402 drives in cyclic synchronous torque mode on one CAN bus.

    Args:
        bus_config: python-can keyword arguments (interface, channel, bitrate, ...).
        node_ids: the drives' node-ids, one per axis.
        period: SYNC period = control period, s.
        gear_ratio: r per axis (motor angle / joint angle).
        counts_per_rev: encoder increments per motor revolution, per axis.
        rated_torque: motor rated torque (0x6076) per axis, N m at the motor shaft.
        rated_current: motor rated current (0x6075) per axis, A.
        max_torque: torque limit (0x6072), per-mille of the rated torque.
        master_id: node-id of the controller's heartbeat.
        heartbeat_period: heartbeat producer time of drives and controller, s.
        heartbeat_timeout: consumer time in both directions, s.
        tpdo_timeout: ``read`` waits at most this long after SYNC, s.
        max_missed: incomplete cycles in a row before ``LinkTimeout``.
        sdo_timeout: SDO response timeout, s.
        boot_timeout: wait for boot-up, and for each state change when enabling, s.
        fifo_priority: SCHED_FIFO priority of the link's threads (the loop's; 0: normal).
        quick_stop_deceleration: per axis, rad/s^2 at the joint, the quick stop
            deceleration 0x6085 a controlled stop writes; None: from each joint's rate at
            the stop (``quick_stop_decelerations``).
    """

    command_unit = "N m"

    def __init__(self, bus_config: dict, node_ids, period: float, gear_ratio, counts_per_rev,
                 rated_torque, rated_current, max_torque: int = 5000, master_id: int = 127,
                 heartbeat_period: float = 0.1, heartbeat_timeout: float = 0.3,
                 tpdo_timeout: float | None = None, max_missed: int = 3,
                 sdo_timeout: float = 0.3, boot_timeout: float = 2.0, fifo_priority: int = 0,
                 quick_stop_deceleration=None):
        self.bus_config = dict(bus_config)
        self.fifo_priority = int(fifo_priority)
        if self.bus_config.get("interface") == "hilrig_zmq":
            self.bus_config.setdefault("fifo_priority", self.fifo_priority)
        self.node_ids = [int(i) for i in node_ids]
        self.n_axes = n = len(self.node_ids)
        self.period = float(period)
        ratio = np.broadcast_to(np.asarray(gear_ratio, dtype=float), n)
        self.counts_per_rad = np.broadcast_to(np.asarray(counts_per_rev, float), n) * ratio \
            / (2.0 * math.pi)
        self.rated_torque = np.broadcast_to(np.asarray(rated_torque, dtype=float), n).copy()
        self.rated_current = np.broadcast_to(np.asarray(rated_current, dtype=float), n).copy()
        self.permille_per_nm = 1000.0 / (ratio * self.rated_torque)    # joint N m -> per-mille
        self.max_torque = int(max_torque)
        self.master_id = int(master_id)
        self.heartbeat_period = float(heartbeat_period)
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.tpdo_timeout = float(tpdo_timeout if tpdo_timeout is not None else 0.5 * period)
        self.max_missed = int(max_missed)
        self.sdo_timeout = float(sdo_timeout)
        self.boot_timeout = float(boot_timeout)
        self.quick_stop_deceleration = None if quick_stop_deceleration is None else \
            np.broadcast_to(np.asarray(quick_stop_deceleration, dtype=float), n).copy()
        self.network: canopen.Network | None = None
        self.nodes: list[canopen.RemoteNode] = []
        self.syncs = 0
        self.missed = 0
        self.stale_frames = 0
        self.stopping = 0              # a controlled stop's category (1, 2) once under way
        self.bad_frames = 0            # TPDOs of the wrong length, discarded
        self.error_frames = 0          # CAN error frames seen since configure (is_error_frame)
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._heartbeat_task = None
        self._booted = [threading.Event() for _ in range(n)]
        self._last_heartbeat = np.zeros(n)
        self._statusword = np.zeros(n, dtype=np.int64)
        self._fresh = np.zeros(2 * n, dtype=bool)
        self._staging = np.zeros((3, n))     # wire values: position, velocity, current
        self._emcy: dict[int, int] = {}
        self._rpdo = [can.Message(arbitration_id=0x200 + i, is_extended_id=False,
                                  data=bytearray(4)) for i in self.node_ids]
        self._cob = {}
        for axis, node_id in enumerate(self.node_ids):
            self._cob[0x180 + node_id] = (0, axis)
            self._cob[0x280 + node_id] = (1, axis)
            self._cob[0x080 + node_id] = (2, axis)
            self._cob[0x700 + node_id] = (3, axis)

    @classmethod
    def from_config(cls, cfg: Config) -> "CanopenLink":
        """The link of a resolved config (``link.canopen``, ``sim.dt``, ``plant.motor``)."""
        c = cfg.link.canopen
        bus = {"interface": c.interface, "channel": c.channel, "bitrate": c.bitrate}
        return cls(bus, c.node_ids, cfg.sim.dt, motor_params(cfg).gear_ratio,
                   c.counts_per_rev, c.rated_torque, c.rated_current, c.max_torque,
                   c.master_id, c.heartbeat_period, c.heartbeat_timeout,
                   c.tpdo_timeout, c.max_missed, c.sdo_timeout, c.boot_timeout,
                   cfg.loop.fifo_priority, c.quick_stop_deceleration)

    def describe(self) -> str:
        bus = self.bus_config
        return f"CANopen link ({bus.get('interface')} {bus.get('channel')})"

    def _name(self, axis: int) -> str:
        return f"axis {axis + 1} (node {self.node_ids[axis]})"

    # -- bring-up -----------------------------------------------------------------------
    def _configure(self) -> None:
        """Boot and configure every drive, leave it in SWITCH ON DISABLED; LinkError (or a
        subclass) names any cause (the base then calls ``_close``: the bus is released).

        Sequence per drive: NMT reset communication, wait for boot-up; check the device
        type (CiA 402); SDO configuration (heartbeat producer 0x1017, cycle period 0x1006,
        interpolation period 0x60C2, max torque 0x6072, mode 0x6060 = CST confirmed by
        0x6061, target torque 0); PDO mapping (RPDO1, TPDO1, TPDO2 synchronous, the others
        disabled); NMT start; the state machine to SWITCH ON DISABLED over SDO (fault
        reset, or disable voltage, if needed). The drives do not supervise the
        controller's heartbeat yet (``_activate``).
        """
        net = canopen.Network()
        net.NOTIFIER_CYCLE = 0.05
        with spawning(self.fifo_priority):     # the bus' reader, the heartbeat sender
            try:
                net.connect(**self.bus_config)
            except (can.CanError, OSError, NotImplementedError, ValueError) as exc:
                raise LinkError(f"cannot open the CAN bus {self.bus_config}: {exc}") from exc
            self.network = net
            net.notifier.add_listener(_ErrorFrames(self))
            for cob_id in self._cob:
                net.subscribe(cob_id, self._on_frame)
            self._heartbeat_task = net.send_periodic(0x700 + self.master_id,
                                                     [cia402.OPERATIONAL],
                                                     self.heartbeat_period)
        self.nodes = []
        for node_id in self.node_ids:
            node = net.add_node(node_id, cia402.object_dictionary(node_id))
            node.sdo.RESPONSE_TIMEOUT = self.sdo_timeout
            self.nodes.append(node)
        for axis in range(self.n_axes):
            self._boot(axis)
            self._configure_drive(axis)
        for node in self.nodes:
            node.nmt.state = "OPERATIONAL"
        for axis in range(self.n_axes):
            self._disable(axis)
        self._events = queue.SimpleQueue()   # bring-up heartbeats (boot-up, PRE-OPERATIONAL)
        self._last_heartbeat[:] = time.monotonic()
        self.missed = 0

    def _activate(self) -> None:
        """The drives' supervision of the controller's heartbeat (consumer 0x1016, for
        ``heartbeat_timeout``), then shutdown, switch on, enable operation: each on every
        drive, then confirmed.

        The supervision starts here, not at ``configure``: between the two the loop warms
        its kernels at normal priority, holding the GIL for seconds on a busy host, so
        the heartbeat sender (a Python thread) may fall silent while the drives have no
        power to remove; from ``activate`` on the loop runs at its own priority
        (tests/test_canopen_link.py, the GIL held between the two).

        Sets ``enabled_at_ns`` to the first statusword showing OPERATION ENABLED. Raises
        LinkError (DriveFault, LinkTimeout) naming the drive and the step that failed; the
        base then stops the drives (``_safe_stop``) and leaves the bus (``_close``).
        """
        for axis in range(self.n_axes):
            self._sdo_write(axis, cia402.HEARTBEAT_CONSUMER, 1, self.master_id << 16
                            | max(1, round(self.heartbeat_timeout * 1000)))
        self._transition(cia402.CW_SHUTDOWN, State.READY_TO_SWITCH_ON, "shutdown")
        self._transition(cia402.CW_SWITCH_ON, State.SWITCHED_ON, "switch on")
        self.enabled_at_ns = self._transition(cia402.CW_ENABLE_OPERATION,
                                              State.OPERATION_ENABLED, "enable operation")

    def _on_frame(self, can_id: int, data: bytearray, timestamp: float) -> None:
        """Notifier thread: hand cycle frames to ``read`` (boot-ups also signal ``open``)."""
        kind, axis = self._cob[can_id]
        if kind == 3 and data[0] == 0:
            self._booted[axis].set()
        self._events.put((kind, axis, bytes(data), time.monotonic()))

    def _boot(self, axis: int) -> None:
        self._booted[axis].clear()
        self.nodes[axis].nmt.state = "RESET COMMUNICATION"
        if not self._booted[axis].wait(self.boot_timeout):
            raise LinkTimeout(f"{self._name(axis)}: no boot-up within {self.boot_timeout} s "
                              "after NMT reset communication: the drive is off, on another "
                              "bus or bitrate, or has another node-id")
        device_type = self._sdo_read(axis, cia402.DEVICE_TYPE)
        if device_type & 0xFFFF != 402:
            raise LinkError(f"{self._name(axis)}: device type 0x{device_type:08X} is not a "
                            "CiA 402 drive (profile 402 expected in 0x1000 bits 15..0)")

    def _configure_drive(self, axis: int) -> None:
        node = self.nodes[axis]
        self._sdo_write(axis, cia402.HEARTBEAT_PRODUCER, 0,
                        max(1, round(self.heartbeat_period * 1000)))
        self._sdo_write(axis, cia402.CYCLE_PERIOD, 0, round(self.period * 1e6), optional=True)
        value, index = cia402.interpolation_period(self.period)
        self._sdo_write(axis, cia402.INTERPOLATION_PERIOD, 1, value, optional=True)
        self._sdo_write(axis, cia402.INTERPOLATION_PERIOD, 2, index, optional=True)
        self._sdo_write(axis, cia402.MAX_TORQUE, 0, self.max_torque, optional=True)
        self._sdo_write(axis, cia402.TARGET_TORQUE, 0, 0)
        self._sdo_write(axis, cia402.MODES_OF_OPERATION, 0, cia402.MODE_CST)
        mode = self._sdo_read(axis, cia402.MODES_DISPLAY)
        if mode != cia402.MODE_CST:
            raise LinkError(f"{self._name(axis)}: the drive did not take cyclic synchronous "
                            f"torque mode (0x6061 shows {mode}, 10 expected)")
        layouts = {("rpdo", 1): cia402.RPDO1_LAYOUT, ("tpdo", 1): cia402.TPDO1_LAYOUT,
                   ("tpdo", 2): cia402.TPDO2_LAYOUT}
        try:
            for kind, pdos in (("rpdo", node.rpdo), ("tpdo", node.tpdo)):
                pdos.read(from_od=True)
                for k in range(1, cia402.N_PDO + 1):
                    pdo = pdos[k]
                    pdo.clear()
                    layout = layouts.get((kind, k))
                    pdo.enabled = layout is not None
                    for index, subindex, bits in layout or ():
                        pdo.add_variable(index, subindex, bits)
                    pdo.trans_type = 1
                    pdo.save()
                    if pdo.on_message in self.network.subscribers.get(pdo.cob_id, ()):
                        # the cycle decodes its frames itself (``_on_frame``)
                        self.network.unsubscribe(pdo.cob_id, pdo.on_message)
        except (SdoAbortedError, SdoCommunicationError) as exc:
            raise LinkError(f"{self._name(axis)}: PDO mapping rejected: {exc}") from exc

    def _disable(self, axis: int) -> None:
        """Bring the drive to SWITCH ON DISABLED over SDO (fault reset if it is in FAULT)."""
        state = self._state(axis)
        if state == State.SWITCH_ON_DISABLED:
            return
        self._sdo_write(axis, cia402.CONTROLWORD, 0, cia402.CW_DISABLE_VOLTAGE)
        if state in (State.FAULT, State.FAULT_REACTION_ACTIVE):
            self._sdo_write(axis, cia402.CONTROLWORD, 0, cia402.CW_FAULT_RESET)
        self._await(axis, State.SWITCH_ON_DISABLED, "fault reset" if state in (
            State.FAULT, State.FAULT_REACTION_ACTIVE) else "disable voltage")

    def _transition(self, word: int, expected: State, name: str) -> int:
        """Write ``word`` to every drive's controlword, then wait until each shows ``expected``.

        Returns the ``time.monotonic_ns()`` of the first statusword showing ``expected``.
        """
        for axis in range(self.n_axes):
            self._sdo_write(axis, cia402.CONTROLWORD, 0, word)
        return min(self._await(axis, expected, name) for axis in range(self.n_axes))

    def _await(self, axis: int, expected: State, name: str) -> int:
        """Poll the statusword over SDO until it shows ``expected`` (``boot_timeout`` at most).

        Returns the ``time.monotonic_ns()`` at which it did.
        """
        deadline = time.monotonic() + self.boot_timeout
        while True:
            sw = self._sdo_read(axis, cia402.STATUSWORD)
            seen_ns = time.monotonic_ns()
            state = cia402.decode_state(sw)
            if state == expected:
                return seen_ns
            if state == State.FAULT:
                code = self._sdo_read(axis, cia402.ERROR_CODE)
                raise DriveFault(axis + 1, code, f"{cia402.describe_error(code)} (during "
                                 f"'{name}' at bring-up, node {self.node_ids[axis]})")
            if time.monotonic() > deadline:
                label = state.label if state is not None else "an undecodable state"
                raise LinkError(f"{self._name(axis)}: the drive refused '{name}': still in "
                                f"{label} (statusword 0x{sw:04X}) after {self.boot_timeout} s, "
                                f"{expected.label} expected")
            time.sleep(0.001)

    def _state(self, axis: int) -> State | None:
        return cia402.decode_state(self._sdo_read(axis, cia402.STATUSWORD))

    def _sdo_read(self, axis: int, index: int, subindex: int = 0) -> int:
        try:
            var = self.nodes[axis].sdo[index]
            return (var[subindex] if subindex else var).raw
        except SdoCommunicationError as exc:
            raise LinkTimeout(f"{self._name(axis)}: no SDO answer reading 0x{index:04X}:"
                              f"{subindex:02X} within {self.sdo_timeout} s ({exc})") from exc
        except SdoAbortedError as exc:
            raise LinkError(f"{self._name(axis)}: SDO read of 0x{index:04X}:{subindex:02X} "
                            f"refused: {exc}") from exc

    def _sdo_write(self, axis: int, index: int, subindex: int, value: int,
                   optional: bool = False) -> None:
        try:
            var = self.nodes[axis].sdo[index]
            (var[subindex] if subindex else var).raw = value
        except SdoCommunicationError as exc:
            raise LinkTimeout(f"{self._name(axis)}: no SDO answer writing 0x{index:04X}:"
                              f"{subindex:02X} within {self.sdo_timeout} s ({exc})") from exc
        except SdoAbortedError as exc:
            if optional and exc.code == 0x06020000:
                log.info("%s: object 0x%04X absent, skipped", self._name(axis), index)
                return
            raise LinkError(f"{self._name(axis)}: SDO write 0x{index:04X}:{subindex:02X} = "
                            f"{value} refused: {exc}") from exc

    # -- the cycle ------------------------------------------------------------------------
    def _read(self, meas: Measurement) -> bool:
        """SYNC, then the TPDOs of every axis within ``tpdo_timeout``; see the module docstring."""
        self.stale_frames += self._drain_events()
        self._fresh[:] = False
        try:
            self.network.bus.send(_SYNC)
        except can.CanError as exc:
            raise LinkError(f"cannot send SYNC: {exc}") from exc
        self.syncs += 1
        deadline = time.monotonic() + self.tpdo_timeout
        events = self._events
        while not self._fresh.all():
            remaining = deadline - time.monotonic()
            if remaining <= 0.0:
                break
            try:
                event = events.get(timeout=remaining)
            except queue.Empty:
                break
            self._handle(event)
        self._check_heartbeats()
        if not self._fresh.all():
            self.missed += 1
            if self.missed >= self.max_missed:
                lost = sorted({self._name(i % self.n_axes) + f" TPDO{i // self.n_axes + 1}"
                               for i in np.flatnonzero(~self._fresh)})
                errors = self.error_frames
                seen = f"; {errors} CAN error frames seen on the bus (a node bus-off?)" \
                    if errors else ""
                raise LinkTimeout(f"no TPDO within {self.tpdo_timeout * 1e3:.3g} ms of SYNC for "
                                  f"{self.missed} cycles in a row; missing: {', '.join(lost)}"
                                  f"{seen}")
            return False
        self.missed = 0
        self._check_states()
        meas.buffer[0] = (self.syncs - 1) * self.period     # the drives latch at SYNC
        np.divide(self._staging[0], self.counts_per_rad, out=meas.pos)
        np.divide(self._staging[1], self.counts_per_rad, out=meas.vel)
        np.multiply(self._staging[2], self.rated_current, out=meas.current)
        meas.current *= 1e-3
        return True

    def _drain_events(self) -> int:
        """Handle what arrived since the last cycle; TPDOs that came too late are dropped.

        Returns the number of late TPDOs.
        """
        stale = 0
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return stale
            if event[0] < 2:
                stale += 1
            else:
                self._handle(event)

    def _handle(self, event) -> None:
        kind, axis, data, when = event
        if kind < 2 and len(data) != _TPDO_SIZE:
            self._bad_frame(axis, kind, data)
        elif kind == 0:
            sw, pos = _TPDO1.unpack_from(data)
            self._statusword[axis], self._staging[0, axis] = sw, pos
            self._fresh[axis] = True
        elif kind == 1:
            vel, cur = _TPDO2.unpack_from(data)
            self._staging[1, axis], self._staging[2, axis] = vel, cur
            self._fresh[self.n_axes + axis] = True
        elif kind == 2:
            code = int.from_bytes(data[:2], "little")
            if code:
                self._emcy[axis] = code
                raise DriveFault(axis + 1, code, f"{cia402.describe_error(code)} (EMCY from "
                                 f"node {self.node_ids[axis]}, error register "
                                 f"0x{data[2]:02X})")
        else:
            self._last_heartbeat[axis] = when
            state = data[0] & 0x7F
            if state != cia402.OPERATIONAL:
                name = cia402.NMT_STATE_NAMES.get(state, f"0x{state:02X}")
                raise LinkError(f"{self._name(axis)} left NMT OPERATIONAL: its heartbeat "
                                f"reports {name} (the drive was reset, stopped or rebooted)")

    def _bad_frame(self, axis: int, kind: int, data: bytes) -> None:
        """A TPDO of the wrong length: discarded and counted, the first said in one line."""
        if self.bad_frames == 0:
            log.warning("%s: TPDO%d of %d bytes (%d expected): discarded; further ones are "
                        "counted (bad_frames)", self._name(axis), kind + 1, len(data),
                        _TPDO_SIZE)
        self.bad_frames += 1

    def _check_heartbeats(self) -> None:
        silent = time.monotonic() - self._last_heartbeat
        axis = int(np.argmax(silent))
        if silent[axis] > self.heartbeat_timeout:
            raise LinkTimeout(f"{self._name(axis)}: heartbeat lost: none for "
                              f"{silent[axis]:.3f} s (consumer timeout "
                              f"{self.heartbeat_timeout} s); the drive or its bus connection "
                              "is gone")

    def _check_states(self) -> None:
        """A drive in FAULT: DriveFault; once active, a drive not OPERATION ENABLED: LinkError."""
        for axis in range(self.n_axes):
            sw = int(self._statusword[axis])
            state = cia402.decode_state(sw)
            if state == State.OPERATION_ENABLED or self.stopping and (
                    state == State.QUICK_STOP_ACTIVE
                    or self.stopping == 1 and state == State.SWITCH_ON_DISABLED):
                continue                # (a controlled stop: quick stop, then disabled)
            if state in (State.FAULT, State.FAULT_REACTION_ACTIVE):
                code = self._emcy.get(axis, 0)
                text = cia402.describe_error(code) if code else \
                    "the statusword shows FAULT (no EMCY received; see 0x603F)"
                raise DriveFault(axis + 1, code, text)
            if self.lifecycle is not LinkState.ACTIVE:
                continue
            label = state.label if state is not None else "an undecodable state"
            raise LinkError(f"{self._name(axis)}: the drive left OPERATION ENABLED: now "
                            f"{label} (statusword 0x{sw:04X})")

    def _write(self, command: np.ndarray) -> None:
        """RPDO1 per axis: enable operation, target torque = command (N m at the joint);
        during a controlled stop, quick stop and 0 (``command`` is not used)."""
        if self.stopping:
            self._send_words(cia402.CW_QUICK_STOP, sync=False)
            return
        for axis in range(self.n_axes):
            tau = float(command[axis])
            if not math.isfinite(tau):
                raise LinkError(f"{self._name(axis)}: command {tau} N m is not finite; "
                                "nothing sent")
        bus = self.network.bus
        limit = self.max_torque
        try:
            for axis in range(self.n_axes):
                permille = round(float(command[axis]) * self.permille_per_nm[axis])
                permille = max(-limit, min(limit, permille))
                msg = self._rpdo[axis]
                _RPDO1.pack_into(msg.data, 0, cia402.CW_ENABLE_OPERATION, permille)
                bus.send(msg)
        except can.CanError as exc:
            raise LinkError(f"cannot send RPDO: {exc}") from exc

    # -- stopping -------------------------------------------------------------------------
    def _controlled_stop(self, category: int, stop_time: float) -> None:
        """IEC 60204-1 category 1 or 2 in the drives: over SDO the quick stop deceleration
        0x6085 (``quick_stop_decelerations``: the ramp the drive slows down on) and the
        quick stop option code 0x605A (2: slow down on the quick stop ramp, then SWITCH ON
        DISABLED; 6: ... and stay in QUICK STOP ACTIVE, holding), then quick stop on every
        RPDO from now on."""
        decelerations = self.quick_stop_decelerations(stop_time)
        for axis in range(self.n_axes):
            self._sdo_write(axis, cia402.QUICK_STOP_DECELERATION, 0, decelerations[axis])
            self._sdo_write(axis, cia402.QUICK_STOP_OPTION, 0, 2 if category == 1 else 6)
        self.stopping = category
        self._send_words(cia402.CW_QUICK_STOP, sync=False)

    def quick_stop_decelerations(self, stop_time: float) -> list[int]:
        """The quick stop deceleration 0x6085 of each drive, increments/s^2 (at least 1):
        ``quick_stop_deceleration`` (rad/s^2 at the joint) in the drive's units, or, unset,
        the deceleration that brings the drive from its last measured rate to rest in
        RAMP x ``stop_time`` s (drivers.controlled_stop: the rest of the stop time lets
        it settle), so that the joints are at rest within ``stop_time``."""
        if self.quick_stop_deceleration is not None:
            wanted = self.quick_stop_deceleration * self.counts_per_rad
        else:
            wanted = np.abs(self._staging[1]) / (RAMP * stop_time)
        return [max(1, min(int(round(d)), 0xFFFFFFFF)) for d in wanted]

    def _send_words(self, word: int, sync: bool) -> None:
        """RPDO1 with ``word`` and target torque 0 to every drive (and a SYNC)."""
        try:
            for msg in self._rpdo:
                _RPDO1.pack_into(msg.data, 0, word, 0)
                self.network.bus.send(msg)
            if sync:
                self.network.bus.send(_SYNC)
        except can.CanError as exc:
            raise LinkError(f"cannot send RPDO: {exc}") from exc

    def _safe_stop(self) -> None:
        """Quick stop, then disable voltage, on every drive (RPDO + SYNC each, no waiting).

        The bus may be the reason we stop: what a send raises, the base logs.
        """
        for word in (cia402.CW_QUICK_STOP, cia402.CW_DISABLE_VOLTAGE):
            self._send_words(word, sync=True)

    def _close(self) -> None:
        """Stop the controller heartbeat and leave the bus (if configure got as far)."""
        net, self.network = self.network, None
        if net is None:
            return
        if self._heartbeat_task is not None:
            self._heartbeat_task.stop()
            self._heartbeat_task = None
        net.disconnect()
