"""Emulated RoboClaw-style controllers on a Unix socket or a pseudo-terminal, with the
plant behind them.

The emulator impersonates the controllers that ``link.serial`` describes (the
addresses and channels of ``axes``, the encoders' ``counts_per_rev``; gear
ratios from ``plant.motor``), so ``SerialLink`` runs against it unchanged. It
owns a PlantLink (the plant in its process) and serves its line with os.read/os.write
in a select loop, one of:
- a Unix-domain stream socket (``socket_url``, ``unix://PATH``: drivers.protocol_unix,
  its file 0600, a path that a live process serves refused), which the link opens with
  pyserial's ``serial_for_url``. One link at a time: a second connection is closed at
  once with one line (the connected link keeps its drives, as a bus keeps its one
  master), and so is a peer of another user; a link that disconnects is forgotten with
  its unanswered requests, and the next one may connect (as a pty's next opener).
  ``hil emulate`` serves this when link.serial.port is such a URL (rig_serial's default):
  a socket hands the bytes to the peer at once, where a pty's kernel worker of normal
  priority delays them on a busy host (docs/RIGPC.md, "A pty is not real-time");
- the master side of a pty, whose slave path (``port``) the link opens with pyserial,
  like /dev/ttyACM0 (third-party tools that open a device path, basicmicro's library).
Run it in a thread (``start`` / ``stop``) or in its own process (``serve``).

Plant stepping (``emulator.mode``):
- "free": the plant advances by sim.dt in real time (monotonic clock) with the
  duties last received; missed steps after a stall run back to back, and the
  clock is re-anchored when it falls more than RESYNC s behind.
- "lockstep": one step of sim.dt when a read request arrives after a duty
  command that itself followed a measurement read (encoders, speeds, currents,
  status), before the read is answered: once per tick of a link that reads,
  then writes. The set-up exchanges of the link's ``open`` do not step the
  plant, and a repeated duty command (after a lost ACK) only overwrites the
  duty. Deterministic: meant for tests.

Wire commands to plant inputs: motor voltage = duty / 32767 x battery voltage
(``emulator.serial.battery_voltage``). In speed mode (cmds 35..40) the channel's
velocity PID (``_VelocityLoop``, gains and QPPS by cmds 28/29, read by 55/56) sets the
duty every plant step. In position mode (cmds 65..67) the channel's position PID
(``_PositionLoop``, set by 61/62, read by 63/64) follows a move profile; DutyAccel
(52/53) ramps the duty. Besides the link's commands the device answers ReadVersion,
logic battery, GetEncoders, GetSpeeds, GetISpeeds, ReadISpeedM1/M2 (all the plant's
rate), ReadTemp (constant), GetTimeout, ResetEncoders and SetEncM1/M2 (an offset on the
count), ReadBuffers, ReadPWMs and GetStatus. Plant state to what a drive reports,
sampled after every step (and at start):
- encoder count round(r q cpr / 2 pi + noise), sent as uint32 (mod 2^32);
- speed round(r qd cpr / 2 pi + noise), counts/s: the plant's motor rate
  rounded to whole counts/s (the RoboClaw's own speed filter is not documented);
- current round(100 (i + noise)), 10 mA units; main battery in 0.1 V;
- status word: injected error bits, plus the over-current warning of a channel
  whose |current| exceeds its limit (power-up DEFAULT_MAX_CURRENT, or as set by
  cmds 133/134). The emulator flags over-current but does not regulate it.
Noise is Gaussian (``emulator.serial.*_noise``), seeded by ``emulator.serial.seed``.

Device behaviour, as the manual describes it (docs/PROTOCOLS.md §5): a write with a
bad CRC is dropped without reply; a partial packet is discarded after
PACKET_GAP of silence; bytes for unmapped addresses get no reply; an unknown command
(its length unknown) gets no reply, as on a RoboClaw (there is no NACK), and makes the
device drop all input until PACKET_GAP of silence, so its data is never taken for
requests; with a serial timeout set (cmd 14) a controller zeroes its duties when no
valid packet reached it for that long (free mode; in lockstep the plant only
moves on commands). Every request is executed and answered
``emulator.serial.latency`` s after its last byte arrived.

Faults and set-ups for tests, thread-safe, applied before the next request is
handled: ``jam`` (in the plant, behind the drive), ``set_state``, ``drop_replies``,
``delay_replies``, ``corrupt_replies``
(bad CRC; a corrupted ACK is 0x00), ``truncate_replies``, ``set_errors`` (status
word bits). Scheduled jams of ``faults.jam`` start at their t1 (plant time).

Link faults (devices.link_faults; ``[[faults.KIND]]`` in the config, ``inject`` live),
on the controller of a table's ``joint`` (0: every controller), over plant time:
``drop`` (the request is executed, its reply lost), ``delay`` (the request is
executed and answered ``delay`` s later), ``corrupt`` (a data byte of the reply
flipped, so its CRC fails; an ACK becomes 0x00), ``crc_error`` (the reply's CRC
wrong), ``stall`` (the line is dead: requests reach nothing and get no reply, so a
drive-side serial timeout stops the motors). Each start and end is one line and an
event in the plant log.
``emulator.command_timeout`` belongs to the ZeroMQ emulator and is not used here.
"""
from __future__ import annotations

import errno
import logging
import math
import os
import queue
import select
import socket
import threading
import tty
from collections import deque
from time import monotonic

import numpy as np
from hilrig.devices.fault_server import FaultServer
from hilrig.devices.link_faults import LinkFaults
from hilrig.devices.plant_log import PlantLog
from hilrig.drivers import protocol_unix
from hilrig.drivers import roboclaw_codec as rc
from hilrig.drivers.endpoint import remove_socket_file
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import Measurement
from hilrig.errors import ConfigError
from hilrig.plant import stepping
from hilrig.plant.factory import fault_schedule, initial_plant, motor_params
from hilrig.plant.model import METHODS
from hilrig.schema import Config
from hilrig.telemetry.recorder import TelemetryError
from hilrig.timing.sched import apply_thread, restore_thread

log = logging.getLogger("hil.emulator.serial")

PACKET_GAP = 0.010          # silence that discards a partial packet, s
POLL = 0.02                 # longest select wait, so a stop request is seen, s
RESYNC = 0.1                # free mode: further behind than this re-anchors the clock, s
DEFAULT_MAX_CURRENT = 30.0  # power-up current limit per channel, A
MEASUREMENT_READS = (16, 17, 18, 19, 30, 31, 49, 73, 78, 79, 90, 108)
SPEED_COMMANDS = (35, 36, 37, 38, 39, 40)
POSITION_COMMANDS = (65, 66, 67)
LOGIC_BATTERY = 5.0         # V, the logic supply the emulated board reports
TEMPERATURE = 25.0          # degC, the board temperature it reports (no thermal model)
DEFAULT_QPPS = 44000        # counts/s, velocity PID of a channel that drives no joint
DEFAULT_VELOCITY_PID = (8.0, 40.0, 0.0)  # P, I, D of the emulated velocity loop
# Power-up position PID: P, I, D, MaxI (duty), deadzone (counts), MinPos, MaxPos (counts;
# equal: no limits). A RoboClaw ships with zeros (no position control until tuned); these
# hold an arm joint of the rig configs (P 20 duty/count is ~480 N m/rad at rig_serial's
# joint 1), so a position command does something out of the box.
DEFAULT_POSITION_PID = (20.0, 0.5, 4.0, 4000, 5, 0, 0)


class _VelocityLoop:
    """The velocity PID of one channel (cmds 28/29, 35..40, 55/56).

    Every plant step in speed mode: the set-point approaches the commanded speed at the
    commanded acceleration (at once for cmds 35..37), e = set-point - measured speed
    (counts/s), and duty = 32767 set-point / QPPS + P e + I integral(e dt) + D de/dt,
    clamped to +-32767; the integral stops growing while the duty saturates. Gains are
    in duty per count/s (P), per count (I) and per count/s^2 (D); on the wire they are
    16.16 fixed point, as on the device.
    """

    def __init__(self, qpps: int):
        self.p, self.i, self.d = DEFAULT_VELOCITY_PID
        self.qpps = int(qpps)
        self.active = False                       # speed mode (else duty mode)
        self.target = self.setpoint = 0.0         # counts/s
        self.accel = 0.0                          # counts/s^2, 0: step at once
        self.integral = 0.0
        self.error = 0.0

    def command(self, speed: int, accel: int = 0) -> None:
        if not self.active:
            self.active, self.integral, self.error = True, 0.0, 0.0
        self.target, self.accel = float(speed), float(accel)
        if not accel:
            self.setpoint = self.target

    def duty(self, measured: float, dt: float) -> int:
        if self.accel:
            step = self.accel * dt
            self.setpoint += max(-step, min(step, self.target - self.setpoint))
        error = self.setpoint - measured
        derivative = (error - self.error) / dt
        self.error = error
        feed = rc.DUTY_FULL * self.setpoint / self.qpps if self.qpps else 0.0
        duty = feed + self.p * error + self.i * (self.integral + error * dt) + self.d * derivative
        if abs(duty) < rc.DUTY_FULL:
            self.integral += error * dt           # anti-windup: hold it while saturated
        return int(round(max(-rc.DUTY_FULL, min(rc.DUTY_FULL, duty))))


class _PositionLoop:
    """The position mode of one channel (cmds 61..67): a move profile and the position PID.

    A command (accel, speed, deccel, position) starts a trapezoidal profile from the
    current set-point: the set-point speed v (counts/s) grows at ``accel`` up to
    ``speed`` and is capped by the speed from which ``deccel`` stops at the target,
    sqrt(2 deccel |target - set-point|) (0 for accel or deccel: no ramp); it ends on
    the target (speed 0: where the set-point stands). Every plant step: e = set-point -
    encoder count (counts) and duty = 32767 v / QPPS (the velocity loop's QPPS:
    feed-forward) + P e + I integral(e dt) + D (v - measured speed), clamped to
    +-32767, the integral term clamped to +-MaxI (duty; 0: no integral). The derivative
    is the error's rate taken from the speeds, so a one-count step of the encoder does
    not kick the duty. Once the profile has ended, an error within the deadzone counts
    as zero (the integral holds). Targets are clamped to MinPos..MaxPos when MinPos <
    MaxPos. Gains: duty per count (P), per count s (I), per count/s (D); 22.10 fixed
    point on the wire. A command sent with buffer = 0 waits until the one in progress
    has ended (at most BUFFER_SIZE wait); buffer = 1 replaces it and empties the queue.
    """

    def __init__(self):
        (self.p, self.i, self.d, self.max_i, self.deadzone, self.min_pos,
         self.max_pos) = DEFAULT_POSITION_PID
        self.active = False                       # position mode
        self.moving = False                       # a profile is in progress
        self.queue: deque = deque()               # buffered (accel, speed, deccel, target)
        self.move = (0, 0, 0, 0)                  # the profile in progress
        self.setpoint = self.speed = 0.0          # counts, counts/s (signed)
        self.integral = 0.0

    def command(self, move: tuple, at_once: bool, count: int) -> None:
        """Start ``move`` (accel, speed, deccel, position) now, or after the queue."""
        if not self.active:
            self.active, self.moving = True, False
            self.queue.clear()
            self.setpoint, self.speed, self.integral = float(count), 0.0, 0.0
        if at_once:
            self.queue.clear()
        elif self.moving or self.queue:
            if len(self.queue) < rc.BUFFER_SIZE:
                self.queue.append(move)
            return
        self._start(move)

    def _start(self, move: tuple) -> None:
        accel, speed, deccel, target = move
        if self.min_pos < self.max_pos:
            target = max(self.min_pos, min(self.max_pos, target))
        self.move, self.moving = (accel, speed, deccel, target), True

    def buffered(self) -> int:
        """ReadBuffers' value: commands waiting, 0 while the last one runs, 0x80 idle."""
        return len(self.queue) if self.active and (self.moving or self.queue) \
            else rc.BUFFER_IDLE

    def duty(self, count: int, speed: int, qpps: int, dt: float) -> int:
        """The duty for one plant step of ``dt`` s at encoder ``count`` and ``speed``."""
        if self.moving:
            self._advance(dt)
        error = self.setpoint - count
        if not self.moving and abs(error) <= self.deadzone:
            error = 0.0
        derivative = self.speed - speed
        if self.max_i:
            limit = self.max_i / self.i if self.i else 0.0
            self.integral = max(-limit, min(limit, self.integral + error * dt))
        feed = rc.DUTY_FULL * self.speed / qpps if qpps else 0.0
        duty = feed + self.p * error + self.i * self.integral + self.d * derivative
        return int(round(max(-rc.DUTY_FULL, min(rc.DUTY_FULL, duty))))

    def _advance(self, dt: float) -> None:
        """One step of the profile; the next buffered move once it has ended."""
        accel, top, deccel, target = self.move
        remaining = target - self.setpoint
        direction = 1.0 if remaining >= 0 else -1.0
        toward = direction * self.speed               # speed toward the target
        toward = min(toward + accel * dt, top) if accel else float(top)
        if deccel:
            toward = min(toward, math.sqrt(2.0 * deccel * abs(remaining)))
        if toward * dt >= abs(remaining) or top == 0:
            self.setpoint = self.setpoint if top == 0 else float(target)
            self.speed, self.moving = 0.0, False
            if self.queue:
                self._start(self.queue.popleft())
            return
        self.speed = direction * max(toward, 0.0)
        self.setpoint += self.speed * dt


class _Controller:
    """The state of one emulated controller (one address)."""

    def __init__(self, qpps=(DEFAULT_QPPS, DEFAULT_QPPS)):
        self.duty = [0, 0]                        # M1, M2, +-32767
        self.velocity = [_VelocityLoop(q) for q in qpps]
        self.position = [_PositionLoop(), _PositionLoop()]
        self.ramp: list[tuple[int, int] | None] = [None, None]   # DutyAccel: (duty, duty/s)
        self.max_current = [DEFAULT_MAX_CURRENT] * 2   # A
        self.serial_timeout = 0.0                 # s, 0 = off
        self.last_packet = monotonic()
        self.errors = 0                           # injected status bits
        self.warnings = 0                         # over-current warning bits

    def stop_motors(self) -> None:
        """Duty 0 on both channels, speed and position modes off (serial timeout)."""
        self.duty = [0, 0]
        for channel in (1, 2):
            self.select(channel, None)

    def select(self, channel: int, mode) -> None:
        """Leave every mode of ``channel`` (1, 2) but ``mode`` (a loop, "ramp" or None)."""
        k = channel - 1
        for loop in (self.velocity[k], self.position[k]):
            if loop is not mode:
                loop.active = False
        if mode != "ramp":
            self.ramp[k] = None


class RoboClawEmulator:
    """Emulated packet-serial controllers over the plant of ``cfg``.

    Args:
        cfg: resolved config (settings.config); uses sim, plant, link.serial,
            emulator.mode, emulator.serial and faults.jam.
        master_fd: serve this pty master; by default a new pty is opened (raw mode)
            and its slave kept open while the emulator lives.
        log_path: telemetry of the plant (devices.plant_log), one row per plant step;
            closed by ``close``.
        socket_url: serve this ``unix://PATH`` instead of a pty (drivers.protocol_unix;
            ConfigError when it is taken or cannot be bound).

    Attributes:
        port: slave path for the link, or ``socket_url`` (None when ``master_fd`` was
            given).
        plant: the PlantLink behind the drives (touch it only from the
            emulator's thread, or when the emulator is stopped).
        stats: counters: requests, replies, bad_frames, discarded, ignored, unknown, steps,
            resyncs, stalled (requests lost to a ``stall``), dropped (replies lost to a
            ``drop``); on a socket: connections (links accepted), refused (second links,
            strangers), unsent (replies whose link had gone, or with no room).
        error: the exception that ended the thread, if any.
    """

    def __init__(self, cfg: Config, master_fd: int | None = None, log_path=None,
                 socket_url: str | None = None):
        sim, serial_cfg, emu = cfg.sim, cfg.link.serial, cfg.emulator.serial
        if cfg.plant.drive == "torque":
            raise ConfigError("the emulated RoboClaw drives DC motors: plant.drive must be "
                              "'voltage' or 'voltage_full'")
        if sim.integrator not in METHODS:
            raise ConfigError(f"sim.integrator {sim.integrator!r} is offline only; the "
                              f"emulated drives step with one of {sorted(METHODS)}")
        self.dt = sim.dt
        self.lockstep = cfg.emulator.mode == "lockstep"
        self.battery = emu.battery_voltage
        self.latency = emu.latency
        self.noise = (emu.position_noise, emu.speed_noise, emu.current_noise)
        self.rng = np.random.default_rng(emu.seed)
        self.axes = [tuple(pair) for pair in serial_cfg.axes]
        self._joint_of = {axis: j for j, axis in enumerate(self.axes)}
        gear = np.asarray(cfg.plant.motor.gear_ratio, dtype=float)
        self.counts_per_rad = np.asarray(serial_cfg.counts_per_rev) * gear / (2.0 * np.pi)
        motors = motor_params(cfg)                # QPPS: no-load speed at the battery voltage
        qpps = {axis: int(round(self.battery / motors.back_emf_constant[j]
                                * self.counts_per_rad[j] / gear[j]))
                for j, axis in enumerate(self.axes)}
        self.controllers = {address: _Controller((qpps.get((address, 1), DEFAULT_QPPS),
                                                  qpps.get((address, 2), DEFAULT_QPPS)))
                            for address, _ in self.axes}
        self.plant = self._plant(cfg)
        self._warm_up(cfg)
        self.schedule = fault_schedule(cfg)
        n = len(self.axes)
        self._meas = Measurement(n)
        self._volts = np.zeros(n)
        self._enc, self._speed, self._amps = [0] * n, [0] * n, [0] * n
        self._enc_offset = [0] * n                # set by cmds 20, 22, 23
        self._sample()
        self._measured = False                    # lockstep: a measurement was read ...
        self._commanded = False                   # ... and a duty followed it
        self._buf = bytearray()
        self._last_byte = 0.0
        self._resync = False                      # an unknown command: skip to a silence
        self._pending: deque = deque()            # (due, address, command, values)
        self._faults = {"drop": 0, "corrupt": 0, "truncate": 0, "delay": (0, 0.0)}
        self.link_faults = LinkFaults(cfg, "serial", n)   # [[faults.KIND]] and inject
        self._address_joints = {address: tuple(j + 1 for j, (a, _) in enumerate(self.axes)
                                               if a == address) for address in self.controllers}
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.stats = dict.fromkeys(("requests", "replies", "bad_frames", "discarded", "ignored",
                                    "unknown", "steps", "resyncs", "stalled", "dropped",
                                    "connections", "refused", "unsent"), 0)
        self.last_bad_frame = ""
        self.error: BaseException | None = None
        self._slave = -1
        self.port = None
        self._listener: socket.socket | None = None   # socket_url's listening socket
        self._socket_file = None                      # its file (endpoint.socket_file)
        self._owns_master = master_fd is None
        if socket_url is not None:
            self._listener, self._socket_file = protocol_unix.listen(socket_url)
            self.port = socket_url
            master_fd = -1                        # the connected link's socket, once one is
        elif master_fd is None:
            master_fd, self._slave = os.openpty()
            tty.setraw(self._slave)
            self.port = os.ttyname(self._slave)
        self._master = master_fd
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.plant_log = PlantLog(cfg, log_path, self.plant, wait=self.lockstep) \
            if log_path else None
        self.log_loss: str | None = None   # after close: the rows the log lost, named
        self._link_fault_changes()                 # those from t = 0

    @staticmethod
    def _plant(cfg: Config) -> PlantLink:
        plant, correction = initial_plant(cfg)
        link = PlantLink(plant, cfg.sim.dt, METHODS[cfg.sim.integrator], correction)
        link.open()                               # the duties decide the input
        return link

    def _warm_up(self, cfg: Config) -> None:
        """Compile (or load from the numba cache) the step, current and jam kernels on a copy."""
        spare = self._plant(cfg)
        spare.read(Measurement(spare.n_axes))
        spare.write(np.zeros(spare.n_axes))
        p = spare.plant
        stepping.apply_schedule(p.params, p.jams, fault_schedule(cfg), p.t, p.x, 0.0)

    # -- running ------------------------------------------------------------------

    def start(self) -> "RoboClawEmulator":
        """Serve in a daemon thread until ``stop``."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run_catching, name="roboclaw-emulator",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (within POLL s) and close the pty or the socket. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.close()

    def close(self, reason: str = "stopped") -> None:
        """Close the pty if the emulator opened it (or the socket, its connected link's
        and its file), and the plant log. Idempotent."""
        if self.plant_log is not None:
            self.log_loss = self.plant_log.close(reason)
            self.plant_log = None
        for fd in (self._master if self._owns_master else -1, self._slave):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._master = self._slave = -1
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            remove_socket_file(self._socket_file)

    def __enter__(self) -> "RoboClawEmulator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run_catching(self) -> None:
        try:
            self.run(self._stop)
        except BaseException as exc:  # noqa: BLE001 - kept for the owner to inspect
            self.error = exc

    def run(self, stop_event, duration: float | None = None) -> str:
        """Serve until ``stop_event`` (threading or multiprocessing Event) is set, or for
        ``duration`` s of wall-clock time; returns "stopped" or "duration reached".

        Raises RuntimeError when the pty has no slave end open any more, and
        drivers.link.LinkError when the plant state becomes invalid.
        """
        listener = -1 if self._listener is None else self._listener.fileno()
        self._next_step = monotonic() + self.dt
        end = math.inf if duration is None else monotonic() + duration
        while not stop_event.is_set():
            now = monotonic()
            if now >= end:
                return "duration reached"
            if self.plant_log is not None and self.plant_log.lost():
                return "telemetry ring overrun"          # the log names the count
            wait = POLL
            if not self.lockstep:
                wait = min(wait, self._next_step - now)
            if self._pending:
                wait = min(wait, self._pending[0][0] - now)
            if self._buf:
                wait = min(wait, self._last_byte + PACKET_GAP - now)
            watch = [fd for fd in (self._master, listener) if fd >= 0]
            ready, _, _ = select.select(watch, (), (), max(wait, 0.0))
            now = monotonic()
            self._expire_partial(now)
            data = self._take() if self._master in ready else b""
            if listener in ready:                 # after a hang-up seen in the same wake
                self._accept()
            if data:
                if self._resync and now - self._last_byte <= PACKET_GAP:
                    self.stats["discarded"] += 1          # the rest of an unknown command
                else:
                    self._resync = False
                    self._buf += data
                self._last_byte = now
            self._drain_inbox()
            self._parse(now)
            while self._pending and self._pending[0][0] <= now:
                _, address, command, values = self._pending.popleft()
                self._execute(address, command, values)
            if not self.lockstep:
                self._keep_time(now)
        return "stopped"

    def _take(self) -> bytes:
        """What the link sent (the line is ready to read); b"" when its socket closed (the
        link is then forgotten: ``_hang_up``)."""
        try:
            data = os.read(self._master, 4096)
        except OSError as exc:
            if self._listener is None:
                if exc.errno == errno.EIO:
                    raise RuntimeError("pty: no process has the slave end open") from None
                raise
            data = b""                            # ECONNRESET: the link is gone
        if not data and self._listener is not None:
            self._hang_up("disconnected")
        return data

    def _accept(self) -> None:
        """A link connecting to the socket: it becomes the line, unless one is connected
        already or it is another user's (then closed at once, with one line)."""
        try:
            conn, _ = self._listener.accept()
        except BlockingIOError:
            return                                # it gave up before we got to it
        uid = protocol_unix.peer_uid(conn)
        if self._master >= 0 or uid != os.getuid():
            conn.close()
            self.stats["refused"] += 1
            log.warning("refused a link on %s: %s", self.port,
                        "the drives serve one link at a time, and the connected one keeps "
                        "them" if self._master >= 0 else f"another user's (uid {uid})")
            return
        conn.setblocking(False)
        self._master = conn.detach()
        self.stats["connections"] += 1
        log.info("a link connected on %s", self.port)

    def _hang_up(self, why: str) -> None:
        """Forget the link of the socket: its connection, its partial request and the
        replies it has not had; the next link may connect."""
        os.close(self._master)
        self._master = -1
        self._buf.clear()
        self._resync = False
        self.stats["unsent"] += len(self._pending)
        self._pending.clear()
        log.info("the link on %s %s; waiting for the next", self.port, why)

    def _keep_time(self, now: float) -> None:
        while now >= self._next_step:
            for controller in self.controllers.values():
                if controller.serial_timeout and \
                        now - controller.last_packet > controller.serial_timeout:
                    controller.stop_motors()
            self._step()
            self._next_step += self.dt
            if now - self._next_step > RESYNC:
                self._next_step = now + self.dt
                self.stats["resyncs"] += 1

    # -- fault injection (any thread) ---------------------------------------------

    def jam(self, joint: int, duration: float) -> None:
        """Jam ``joint`` (1-based) in the plant now, decelerating over ``duration`` s."""
        self._inbox.put(lambda: self.plant.plant.start_jam(joint, duration))

    def set_state(self, q, qd=None) -> None:
        """Put the plant at joint angles q (rad) and rates qd (rad/s) and resample the sensors."""
        def move():
            self.plant.plant.set_state(q, qd, t=self.plant.plant.t)
            self._sample()
        self._inbox.put(move)

    def drop_replies(self, count: int) -> None:
        """Ignore the next ``count`` requests entirely (no reply, no effect)."""
        self._inbox.put(lambda: self._faults.__setitem__("drop", count))

    def corrupt_replies(self, count: int) -> None:
        """Send the next ``count`` replies with a wrong CRC (an ACK becomes 0x00)."""
        self._inbox.put(lambda: self._faults.__setitem__("corrupt", count))

    def truncate_replies(self, count: int) -> None:
        """Send only the first half of the next ``count`` replies (an ACK: nothing)."""
        self._inbox.put(lambda: self._faults.__setitem__("truncate", count))

    def delay_replies(self, count: int, delay: float) -> None:
        """Answer the next ``count`` requests ``delay`` s late (those after them wait their
        turn, as on the device: replies go out in order)."""
        self._inbox.put(lambda: self._faults.__setitem__("delay", (count, delay)))

    def set_errors(self, address: int, bits: int) -> None:
        """Set the injected bits of ``address``'s status word (0 clears them)."""
        self._inbox.put(lambda: setattr(self.controllers[address], "errors", bits))

    def _drain_inbox(self) -> None:
        while True:
            try:
                action = self._inbox.get_nowait()
            except queue.Empty:
                return
            action()

    # -- the wire -----------------------------------------------------------------

    def _expire_partial(self, now: float) -> None:
        if self._buf and now - self._last_byte > PACKET_GAP:
            self._buf.clear()
            self.stats["discarded"] += 1

    def _parse(self, now: float) -> None:
        buf = self._buf
        while buf:
            if buf[0] not in self.controllers:
                del buf[0]
                self.stats["ignored"] += 1
                continue
            if len(buf) < 2:
                return
            command = rc.COMMANDS.get(buf[1])
            if command is None:     # its length is unknown: drop all until a silence
                buf.clear()
                self._resync = True
                self.stats["unknown"] += 1
                return
            if len(buf) < command.request_length:
                return
            frame = bytes(buf[:command.request_length])
            del buf[:command.request_length]
            try:
                address, command, values = rc.decode_request(frame)
            except rc.FrameError as exc:
                self.stats["bad_frames"] += 1
                self.last_bad_frame = str(exc)
                continue
            late = self.link_faults.active("delay", self._address_joints[address])
            delay = self.latency + (late.params["delay"] if late is not None else 0.0)
            count, extra = self._faults["delay"]
            if count:
                self._faults["delay"] = (count - 1, extra)
                delay += extra
            self._pending.append((now + delay, address, command, values))

    def _execute(self, address: int, command: rc.Command, values: tuple) -> None:
        faults = self._faults
        if faults["drop"]:
            faults["drop"] -= 1
            return
        link_faults, joints = self.link_faults, self._address_joints[address]
        if link_faults.active_count and link_faults.on("stall", joints):
            self.stats["stalled"] += 1            # the line is dead: nothing arrives
            return
        self.stats["requests"] += 1
        controller = self.controllers[address]
        controller.last_packet = monotonic()
        if self.lockstep and command.is_read:
            if self._commanded:
                self._measured = self._commanded = False
                self._step()
            self._measured = self._measured or command.code in MEASUREMENT_READS
        reply = rc.encode_reply(address, command, *self._answer(address, controller, command,
                                                                values))
        if faults["corrupt"]:
            faults["corrupt"] -= 1
            reply = _bad_crc(reply, command)
        elif faults["truncate"]:
            faults["truncate"] -= 1
            reply = reply[:len(reply) // 2]
        elif link_faults.active_count:
            reply = self._faulty_reply(reply, command, joints)
        if reply:
            self._send(reply)

    def _send(self, reply: bytes) -> None:
        """Write ``reply`` to the line. On the socket a reply whose link has gone, or
        that finds no room (a link that stopped reading), is counted in ``unsent``; a
        pty blocks until it takes it."""
        if self._listener is None:
            os.write(self._master, reply)
            self.stats["replies"] += 1
            return
        sent = 0
        if self._master >= 0:
            try:
                sent = os.write(self._master, reply)
            except BlockingIOError:
                pass
            except OSError:                       # EPIPE, ECONNRESET: the link is gone
                self._hang_up("is gone")
        self.stats["replies" if sent == len(reply) else "unsent"] += 1

    def _faulty_reply(self, reply: bytes, command: rc.Command, joints: tuple) -> bytes:
        """``reply`` through the active link faults: dropped (b""), its CRC bytes wrong
        (``crc_error``), or a data byte flipped (``corrupt``: the CRC no longer checks)."""
        faults = self.link_faults
        if faults.active("drop", joints) is not None:
            self.stats["dropped"] += 1
            return b""
        if faults.active("crc_error", joints) is not None:
            return _bad_crc(reply, command)
        if faults.active("corrupt", joints) is not None:
            return bytes((reply[0] ^ 0xFF,)) + reply[1:]
        return reply

    # -- link faults (devices.link_faults) ----------------------------------------

    def inject(self, kind: str, params: dict, duration: float, joint: int = 0) -> None:
        """A link fault (``drop``, ``delay``, ``corrupt``, ``crc_error``, ``stall``) on
        the controller of ``joint`` (1-based; 0: every controller) from the next plant step
        on, for ``duration`` s (inf: permanent); thread-safe. ConfigError (one line) for a
        kind or parameter this device lacks. Returns its window
        (devices.link_faults.Window)."""
        return self.link_faults.inject(kind, params, duration, joint)

    def _link_fault_changes(self) -> None:
        """Start and end the link faults due at the plant's time: one line and one event
        (in the plant log) each."""
        t = self.plant.plant.t
        for change, window in self.link_faults.update(t, self.stats["steps"]):
            what = "started" if change == "start" else "ended"
            log.warning("link fault %s %s at step %d (t = %.6f s)", window.describe(), what,
                        self.stats["steps"], t)
            if self.plant_log is not None:
                self.plant_log.event("link_fault" if change == "start" else "link_fault_clear",
                                     t=t, fault=window.kind, joint=window.joint,
                                     tick=self.stats["steps"], live=window.live, t2=window.t2,
                                     **window.params)

    def _answer(self, address: int, controller: _Controller, command: rc.Command,
                values: tuple) -> tuple:
        """Apply a request to the device and return the reply's values."""
        code = command.code
        joint = self._joint_of.get
        if code in (16, 17):
            j = joint((address, code - 15))
            count = 0 if j is None else self._enc[j]
            backwards = j is not None and self._speed[j] < 0
            return count & 0xFFFFFFFF, 2 if backwards else 0
        if code in (18, 19, 30, 31):                          # 30, 31: the same rate
            j = joint((address, (code - 17) if code < 30 else (code - 29)))
            speed = 0 if j is None else self._speed[j]
            return speed, 1 if speed < 0 else 0
        if code == 49:
            return tuple(0 if j is None else self._amps[j]
                         for j in (joint((address, 1)), joint((address, 2))))
        if code == 90:
            return (controller.errors | controller.warnings,)
        if code == 24:
            return (round(10.0 * self.battery),)
        if code == 25:
            return (round(10.0 * LOGIC_BATTERY),)
        if code == 82:
            return (round(10.0 * TEMPERATURE),)
        if code == 21:
            return (rc.VERSION_TEXT,)
        if code == 15:
            return (round(10.0 * controller.serial_timeout),)
        both = (joint((address, 1)), joint((address, 2)))
        if code == 78:
            return tuple(0 if j is None else self._enc[j] & 0xFFFFFFFF for j in both)
        if code in (79, 108):
            return tuple(0 if j is None else self._speed[j] for j in both)
        if code in (55, 56):
            loop = controller.velocity[code - 55]
            return (*(round(g * rc.PID_SCALE) & 0xFFFFFFFF for g in (loop.p, loop.i, loop.d)),
                    loop.qpps)
        if code in (63, 64):
            pos = controller.position[code - 63]
            return (*(round(g * rc.POSITION_PID_SCALE) & 0xFFFFFFFF
                      for g in (pos.p, pos.i, pos.d)),
                    pos.max_i, pos.deadzone, pos.min_pos, pos.max_pos)
        if code == 47:
            return tuple(pos.buffered() for pos in controller.position)
        if code == 48:
            return tuple(controller.duty)
        if code == 73:
            return self._status(controller, both)
        if code == 14:
            controller.serial_timeout = 0.1 * values[0]
        elif code in (133, 134):
            controller.max_current[code - 133] = 0.01 * values[0]
        elif code == 20:
            for j in both:
                if j is not None:
                    self._set_encoder(j, 0)
        elif code in (22, 23):
            j = joint((address, code - 21))
            if j is not None:
                self._set_encoder(j, values[0] - (1 << 32) if values[0] >= 1 << 31 else values[0])
        elif code in (28, 29):
            loop = controller.velocity[code - 28]
            d, p, i, loop.qpps = values
            loop.p, loop.i, loop.d = (_signed(g) / rc.PID_SCALE for g in (p, i, d))
        elif code in (61, 62):
            pos = controller.position[code - 61]
            d, p, i, pos.max_i, pos.deadzone, pos.min_pos, pos.max_pos = values
            pos.p, pos.i, pos.d = (_signed(g) / rc.POSITION_PID_SCALE for g in (p, i, d))
        elif code in SPEED_COMMANDS:
            accel, speeds = (values[0], values[1:]) if code >= 38 else (0, values)
            channels = (1, 2) if code in (37, 40) else ((code - 34) if code < 38 else (code - 37),)
            for channel, speed in zip(channels, speeds):
                loop, j = controller.velocity[channel - 1], both[channel - 1]
                if not loop.active and j is not None:    # into speed mode: a ramp starts
                    loop.setpoint = float(self._speed[j])   # at the motor's speed
                controller.select(channel, loop)
                loop.command(speed, accel)
            self._commanded = self._commanded or self._measured
        elif code in POSITION_COMMANDS:
            moves = (values[0:4], values[4:8]) if code == 67 else (values[0:4],)
            channels = (1, 2) if code == 67 else (code - 64,)
            for channel, move, j in zip(channels, moves, (both[c - 1] for c in channels)):
                pos = controller.position[channel - 1]
                controller.select(channel, pos)
                pos.command(move, values[-1] == 1, 0 if j is None else self._enc[j])
            self._commanded = self._commanded or self._measured
        elif code in (52, 53):
            controller.select(code - 51, "ramp")
            controller.ramp[code - 52] = values               # (duty, accel in duty/s)
            self._commanded = self._commanded or self._measured
        else:                                                 # 32, 33, 34: duty
            channels = (1, 2) if code == 34 else (code - 31,)
            for channel, duty in zip(channels, values):
                controller.duty[channel - 1] = duty
                controller.select(channel, None)
            self._commanded = self._commanded or self._measured
        return ()

    def _status(self, controller: _Controller, both: tuple) -> tuple:
        """GetStatus (73): basicmicro's field order (roboclaw_codec.GET_STATUS); set-points
        and errors of a channel in neither closed-loop mode are 0."""
        setpoints, speed_errors, position_errors = [0, 0], [0, 0], [0, 0]
        for k, j in enumerate(both):
            speed = 0 if j is None else self._speed[j]
            loop, pos = controller.velocity[k], controller.position[k]
            if loop.active:
                setpoints[k] = round(loop.setpoint)
            elif pos.active:
                setpoints[k] = round(pos.speed)
                count = 0 if j is None else self._enc[j]
                position_errors[k] = _clamp16(round(pos.setpoint - count))
            if loop.active or pos.active:
                speed_errors[k] = _clamp16(setpoints[k] - speed)
        fields = (
            round(1000.0 * self.plant.plant.t) & 0xFFFFFFFF,     # tick: plant time, ms
            controller.errors | controller.warnings,
            round(10.0 * TEMPERATURE), round(10.0 * TEMPERATURE),
            round(10.0 * self.battery), round(10.0 * LOGIC_BATTERY),
            *controller.duty,
            *(0 if j is None else self._amps[j] for j in both),
            *(0 if j is None else self._enc[j] & 0xFFFFFFFF for j in both),
            *setpoints,
            *(0 if j is None else self._speed[j] for j in both),
            *speed_errors, *position_errors)
        return fields

    def _set_encoder(self, j: int, count: int) -> None:
        """Make joint j's encoder read ``count`` now (cmds 20, 22, 23)."""
        self._enc_offset[j] += count - self._enc[j]
        self._enc[j] = count

    # -- the plant ----------------------------------------------------------------

    def _step(self) -> None:
        scale = self.battery / rc.DUTY_FULL
        for j, (address, channel) in enumerate(self.axes):
            controller = self.controllers[address]
            k = channel - 1
            loop, pos, ramp = controller.velocity[k], controller.position[k], controller.ramp[k]
            if loop.active:
                controller.duty[k] = loop.duty(self._speed[j], self.dt)
            elif pos.active:
                controller.duty[k] = pos.duty(self._enc[j], self._speed[j], loop.qpps, self.dt)
            elif ramp is not None:
                target, accel = ramp
                step = max(accel * self.dt, 1.0) if accel else math.inf   # duty per step
                controller.duty[k] += int(round(max(-step, min(step, target - controller.duty[k]))))
            self._volts[j] = controller.duty[k] * scale
        p = self.plant.plant
        if len(self.schedule):
            stepping.apply_schedule(p.params, p.jams, self.schedule, p.t, p.x, 1e-9 * self.dt)
        if self.plant_log is not None:
            self.plant_log.record(self._volts, self._meas.current)
        self.plant.write(self._volts)
        self.stats["steps"] += 1
        self._sample()
        if not self.link_faults.idle:
            self._link_fault_changes()

    def _sample(self) -> None:
        meas = self._meas
        self.plant.read(meas)
        counts = meas.pos * self.counts_per_rad
        speeds = meas.vel * self.counts_per_rad
        amps = meas.current.copy()
        position_noise, speed_noise, current_noise = self.noise
        n = len(self.axes)
        if position_noise:
            counts += self.rng.normal(0.0, position_noise, n)
        if speed_noise:
            speeds += self.rng.normal(0.0, speed_noise, n)
        if current_noise:
            amps += self.rng.normal(0.0, current_noise, n)
        for controller in self.controllers.values():
            controller.warnings = 0
        for j, (address, channel) in enumerate(self.axes):
            self._enc[j] = int(round(counts[j])) + self._enc_offset[j]
            self._speed[j] = max(-2 ** 31, min(2 ** 31 - 1, int(round(speeds[j]))))
            self._amps[j] = max(-32768, min(32767, int(round(100.0 * amps[j]))))
            controller = self.controllers[address]
            if abs(meas.current[j]) > controller.max_current[channel - 1]:
                controller.warnings |= rc.OVERCURRENT_WARNING[channel]


def _bad_crc(reply: bytes, command: rc.Command) -> bytes:
    """``reply`` with a wrong CRC (a write's ACK, which has none, becomes 0x00)."""
    return reply[:-1] + bytes((reply[-1] ^ 0xFF,)) if command.is_read else b"\x00"


def _clamp16(value: int) -> int:
    """``value`` clamped to int16 (a GetStatus error field)."""
    return max(-32768, min(32767, value))


def _signed(value: int) -> int:
    """A 32-bit field as two's complement."""
    return value - (1 << 32) if value >= 1 << 31 else value


def serve(cfg: Config, port: str | int, stop_event, duration: float | None = None,
          log_path=None, ready=None, fault_endpoint: str | None = None) -> str:
    """Run the emulated drives in this thread until ``stop_event`` is set or for ``duration``
    s (for ``hil emulate``); returns why it stopped.

    The thread serves at SCHED_FIFO ``emulator.fifo_priority`` on ``emulator.cpu``
    (timing.sched; normal scheduling again on return): it keeps the plant's clock and
    answers the link within its reply timeout on a busy host too.

    Args:
        cfg: resolved config.
        port: a pty master descriptor to serve (the caller keeps a slave end open
            and closes both), or ``unix://PATH``: a socket served there (removed on
            return; drivers.protocol_unix), or a path: a new pty is opened and ``port``
            made a symlink to its slave (replacing what was there; removed on return),
            for the link's ``link.serial.port``.
        stop_event: threading.Event or multiprocessing.Event.
        duration: wall-clock limit, s (None: none).
        log_path: telemetry of the plant (.mcap), flushed on every way out.
        ready: an optional Event, set once the socket or the pty is in place.
        fault_endpoint: where `hil fault` reaches the drives' link faults
            (devices.fault_server; None: nowhere).
    Raises TelemetryError naming the count if the plant log lost rows (after closing it).
    """
    link_path = None
    if isinstance(port, int):
        emulator = RoboClawEmulator(cfg, master_fd=port, log_path=log_path)
    elif protocol_unix.is_url(port):
        emulator = RoboClawEmulator(cfg, log_path=log_path, socket_url=port)
    else:
        emulator = RoboClawEmulator(cfg, log_path=log_path)
        link_path = str(port)
        temporary = f"{link_path}.{os.getpid()}"
        os.symlink(emulator.port, temporary)
        os.replace(temporary, link_path)
    reason = "stopped"
    faults = None
    try:
        if fault_endpoint is not None:
            faults = FaultServer(emulator, fault_endpoint)
        apply_thread(cfg.emulator.cpu, cfg.emulator.fifo_priority)
        if ready is not None:
            ready.set()
        reason = emulator.run(stop_event, duration)
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        restore_thread()
        if faults is not None:
            faults.close()
        if link_path is not None and os.path.islink(link_path) \
                and os.readlink(link_path) == emulator.port:
            os.unlink(link_path)
        emulator.close(reason)
    if emulator.log_loss is not None:
        raise TelemetryError(emulator.log_loss)
    return reason
