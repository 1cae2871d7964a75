"""The plant emulator as its own process: ``hil emulate CONFIG --bind ENDPOINT``.

One ZeroMQ ROUTER socket serves every peer (controller, fault tool) with the
frames of drivers.wire. Two modes (``emulator.mode``):

- **free**: the plant steps at the fixed rate in real time from the first HELLO
  on, holding the latest COMMAND; after every step it sends a STATE to the
  controller. A command older than ``emulator.command_timeout`` (a silent or
  dead controller), or a BYE, puts the plant in its safe state: zero input
  (zero volts: the motors brake through their back-EMF; zero torque).
- **lockstep**: each COMMAND advances the plant exactly one step and is
  answered with the next STATE: deterministic, for tests and batch runs.

One controller commands the plant at a time: a HELLO while the controller that said
HELLO before is still connected is refused (ERROR_BUSY) unless it is a TAKEOVER, which
is logged. The endpoint is bound by drivers.endpoint (never over a live one, ipc sockets
owner-only, tcp with CURVE keys), so FAULT frames come only from this user.

A STOP [category, stop time] from the controller (``hil estop --category 1|2`` through
``hil control``) is a controlled stop of IEC 60204-1 by the emulated drives
(drivers.controlled_stop): the joints brought to rest within the stop time, then
category 1 removes the power (zero input), category 2 holds them until BYE or a silent
controller (its COMMANDs keep the session alive but move nothing). Whenever the power is
removed (the safe state) the joints with a holding brake (``safety.brake``) stop by the
jam law and stay blocked (PlantLink.engage_brakes; an event ``brake``) until a COMMAND
powers the drives again; after a category 1 stop only a new session's (HELLO): the
stopping controller's COMMANDs do not.

Link faults (devices.link_faults; ``[[faults.drop|delay|corrupt]]``, ``inject``) act on
the STATEs: dropped, held back ``delay`` s of plant time (in order), or their header
corrupted; each start and end is one line and an event.

Faults (FAULT frames from ``hil fault``, or the [faults] tables of the config: plant.faults)
take effect at the next tick boundary; the FAULT_ACK names that tick and its plant
time. Every frame that breaks the wire format is rejected while the emulator keeps
running, at a bounded cost (devices.rejects): per reason and second one logged line
and event, ERROR replies rate-limited, at most DRAIN_BUDGET of a period spent receiving
per tick, RCVHWM frames queued per peer. Late ticks are counted as overruns, as in
``hil run``. Telemetry (the full plant state, every event) goes to ``--log`` if given:
in lockstep each step waits for room in the telemetry ring, so no row is lost; in free
mode rows lost to a ring overrun stop the emulator or are reported, as
``telemetry.on_overrun`` says (telemetry.recorder.RowLoss), and the summary and exit
code name the count.

Scheduling (docs/RIGPC.md): ``serve`` runs at SCHED_FIFO ``emulator.fifo_priority`` on
``emulator.cpu``, and so does the I/O thread of the emulator's own ZeroMQ context; the
telemetry writer and the live view run below, at SCHED_FIFO 1 (they share the
interpreter lock with the serving loop: timing.sched.helper_priority). In free mode each step
sleeps until ``emulator.spin`` before its deadline and busy-waits only that last
stretch: the emulator mostly sleeps, so that it and a controller spinning its
``loop.spin`` on the other core leave a 2-core machine room for both of their I/O
threads.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path

import numpy as np
import zmq
import zmq.utils.monitor
from hilrig.devices.link_faults import PARAMETERS as LINK_PARAMETERS
from hilrig.devices.link_faults import LinkFaults, corrupted, link_kinds_mask
from hilrig.drivers.controlled_stop import ControlledStop
from hilrig.devices.rejects import RejectLog
from hilrig.drivers import endpoint as endpoints
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import LinkError, Measurement
from hilrig.errors import ConfigError
from hilrig.drivers.wire import (
    ERROR_BUSY,
    ERROR_STATE,
    ERROR_TEXT,
    ERROR_VALUE,
    FAULT_VALUES,
    HEADER,
    LINK_CODE0,
    REFUSED_CHAIN,
    REFUSED_FULL,
    REFUSED_JOINT,
    REFUSED_KIND,
    REFUSED_MOTOR,
    REFUSED_PARAM,
    MAX_VALUES,
    MessageType,
    WireError,
    decode,
    decode_fault,
    encode,
)
from hilrig.plant.factory import fault_schedule, plant_model
from hilrig.plant.layout import DRIVE_TORQUE, H_DRIVE
from hilrig.plant.motor import currents
from hilrig.plant.faults import (
    C_KIND,
    C_T1,
    CHANNEL_NAMES,
    KINDS,
    LINK,
    LIVE_ROWS,
    NAMES,
    add_row,
    hold_previous,
    live_row,
    plant_refusal,
    report_changes,
    sense,
)
from hilrig.plant.stepping import apply_schedule
from hilrig.schema import Config
from hilrig.telemetry.derived import Diagnostics
from hilrig.telemetry.recorder import RowLoss, Telemetry, ring_capacity, run_groups
from hilrig.telemetry.rows import fill_row, publish_row, row_columns
from hilrig.telemetry.scene import attach as attach_scene
from hilrig.timing.clock import now_ns, spin_window_ns, timespec, wait_until_ns
from hilrig.timing.pacing import CATCH_UP, Pacer
from hilrig.timing.sched import apply_thread, helper_priority, restore_thread
from hilrig.timing.signals import ignored_signals
from hilrig.timing.summary import summarize

log = logging.getLogger("hil.emulator")

MODES = {"free": 0, "lockstep": 1}
MAX_FRAME_BYTES = HEADER.size + 8 * MAX_VALUES   # larger frames are dropped by ZeroMQ
MAX_MESSAGES_PER_TICK = 256   # a flooding peer cannot starve the plant ...
DRAIN_BUDGET = 0.25           # ... nor take more than this fraction of a period (free mode)
RECEIVE_HWM = 100             # frames queued per peer; beyond, ZeroMQ stops reading it
HELLO_KINDS = (MessageType.HELLO, MessageType.TAKEOVER)


class _Refusal(ValueError):
    """A FAULT this emulator cannot take: ``status`` a drivers.wire.FAULT_REFUSALS code."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status


class Emulator:
    """A plant behind a ZeroMQ socket. Use ``serve()``; ``close()`` when done."""

    def __init__(self, cfg: Config, endpoint: str, log_path: str | Path | None = None,
                 context: zmq.Context | None = None):
        endpoints.check(endpoint, binding=True)
        self.cfg = cfg
        self.mode = cfg.emulator.mode
        self.h = cfg.sim.dt
        self.link = PlantLink.from_config(cfg)
        self.link.open()                  # the emulator itself holds zero until a COMMAND
        plant = self.plant = self.link.plant
        self.nact = plant.nact
        self.voltage = int(plant.params[H_DRIVE]) != DRIVE_TORQUE
        # what the emulated drives can physically apply: every command is saturated there
        self.command_limit = cfg.emulator.drive_range("V" if self.voltage else "N m")
        self.failed = False                # the plant reached an invalid state
        self.schedule = fault_schedule(cfg, LIVE_ROWS)    # spare rows: live faults
        self.link_faults = LinkFaults(cfg, "zmq", plant.nact)   # drop, delay, corrupt
        self.delayed: deque = deque()      # (plant time due, peer, frame) of delayed STATEs
        self.meas = Measurement(self.nact)
        self.command = np.zeros(self.nact)     # what the drives apply over the next step
        self.requested = np.zeros(self.nact)   # the latest COMMAND, saturated
        # safety.max_slew holds per emulator tick, however the commands bunch up on the wire
        slew = cfg.safety.max_slew
        self.slew_step = np.full(self.nact, np.inf) if slew is None else np.array(slew) * self.h
        self.slew_bounds = np.zeros((2, self.nact))
        # STOP (IEC 60204-1 categories 1, 2): the drives' stop servo, made now (no allocation
        # when a stop comes); ``stopping`` while one is under way
        self.stop_servo = ControlledStop(plant, self.h, self.link.method, self.link.correction,
                                         self.command_limit)
        self.stopping = False
        # a category 1 stop removed the power: the stopping controller's COMMANDs (which
        # keep its session alive) do not restore it; a new session's HELLO lets them
        self.stopped_unpowered = False
        self.tick = 0
        self.controller = None            # ZeroMQ identity of the controller
        self.controller_fd = -1           # its connection (file descriptor; -1: unknown)
        self.last_command_ns = 0
        self.safe = True                  # zero input until the first command
        self.rejects = RejectLog()
        self.ts = timespec()
        self.helper_priority = helper_priority(cfg.emulator.fifo_priority)
        self.owns_context = context is None
        self.context = context or endpoints.context(cfg.emulator.fifo_priority)
        self.scheduling: dict = {}
        self.pacer = Pacer(int(round(self.h * 1e9)), spin_window_ns(cfg.emulator.spin, self.h),
                           CATCH_UP)       # free mode: every tick runs, late ones catch up
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        self.socket.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        self.socket.setsockopt(zmq.SNDHWM, RECEIVE_HWM)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 0)
        # disconnections, to know whether the controller is still there
        self.monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            endpoints.bind(self.socket, endpoint, "emulator")
        except BaseException:
            self.monitor.close(0)
            self.socket.close(0)
            if self.owns_context:
                self.context.term()
            raise
        self.endpoint = endpoint
        self.telemetry = None
        self.row_loss = None
        self.timings = np.full((max(1, int(60.0 / self.h)), 5), np.nan)  # the last minute of ticks
        if log_path is not None:
            groups = run_groups(plant_model(cfg.plant.model).diagnostics, plant.nq, self.nact,
                                cfg.plant.drive)
            capacity = ring_capacity(self.h, cfg.telemetry.ring_rows)
            self.telemetry = Telemetry(log_path, groups, cfg.to_dict(), capacity=capacity,
                                       priority=self.helper_priority)
            self.telemetry.derive = Diagnostics(cfg, self.telemetry.columns)
            attach_scene(self.telemetry, cfg)           # the robot's 3D frames in the log
            self.cols = row_columns(self.telemetry.columns)
            self.row_loss = RowLoss(self.telemetry, cfg.telemetry.on_overrun, log)
        self._measure()
        self._warm_up()

    def _warm_up(self) -> None:
        """Load every kernel the tick calls (on copies), so the first tick pays nothing."""
        p = self.plant
        twin = PlantLink(p.copy(), self.h, self.link.method, self.link.correction)
        twin.open()
        twin.write(self.command)
        twin.read(Measurement(self.nact))
        currents(p.params, p.x, self.command, self.meas.current.copy())
        wait_until_ns(self.ts, 0, 0)
        self.pacer.warm_up()
        if self.telemetry is not None:
            ring, head = np.zeros_like(self.telemetry.ring[:2]), np.zeros(1, np.int64)
            fill_row(ring, head, self.cols, 0, 0.0, p.x, p.nq, self.command, self.meas.current,
                     self.meas.buffer)
            publish_row(ring, head, self.cols, np.zeros(5))

    # -- plant ------------------------------------------------------------------------
    def _measure(self) -> None:
        """Start and end the faults due now (plant.faults: each change an event, as in
        rt.realtime; link faults: devices.link_faults), then sample the plant, and corrupt
        the sample by the active sensor faults: what the controller gets, and the log's
        q_meas, qd_meas."""
        if not self.link_faults.idle:
            self._link_fault_changes()
        faulty = self.schedule[0, C_KIND] != 0.0
        if faulty:
            t = self.tick * self.h
            apply_schedule(self.plant.params, self.plant.jams, self.schedule, t, self.plant.x,
                           1e-9 * self.h)
            for event in report_changes(self.schedule, self.tick, t):
                self._event(event.pop("kind"), **event)
            hold_previous(self.schedule, self.meas.buffer, self.nact)
        self.link.read(self.meas)
        if faulty:
            sense(self.schedule, t, self.tick, self.meas.buffer, self.nact)

    def _step(self, timing: np.ndarray) -> None:
        """Advance one step under the held command (zero in the safe state), record the row."""
        if self.stopping:
            self._stop_step()
        elif self.safe:
            self.command[:] = 0.0
        else:   # toward the latest command, by at most max_slew * h
            np.subtract(self.command, self.slew_step, out=self.slew_bounds[0])
            np.add(self.command, self.slew_step, out=self.slew_bounds[1])
            np.clip(self.requested, self.slew_bounds[0], self.slew_bounds[1], out=self.command)
        tel = self.telemetry
        if tel is not None:
            if self.mode == "lockstep":      # no deadline: wait for the writer, lose no row
                tel.wait_for_room()
            seen = self.meas.buffer.copy()      # what the controller got: q_meas, qd_meas
            currents(self.plant.params, self.plant.x, self.command, self.meas.current,
                     self.plant.jams)
            fill_row(tel.ring, tel.head, self.cols, self.tick, self.tick * self.h,
                     self.plant.x, self.plant.nq, self.command, self.meas.current, seen)
        started = now_ns(self.ts)
        self.link.write(self.command)
        timing[3] = (now_ns(self.ts) - started) * 1e-9
        self.tick += 1
        self.plant.t = self.tick * self.h   # plant time is k h exactly, as in rt.realtime
        if tel is not None:
            publish_row(tel.ring, tel.head, self.cols, timing)
        self._measure()

    def _catch_up(self, steps: int, timing: np.ndarray) -> None:
        """Run ``steps`` missed ticks now, plant only: under the held command, no message
        read or sent. So the next full tick is late by less than a period however long the
        last one took (a flood of frames, a stall): lateness stays bounded, as a real
        drive's servo loop never waits on its bus, and plant time keeps up with the clock."""
        timing[1:4] = 0.0
        for _ in range(steps):
            wake = now_ns(self.ts)
            timing[0] = (wake - self.pacer.deadline(self.tick)) * 1e-9
            self._step(timing)
            timing[4] = (now_ns(self.ts) - wake) * 1e-9
            self.timings[(self.tick - 1) % len(self.timings)] = timing

    def _event(self, kind: str, **fields) -> None:
        if self.telemetry is not None:
            self.telemetry.event(kind, t=fields.pop("t", self.tick * self.h), **fields)

    # -- messages -----------------------------------------------------------------------
    def _send(self, peer: bytes, kind: MessageType, values, seq=None) -> None:
        try:
            self.socket.send_multipart([peer, encode(kind, self.tick if seq is None else seq,
                                                     self.tick * self.h, values)],
                                       flags=zmq.NOBLOCK)
        except zmq.Again:
            log.warning("peer %s not keeping up: dropped a %s", peer.hex(), kind.name)

    def _send_state(self) -> None:
        if self.controller is None:
            return
        if self.link_faults.active_count or self.delayed:
            self._send_faulty_state()
        else:
            self._send(self.controller, MessageType.STATE, self.meas.buffer)

    # -- link faults (devices.link_faults) -------------------------------------------------
    def inject(self, kind: str, params: dict, duration: float) -> None:
        """A link fault (``drop``, ``delay``, ``corrupt``) on the STATEs from the next tick
        on, for ``duration`` s (inf: permanent); the start is logged with its tick.
        Thread-safe; ConfigError (one line) for a kind or parameter this device lacks.
        Returns its window (devices.link_faults.Window)."""
        return self.link_faults.inject(kind, params, duration)

    def _link_fault_changes(self) -> None:
        """Start and end the link faults due now: one line and one event each."""
        t = self.tick * self.h
        for change, window in self.link_faults.update(t, self.tick):
            what = "started" if change == "start" else "ended"
            log.warning("link fault %s %s at tick %d (t = %.6f s)", window.describe(), what,
                        self.tick, t)
            self._event("link_fault" if change == "start" else "link_fault_clear",
                        fault=window.kind, joint=window.joint, tick=self.tick,
                        live=window.live, t2=window.t2, **window.params)

    def _send_faulty_state(self) -> None:
        """This tick's STATE through the active link faults: dropped, held back by
        ``delay`` s of plant time, or with its header corrupted; delayed STATEs whose
        time has come go first."""
        t = self.tick * self.h
        while self.delayed and self.delayed[0][0] <= t + 1e-9 * self.h:
            _, peer, frame = self.delayed.popleft()
            self._send_frame(peer, frame)
        faults = self.link_faults
        if faults.active("drop") is not None:
            return
        frame = encode(MessageType.STATE, self.tick, t, self.meas.buffer)
        if faults.active("corrupt") is not None:
            frame = corrupted(frame)
        late = faults.active("delay")
        if late is not None and late.params["delay"] > 0.0:
            self.delayed.append((t + late.params["delay"], self.controller, frame))
        elif self.delayed:                  # in order: behind the ones still held back
            self.delayed.append((t, self.controller, frame))
        else:
            self._send_frame(self.controller, frame)

    def _send_frame(self, peer: bytes, frame: bytes) -> None:
        try:
            self.socket.send_multipart([peer, frame], flags=zmq.NOBLOCK)
        except zmq.Again:
            log.warning("peer %s not keeping up: dropped a STATE", peer.hex())

    @property
    def rejected(self) -> int:
        """Frames rejected since the start."""
        return self.rejects.total

    def _reject(self, peer: bytes, reason: str, detail: str, code: int,
                answer: tuple | None = None) -> None:
        """Count a rejected frame; log and record only the first per reason and second,
        and answer ERROR (or ``answer``: (type, values)) while the window's reply budget
        lasts."""
        first, reply = self.rejects.note(reason)
        if first:
            text = f"{reason}: {detail}" if detail else reason
            log.warning("rejected a frame from peer %s: %s", peer.hex(), text)
            self._event("rejected", peer=peer.hex(), reason=text, count=1)
        if reply:
            self._send(peer, *(answer or (MessageType.ERROR, [code])))

    def _report_rejects(self, force: bool = False) -> None:
        """Once a second (and at the end): one line and one event for the rejects not
        logged one by one."""
        suppressed = self.rejects.close_window(time.monotonic_ns(), force)
        if suppressed:
            n = sum(suppressed.values())
            text = ", ".join(f"{reason} x{count}" for reason, count in suppressed.items())
            log.warning("rejected %d more frames in the last second: %s", n, text)
            self._event("rejected", reason=text, count=n, counts=suppressed)

    def _controller_connected(self) -> bool:
        """Whether the controller's connection is still open (disconnections come from the
        socket monitor; an unknown connection counts as open)."""
        while self.monitor.poll(0):
            try:
                event = zmq.utils.monitor.recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                break
            if event["value"] == self.controller_fd:
                self.controller_fd = None
        return self.controller is not None and self.controller_fd is not None

    def _hello(self, peer: bytes, kind: MessageType, n_axes: int, fd: int) -> None:
        """HELLO or TAKEOVER: ``peer`` becomes the controller unless another one is still
        connected (then only a TAKEOVER, which is logged)."""
        if n_axes not in (0, self.nact):   # 0: a client that asks the plant's size
            self._reject(peer, f"{kind.name} for the wrong number of axes",
                         f"{n_axes} axes, this plant has {self.nact}", ERROR_VALUE)
            return
        previous = self.controller
        if previous is not None and previous != peer and self._controller_connected():
            if kind == MessageType.HELLO:
                self._reject(peer, "HELLO while another controller is connected",
                             f"controller {previous.hex()}; a TAKEOVER replaces it", ERROR_BUSY)
                return
            log.warning("controller %s taken over by peer %s", previous.hex(), peer.hex())
            self._event("takeover", peer=peer.hex(), previous=previous.hex(), tick=self.tick)
        self.controller, self.controller_fd = peer, fd
        self.stopped_unpowered = False
        self._event("hello", peer=peer.hex(), tick=self.tick)
        self._send(peer, MessageType.WELCOME, [MODES[self.mode], self.nact, self.h,
                                               1.0 if self.voltage else 0.0])
        self._send_state()

    def _handle(self, parts: list) -> bool:
        """Handle one message (zmq.Frames); True if it was a COMMAND (lockstep: time to step)."""
        if len(parts) != 2:
            self._reject(parts[0].bytes, "several frames in one message",
                         f"{len(parts) - 1} frames, expected 1", 1)
            return False
        peer, frame = parts[0].bytes, parts[1]
        try:
            kind, seq, _, values = decode(frame.buffer, {
                MessageType.HELLO: 1, MessageType.TAKEOVER: 1, MessageType.COMMAND: self.nact,
                MessageType.FAULT: FAULT_VALUES, MessageType.BYE: 0, MessageType.STOP: 2})
        except WireError as exc:
            self._reject(peer, ERROR_TEXT[exc.code], exc.detail, exc.code)
            return False
        if kind in HELLO_KINDS:
            try:
                fd = frame.get(zmq.SRCFD)
            except zmq.ZMQError:
                fd = -1
            self._controller_connected()     # disconnections so far (a reused fd)
            self._hello(peer, kind, int(values[0]), fd)
            return False
        if kind == MessageType.FAULT:
            self._fault(peer, values)
            return False
        if peer != self.controller:
            self._reject(peer, f"{kind.name} from a peer that is not the controller", "",
                         ERROR_STATE)
            return False
        if kind == MessageType.BYE:
            self._go_safe("controller said BYE")
            self.controller = None
            return False
        if kind == MessageType.STOP:
            self._controlled_stop(peer, values)
            return False
        np.clip(values, -self.command_limit, self.command_limit, out=self.requested)
        self.last_command_ns = now_ns(self.ts)
        if self.safe and not self.stopped_unpowered:
            self.safe = False
            self._event("commanded", tick=self.tick)
            if self.link.braked.any():          # power back: the brakes let go
                self.link.release_brakes()
                self._event("brake_released", tick=self.tick)
        return True

    def _fault(self, peer: bytes, values: np.ndarray) -> None:
        """A FAULT frame (drivers.wire): a plant fault becomes a row of the fault table, a
        link fault (``drop``, ``delay``, ``corrupt``) a window of ``link_faults``, started
        at this tick boundary (as rt.realtime takes a live fault) and acknowledged with the
        tick; what this emulator cannot take is refused with a FAULT_ACK whose status is
        the reason (drivers.wire.FAULT_REFUSALS) and one line in its log."""
        kind, joint = int(values[0]), int(values[1])
        try:
            code, joint, duration, channel, given = decode_fault(values)
            name = NAMES.get(code)
            if name is None:
                raise _Refusal(REFUSED_KIND, f"unknown fault kind {code}")
            if KINDS[name].family == LINK:
                self._link_fault(name, joint, duration, given)
            else:
                self._plant_fault(name, joint, duration, channel, given)
        except _Refusal as exc:
            self._reject(peer, "fault refused", str(exc), exc.status,
                         (MessageType.FAULT_ACK, self._fault_ack(exc.status, kind, joint)))
            return
        except WireError as exc:
            self._reject(peer, "fault refused", str(exc), exc.code,
                         (MessageType.FAULT_ACK, self._fault_ack(exc.code, kind, joint)))
            return
        self._send(peer, MessageType.FAULT_ACK, self._fault_ack(0, kind, joint))

    def _plant_fault(self, name: str, joint: int, duration: float, channel: int,
                     given: list) -> None:
        """A jam, actuator or sensor fault: a row of the fault table from this tick; its
        event comes from the table (plant.faults.report_changes). _Refusal with the reason."""
        p = self.plant
        params = {k: v for k, v in zip(KINDS[name].params, given) if v is not None}
        spec = KINDS[name]
        if not 1 <= joint <= self.nact:
            raise _Refusal(REFUSED_JOINT, f"joint must be 1..{self.nact}, got {joint}")
        actuators = plant_model(self.cfg.plant.model).takes_actuator_faults()
        refusal = plant_refusal(name, p.jammable_joints > 0, actuators)
        if refusal is not None:
            raise _Refusal(REFUSED_CHAIN, refusal)
        if spec.motor and self.cfg.plant.drive == "torque":
            raise _Refusal(REFUSED_MOTOR,
                           f"{name} needs a motor model (plant.drive is torque)")
        try:
            row = live_row(name, joint, duration, params, CHANNEL_NAMES[channel], self.nact,
                           p.jammable_joints > 0, actuators, self.cfg.plant.drive)
        except ValueError as exc:
            raise _Refusal(REFUSED_PARAM, str(exc)) from None
        row[C_T1] = self.tick * self.h
        if add_row(self.schedule, row) < 0:
            raise _Refusal(REFUSED_FULL, f"no room for another live fault ({LIVE_ROWS} taken)")
        self._measure()          # started now (a jam of duration 0 zeroes the rate now)
        log.info("fault %s on joint %d at tick %d (t = %.6f s)", name, joint, self.tick,
                 self.tick * self.h)

    def _link_fault(self, name: str, joint: int, duration: float, given: list) -> None:
        """A link fault from ``hil fault``: a window of ``link_faults`` started now, so
        that its line and ``link_fault`` event carry this tick. The wire's parameters are
        the kind's in devices.link_faults.PARAMETERS order. _Refusal with the reason."""
        if name not in self.link_faults.kinds:
            raise _Refusal(REFUSED_KIND, f"{name}: the ZeroMQ plant server takes "
                                         f"{', '.join(self.link_faults.kinds)}")
        params = {k: v for k, v in zip(LINK_PARAMETERS[name], given) if v is not None}
        if joint != 0:
            raise _Refusal(REFUSED_JOINT, f"{name}: the ZeroMQ plant has one link for every "
                                          f"joint (joint 0), got joint {joint}")
        try:
            self.inject(name, params, duration)
        except ConfigError as exc:
            raise _Refusal(REFUSED_PARAM, str(exc)) from None
        self._link_fault_changes()

    def _fault_ack(self, status: int, kind: int, joint: int) -> list:
        """A FAULT_ACK's values (drivers.wire): with the joints a jam or actuator fault may
        name (0: this plant has none, a 3RRR; for a link kind 0: the one link) and the link
        kinds this device takes, so that the tool can say why a fault was refused."""
        joints = 0 if LINK_CODE0 <= kind < LINK_CODE0 + len(LINK_PARAMETERS) else \
            self.plant.jammable_joints          # a link fault: one link, joint 0
        return [status, self.tick, self.tick * self.h, kind, joint, joints,
                link_kinds_mask(self.link_faults.kinds)]

    def _stop_step(self) -> None:
        """One step of a controlled stop: the stop servo's input; category 1 at rest:
        power removed (zero input)."""
        servo = self.stop_servo
        if servo.done:
            servo.stop()
            self.stopping = False
            self.stopped_unpowered = True
            self._go_safe("category 1 stop: the joints at rest, power removed")
            self.command[:] = 0.0
        else:
            servo.command(self.command)

    def _controlled_stop(self, peer: bytes, values: np.ndarray) -> None:
        """STOP [category, stop time] from the controller: the drives bring the joints to
        rest (drivers.controlled_stop); COMMANDs then keep the session alive only."""
        category, stop_time = int(values[0]), float(values[1])
        if category not in (1, 2) or category != values[0] or not stop_time > 0.0:
            self._reject(peer, "STOP refused", f"category {values[0]:g}, stop time "
                         f"{values[1]:g} s: expected category 1 or 2 and a time > 0",
                         ERROR_VALUE)
            return
        self.stop_servo.start(category, stop_time)
        self.stopping = True
        log.warning("category %d stop from the controller at tick %d: to rest within %g s%s",
                    category, self.tick, stop_time, ", then held" if category == 2 else
                    ", then power removed")
        self._event("controlled_stop", category=category, stop_time=stop_time, tick=self.tick)

    def _go_safe(self, why: str) -> None:
        if self.stopping:                  # power removed: the stop servo too
            self.stop_servo.stop()
            self.stopping = False
        if not self.safe:
            self.safe = True
            log.warning("safe state (zero input): %s", why)
            self._event("safe_state", reason=why, tick=self.tick)
            braked = self.link.engage_brakes()      # power removed: the holding brakes
            if braked.any():
                joints = [int(j) + 1 for j in np.flatnonzero(braked)]
                log.warning("brakes engaged on joints %s at tick %d", joints, self.tick)
                self._event("brake", joints=joints, tick=self.tick)

    def _drain(self, timing=None, budget_ns: int | None = None,
               n_ticks: int | None = None) -> None:
        """Handle the waiting messages: up to MAX_MESSAGES_PER_TICK, for at most
        ``budget_ns`` (the rest waits for the next tick; ZeroMQ queues fairly per peer, so
        the controller's frames come through a flood of others').

        With ``timing`` (lockstep), each COMMAND steps the plant at once and is answered
        with the next STATE, so a BYE right behind it cannot pre-empt it; once the plant
        has run ``n_ticks`` steps (its duration) nothing more is read, however soon the
        controller's next COMMAND came.
        """
        end = None if budget_ns is None else time.monotonic_ns() + budget_ns
        for _ in range(MAX_MESSAGES_PER_TICK):
            if n_ticks is not None and self.tick >= n_ticks:
                break
            try:
                parts = self.socket.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            if self._handle(parts) and timing is not None:
                self._step(timing)
                self._send_state()
            if end is not None and time.monotonic_ns() > end:
                break

    # -- serving ----------------------------------------------------------------------------
    def serve(self, duration: float | None = None, stop=None) -> str:
        """Serve until ``duration`` s of plant time, ``stop()`` returns True, or Ctrl-C.

        Returns why it ended.
        """
        n_ticks = None if duration is None else int(round(duration / self.h))
        timing = np.zeros(5)
        pacer = self.pacer
        period = pacer.period
        timeout_ns = int(self.cfg.emulator.command_timeout * 1e9)
        budget_ns = int(DRAIN_BUDGET * period)
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        reason = "stopped"
        emu = self.cfg.emulator
        try:
            self.scheduling = apply_thread(emu.cpu, emu.fifo_priority)
            while self.controller is None and self.mode == "free":   # the clock starts at HELLO
                if stop is not None and stop():
                    return reason
                if poller.poll(10):
                    self._drain()
                self._report_rejects()
            pacer.start()
            while n_ticks is None or self.tick < n_ticks:
                if stop is not None and stop():
                    break
                if self.mode == "lockstep":
                    if poller.poll(50):
                        self._drain(timing, n_ticks=n_ticks)
                    self._report_rejects()
                    continue
                deadline, wake = pacer.wait(self.tick)
                timing[0] = (wake - deadline) * 1e-9
                self._drain(budget_ns=budget_ns)
                if self.tick % 64 == 0:        # keep the disconnection queue short
                    self._controller_connected()
                if not self.safe and now_ns(self.ts) - self.last_command_ns > timeout_ns:
                    self._go_safe(f"no command for {self.cfg.emulator.command_timeout} s "
                                  "(controller silent)")
                t_read = now_ns(self.ts)
                timing[1] = (t_read - wake) * 1e-9
                timing[2] = 0.0
                self._step(timing)
                self._send_state()
                done = now_ns(self.ts)
                timing[4] = (done - wake) * 1e-9
                self.timings[(self.tick - 1) % len(self.timings)] = timing
                missed, _ = pacer.overrun(self.tick, done)   # the plant catches up
                if missed:                     # this tick ended after the next deadline
                    self._event("overrun", tick=self.tick - 1, missed=int(missed),
                                lateness=(done - pacer.deadline(self.tick)) * 1e-9)
                    behind = int(missed) - 1 if n_ticks is None else \
                        min(int(missed) - 1, n_ticks - 1 - self.tick)
                    if behind > 0:
                        self._catch_up(behind, timing)
                self._report_rejects()
                if self.row_loss is not None and self.row_loss.check():
                    reason = "telemetry ring overrun"     # close() gives the count
                    break
            else:
                reason = "duration reached"
        except KeyboardInterrupt:
            reason = "interrupted"
        except LinkError as exc:    # an invalid plant state: a fault, not a normal end
            reason = str(exc)
            self.failed = True
            log.error("plant: %s", exc)
            self._event("plant_fault", reason=reason, tick=self.tick)
        finally:
            restore_thread()
        self._event("stop", reason=reason, tick=self.tick)
        return reason

    @property
    def overruns(self) -> int:
        """Ticks (free mode) that ended after the next tick's deadline."""
        return self.pacer.overruns

    def summary(self, reason: str) -> dict:
        """Timing of the last minute of ticks (free mode), overruns and rejects."""
        timings = self.timings[~np.isnan(self.timings[:, 0])]
        summary = summarize(timings, self.overruns, self.scheduling) if len(timings) \
            else {"scheduling": self.scheduling}
        summary.update(reason=reason, rejected=self.rejected, overruns=self.overruns,
                       ticks=self.tick)
        return summary

    def close(self, reason: str = "closed") -> dict:
        """Release the endpoint and finish the log; returns the summary (its ``reason``
        names the rows the log lost, if any: one error line too)."""
        self._report_rejects(force=True)
        self.socket.disable_monitor()
        self.monitor.close(0)
        endpoints.close(self.socket, self.endpoint)
        if self.row_loss is not None and self.telemetry.failure is None:
            lost = self.row_loss.settle(reason)
            if lost is not None:
                reason = lost
                log.error("%s", reason)
        summary = self.summary(reason)
        if self.telemetry is not None:
            if self.telemetry.lost_rows:
                summary["lost_rows"] = self.telemetry.lost_rows
            with ignored_signals():
                self.telemetry.close(summary)
        if self.owns_context:       # its sockets are closed: returns at once
            self.context.term()
        return summary
