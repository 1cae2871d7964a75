"""Packet-serial drives (RoboClaw-style brushed DC controllers) as a Link.

Each actuated joint is one motor channel (M1 or M2) of a controller at an
address 0x80..0x87; several controllers share one serial port (multi-drop).

Exchanges per tick (drivers.roboclaw_codec), per controller address:
- read phase: ReadEncM1/M2 (16/17) and ReadSpeedM1/M2 (18/19) per used channel,
  then ReadCurrents (49) and ReadStatus (90); the measurement is committed only
  when every exchange succeeded;
- write phase: DutyM1M2 (34) when both channels are used, else DutyM1/M2
  (32/33), each acknowledged by 0xFF.
For 3 axes on two controllers that is 10 reads and 2 writes, 102 bytes: 2.2 ms
of wire time at 460800 baud, 8.9 ms at 115200 (ptys and USB have no baud limit).
With ``pipeline`` a controller's reads go out in one write and their replies are
awaited together (``timeout`` per request): 4 round trips a tick instead of 12, for a pty
delivers each through a kernel worker of normal priority, late on a busy host
(docs/RIGPC.md).

Units: joint angle q = count * 2 pi / (counts_per_rev * gear_ratio) rad, joint
rate from the drive's speed (counts/s) the same way, currents A (10 mA steps),
commands V: duty = round(u / supply * 32767), clamped to +-32767 (+-100 %),
where supply is ``supply_voltage`` or, when that is 0, each controller's main
battery voltage read once at ``configure``. Encoder counts are decoded as uint32 and
unwrapped (the first reading taken as int32), so they never wrap.

Timing: a reply is awaited at most ``timeout`` s and never past the call's
deadline, start + ``budget``; a failed exchange (no reply, truncated, bad CRC,
not ACK) is flushed and repeated up to ``retries`` times while the deadline
allows; a reply that comes after its attempt gave up is skipped by the exchanges
after it (``late_bytes``), which take the last bytes that decode as their reply
(a write's ACK has no CRC: a late ACK of an earlier duty can pass for the next one's);
an exchange whose own reply does not come while a late one does is missing its reply
(ExchangeTimeout), not corrupted: the late bytes are recognised as the reply, CRC checked,
to one of the latest attempts that gave up. On a busy host a pty delivers late now and
then (docs/RIGPC.md: its kernel worker runs at normal priority).
So ``read`` and ``write`` each return within ``budget`` s plus the Python work
after the last wait (tens of microseconds). pyserial opens (``serial_for_url``: a
device path, or ``unix://PATH``, the emulator's socket, drivers.protocol_unix),
configures, flushes and closes the port; requests and replies go through
os.write/select/os.read on its non-blocking descriptor (a tty's or the socket's, the
same calls: the other end gone is EOF or EPIPE, a LinkError), because pyserial's
timeout setter reconfigures the port (tcsetattr) on every change and its write
reports a timeout after a complete write when the thread was descheduled
longer than the write timeout.

Reactions (documented, tested):
- a failed exchange attempt is counted (``failed_exchanges``) and named with
  its cause in ``last_error``, then repeated while retries and budget allow;
- a reply corrupted on the line (bad CRC, an ACK byte other than 0xFF) is also
  counted in ``crc_errors``; with ``on_crc_error`` = "retry" it is repeated as
  above and the first complete read or acknowledged write after a run of them
  says in one line how many there were (the link recovered); with "stop" the
  first one is a LinkError naming it;
- a read whose exchanges still fail returns False and keeps ``meas`` (the
  loop's watchdog counts stale ticks); a write that still fails leaves that
  controller on its previous duty;
- no complete read, or no fully acknowledged write, for ``lost_after`` s
  (config ``link.timeout``): LinkTimeout naming the last error;
- an error bit in a controller's status word: DriveFault(joint, status word,
  plain message); an over-current warning of a used channel on
  ``overcurrent_ticks`` consecutive reads: DriveFault (stalled or jammed joint);
- the port failing (peer gone, device unplugged): LinkError.
``safe_stop`` sends zero duty to every motor; from then on ``write`` sends zero
duty whatever it is given (the drives stay fed, the command is blocked).
``controlled_stop`` (IEC 60204-1 categories 1, 2): each motor's velocity PID ramps it to
rest, SpeedAccelM1/M2 (38/39: speed 0 at a deceleration, counts/s^2), and holds speed 0;
``write`` repeats that from then on (``_controlled_stop``).

Lifecycle (the base, drivers.link, keeps the order): ``configure`` opens the
port, checks every controller answers (main battery), sets its serial timeout
and current limits and sends zero duty to every motor; ``read`` works from then
on. ``activate`` lets ``write`` send duties (a packet-serial drive has no enable
of its own: the zero duty is the off state) and restarts the ``lost_after``
clocks, so a long warm-up between the two is not taken for a lost link.
Joints in DriveFault are numbered from 1, as in the configs.
"""
from __future__ import annotations

import logging
import math
import os
import select
from collections import deque
from time import perf_counter

import numpy as np
import serial
from hilrig.drivers import protocol_unix
from hilrig.drivers import roboclaw_codec as rc
from hilrig.drivers.controlled_stop import RAMP
from hilrig.drivers.link import DriveFault, Link, LinkError, LinkTimeout, Measurement
from hilrig.schema import Config

log = logging.getLogger("hil.link.serial")
protocol_unix.register()    # serial_for_url opens unix://PATH, the emulator's socket

OPEN_TIMEOUT = 0.1      # reply timeout of the set-up exchanges in ``configure``, s
OPEN_ATTEMPTS = 3
UNANSWERED = 8          # attempts that gave up, remembered to recognise their late replies


class ExchangeTimeout(LinkTimeout):
    """One exchange got no reply (or could not be sent) in time."""


class SerialLink(Link):
    """RoboClaw-style packet-serial controllers driving the actuated joints' DC motors.

    Args:
        port: serial device path (/dev/ttyACM0; a pty slave for the emulator), or
            ``unix://PATH``, the emulator's socket (drivers.protocol_unix).
        axes: (address, channel) per joint; address 0x80..0x87, channel 1 (M1) or 2 (M2).
        counts_per_rev: encoder counts per motor revolution, per joint.
        gear_ratio: motor angle / joint angle, per joint.
        baud: bit/s.
        supply_voltage: V; 0 = read each controller's main battery at ``configure``.
        timeout: longest wait for one reply, s.
        retries: repeats of a failed exchange within one call.
        budget: longest one ``read`` or one ``write`` may take, s.
        lost_after: no complete read or acknowledged write for this long: LinkTimeout, s.
        drive_timeout: drive-side serial timeout set at ``configure`` (cmd 14), s; 0 = off.
        max_current: per joint, A, written at ``configure`` (cmds 133/134); 0 = keep the
            drive's.
        overcurrent_ticks: consecutive over-current warnings that make a DriveFault; 0 = never.
        on_crc_error: "retry" (count, repeat, one line on recovery) or "stop" (LinkError).
        pipeline: send each controller's read requests in one write and wait for their
            replies together (one round trip per controller instead of four to six), an
            attempt waiting ``timeout`` per request; False: one request, one reply, then the
            next.
        command_mode: "duty" (cmds 32..34: duty = u / supply) or "speed" (cmds 35..37:
            the drive's velocity PID follows speed = duty x QPPS / 32767 counts/s, the QPPS
            of each channel read at ``configure`` with cmds 55/56: the no-load speed that
            voltage would give, held against the load by the drive).
    """

    command_unit = "V"

    def __init__(self, port: str, axes, counts_per_rev, gear_ratio, *, baud: int = 460800,
                 supply_voltage: float = 0.0, timeout: float = 0.002, retries: int = 1,
                 budget: float = 0.004, lost_after: float = 0.1, drive_timeout: float = 0.0,
                 max_current=0.0, overcurrent_ticks: int = 20, command_mode: str = "duty",
                 on_crc_error: str = "retry", pipeline: bool = False):
        if command_mode not in ("duty", "speed"):
            raise ValueError(f"command_mode must be 'duty' or 'speed', got {command_mode!r}")
        if on_crc_error not in ("retry", "stop"):
            raise ValueError(f"on_crc_error must be 'retry' or 'stop', got {on_crc_error!r}")
        self.on_crc_error = on_crc_error
        self.pipeline = bool(pipeline)
        self.command_mode = command_mode
        self.port = port
        self.axes = [(int(a), int(c)) for a, c in axes]
        self.n_axes = n = len(self.axes)
        for address, channel in self.axes:
            if address not in rc.ADDRESSES or channel not in (1, 2):
                raise ValueError(f"axis (0x{address:02X}, {channel}): address must be "
                                 "0x80..0x87 and channel 1 or 2")
        if len(set(self.axes)) != n:
            raise ValueError(f"axes map two joints to one motor: {self.axes}")
        self.rad_per_count = 2.0 * np.pi / (np.broadcast_to(counts_per_rev, n)
                                            * np.broadcast_to(gear_ratio, n))
        self.baud = int(baud)
        self.supply_voltage = float(supply_voltage)
        self.timeout, self.retries, self.budget = float(timeout), int(retries), float(budget)
        self.lost_after = float(lost_after)
        self.drive_timeout = float(drive_timeout)
        self.max_current = np.broadcast_to(np.asarray(max_current, dtype=float), n).copy()
        self.overcurrent_ticks = int(overcurrent_ticks)
        # controllers in order of first appearance: (address, [(channel, joint index), ...])
        self.controllers: list[tuple[int, list[tuple[int, int]]]] = []
        for j, (address, channel) in enumerate(self.axes):
            row = next((c for a, c in self.controllers if a == address), None)
            if row is None:
                row = []
                self.controllers.append((address, row))
            row.append((channel, j))
        for _, row in self.controllers:
            row.sort()
        self._reads = {(a, cmd.code): rc.encode_request(a, cmd)
                       for a, _ in self.controllers
                       for cmd in (rc.READ_ENC_M1, rc.READ_ENC_M2, rc.READ_SPEED_M1,
                                   rc.READ_SPEED_M2, rc.READ_CURRENTS, rc.READ_STATUS)}
        # per controller: its read requests in the read phase's order, and their bytes
        self._batches = {}
        for a, row in self.controllers:
            commands = tuple(cmd for channel, _ in row
                             for cmd in (rc.READ_ENC[channel], rc.READ_SPEED[channel])) + \
                (rc.READ_CURRENTS, rc.READ_STATUS)
            self._batches[a] = (commands, b"".join(self._reads[a, cmd.code] for cmd in commands))
        self.supply = np.zeros(n)           # V per joint, set by configure
        self.qpps = np.zeros(n)             # counts/s at full duty, speed mode (configure)
        self.status = {a: 0 for a, _ in self.controllers}   # last status word per address
        self.last_error = ""                # the latest failed exchange attempt, and why
        self.failed_exchanges = 0           # failed attempts (each retried while time allows)
        self.stale_reads = 0                # reads that returned False
        self.failed_writes = 0              # writes with an exchange that failed for good
        self.crc_errors = 0                 # replies corrupted on the line (CrcError)
        self._crc_unsaid = 0                # ... since the last line that said them
        self.late_bytes = 0                 # late replies to earlier attempts, skipped
        # (address, command) of the latest attempts that gave up: their replies may come late
        self._unanswered: deque = deque(maxlen=UNANSWERED)
        self._pos, self._vel, self._cur = np.zeros(n), np.zeros(n), np.zeros(n)
        self._raw: list[int | None] = [None] * n
        self._count = [0] * n
        self._overcurrent = [0] * n
        self._serial: serial.Serial | None = None
        self._fd = -1
        self._dirty = False
        self._t0 = self._last_fresh = self._last_ack = 0.0
        self._stop_accel: list[int] | None = None   # a controlled stop's, counts/s^2

    @classmethod
    def from_config(cls, cfg: Config) -> "SerialLink":
        """The link that ``cfg.link.serial`` describes (gear ratios from plant.motor)."""
        s = cfg.link.serial
        return cls(s.port, s.axes, s.counts_per_rev, cfg.plant.motor.gear_ratio,
                   baud=s.baud, supply_voltage=s.supply_voltage, timeout=s.timeout,
                   retries=s.retries, budget=s.budget, lost_after=cfg.link.timeout,
                   drive_timeout=s.drive_timeout, max_current=s.max_current,
                   overcurrent_ticks=s.overcurrent_ticks, command_mode=s.command,
                   on_crc_error=s.on_crc_error, pipeline=s.pipeline)

    # -- Link ---------------------------------------------------------------------

    def describe(self) -> str:
        return f"serial link {self.port}"

    def _configure(self) -> None:
        """Open the port, check every controller answers, configure it, zero its duties.

        Raises LinkError naming the port, the address and the cause (the base then
        closes the port).
        """
        try:
            self._serial = serial.serial_for_url(self.port, self.baud, timeout=0)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise LinkError(f"cannot open serial port {self.port}: {exc}") from None
        self._fd = self._serial.fileno()
        self._dirty = True
        for address, row in self.controllers:
            self._set_up(address, row)
        self._raw = [None] * self.n_axes
        self._overcurrent = [0] * self.n_axes
        self._t0 = self._last_fresh = self._last_ack = perf_counter()

    def _activate(self) -> None:
        """Accept duty commands from now on; the ``lost_after`` clocks start again."""
        self._last_fresh = self._last_ack = perf_counter()

    def _read(self, meas: Measurement) -> bool:
        """Fill ``meas`` (t: s since ``configure``, rad, rad/s, A); False if an exchange failed."""
        start = perf_counter()
        deadline = start + self.budget
        try:
            for address, row in self.controllers:
                self._read_controller(address, row, deadline)
        except (rc.FrameError, ExchangeTimeout) as exc:
            self.last_error = str(exc)      # also the budget running out before an exchange
            self.stale_reads += 1
            silent = perf_counter() - self._last_fresh
            if silent > self.lost_after:
                raise LinkTimeout(f"{self.port}: no complete measurement for {silent:.3f} s "
                                  f"(link.timeout = {self.lost_after} s); last error: "
                                  f"{self.last_error}") from None
            return False
        meas.buffer[0] = start - self._t0
        meas.pos[:] = self._pos
        meas.vel[:] = self._vel
        meas.current[:] = self._cur
        self._last_fresh = perf_counter()
        if self._crc_unsaid:
            self._recovered()
        return True

    def _write(self, command: np.ndarray) -> None:
        """Send one duty per motor for ``command`` (V per joint); during a controlled stop,
        its ramp to rest again (``command`` is not used)."""
        if self._stop_accel is not None:
            self._send_duties(None)
            return
        duty = [0] * self.n_axes
        for j in range(self.n_axes):
            u = float(command[j])
            if not math.isfinite(u):
                raise LinkError(f"joint {j + 1}: command {u} V is not finite")
            d = round(u / self.supply[j] * rc.DUTY_FULL)
            duty[j] = max(-rc.DUTY_FULL, min(rc.DUTY_FULL, d))
        self._send_duties(duty)

    def _write_stopped(self) -> None:
        """Zero duty to every motor, whatever the command (the drives stay fed)."""
        self._send_duties([0] * self.n_axes)

    def _send_duties(self, duty: list | None) -> None:
        """One duty (or speed) exchange per controller within ``budget`` (``duty`` None:
        the controlled stop's, ``_send_stop``); LinkTimeout when none was acknowledged for
        ``lost_after`` s."""
        deadline = perf_counter() + self.budget
        failed = None
        for address, row in self.controllers:
            try:
                if duty is None:
                    self._send_stop(address, row, deadline)
                elif self.command_mode == "speed":
                    self._send_speed(address, row, duty, deadline)
                else:
                    self._send_duty(address, row, duty, deadline)
            except (rc.FrameError, ExchangeTimeout) as exc:
                failed = exc
        if failed is None:
            self._last_ack = perf_counter()
            if self._crc_unsaid:
                self._recovered()
            return
        self.last_error = str(failed)
        self.failed_writes += 1
        silent = perf_counter() - self._last_ack
        if silent > self.lost_after:
            raise LinkTimeout(f"{self.port}: no acknowledged duty command for {silent:.3f} s "
                              f"(link.timeout = {self.lost_after} s); last error: "
                              f"{self.last_error}")

    def _controlled_stop(self, category: int, stop_time: float) -> None:
        """IEC 60204-1 category 1 or 2 in the drives: each motor's velocity PID ramps its
        speed from the last one measured to 0 in RAMP x ``stop_time`` (drivers.controlled_stop:
        the rest of the stop time lets it settle) and then holds speed 0, power kept
        (category 1: the caller's ``safe_stop`` removes it after ``stop_time``). The
        velocity PID must be tuned, QPPS > 0 (cmds 55/56, read here unless
        link.serial.command = "speed" has), else LinkError: the caller stops with category 0."""
        for address, row in self.controllers:
            for channel, j in row:
                if self.qpps[j] > 0.0:
                    continue
                pid = (rc.READ_M1_VELOCITY_PID, rc.READ_M2_VELOCITY_PID)[channel - 1]
                *_, qpps = self.exchange(address, pid)
                if qpps <= 0:
                    raise LinkError(f"RoboClaw at 0x{address:02X} M{channel}: its velocity PID "
                                    "is not tuned (QPPS 0), so it cannot ramp to rest")
                self.qpps[j] = qpps
        rate = np.abs(self._vel) / self.rad_per_count                     # counts/s
        self._stop_accel = [max(1, round(r / (RAMP * stop_time))) for r in rate]
        self._send_duties(None)

    def _send_stop(self, address: int, row, deadline: float) -> None:
        """SpeedAccelM1/M2 to each motor of a controller: speed 0 at the controlled stop's
        deceleration (``_stop_accel``)."""
        for channel, j in row:
            command = (rc.SPEED_ACCEL_M1, rc.SPEED_ACCEL_M2)[channel - 1]
            self._exchange(address, command,
                           rc.encode_request(address, command, self._stop_accel[j], 0),
                           deadline, self.timeout, self.retries + 1)

    def _safe_stop(self) -> None:
        """Zero every motor's duty (later writes send zero duty: ``_write_stopped``).

        Each controller gets ``(retries + 1) * timeout`` s for its zero-duty exchange.
        """
        self._stop_accel = None
        zero = [0] * self.n_axes
        for address, row in self.controllers:
            try:
                self._send_duty(address, row, zero,
                                perf_counter() + (self.retries + 1) * self.timeout)
            except Exception as exc:  # noqa: BLE001 - the next controllers still get theirs
                self.last_error = f"safe stop: {exc}"

    def _close(self) -> None:
        """Close the port (if configure got as far)."""
        port, self._serial, self._fd = self._serial, None, -1
        if port is not None:
            port.close()

    # -- one exchange -------------------------------------------------------------

    def exchange(self, address: int, command: rc.Command, *values: int,
                 timeout: float | None = None, attempts: int | None = None) -> tuple:
        """One request and its reply, with retries; returns the reply's values.

        Args:
            timeout: per-attempt reply timeout, s (default: the link's).
            attempts: tries in all (default: 1 + retries).
        Raises:
            FrameError, ExchangeTimeout when every attempt failed; LinkError when
            the port fails or the link is not open.
        """
        wait = self.timeout if timeout is None else timeout
        tries = self.retries + 1 if attempts is None else attempts
        request = rc.encode_request(address, command, *values)
        return self._exchange(address, command, request, perf_counter() + tries * wait, wait,
                              tries)

    def _exchange(self, address: int, command: rc.Command, request: bytes, deadline: float,
                  wait: float, tries: int) -> tuple:
        """One request and its reply, within ``deadline``: ``_exchanges`` of one."""
        return self._exchanges(address, (command,), request, deadline, wait, tries)[0]

    def _exchanges(self, address: int, commands: tuple, request: bytes, deadline: float,
                   wait: float, tries: int) -> list:
        """``request`` (the requests of ``commands`` to one controller, back to back) and
        their replies, in order; an attempt waits ``wait`` s per request, never past
        ``deadline``, and a failed one is repeated while ``tries`` and ``deadline`` allow.
        Returns each reply's values."""
        command = commands[0]
        if self._serial is None:
            raise LinkError(f"{self.port}: the link is not open")
        error: LinkError | None = None
        for _ in range(tries):
            now = perf_counter()
            if now >= deadline:
                break
            if self._dirty:
                self._serial.reset_input_buffer()
                self._dirty = False
            until = min(now + wait * len(commands), deadline)
            self._send(request, until, address, command)
            try:
                return self._reply(address, commands, until, now)
            except (rc.FrameError, ExchangeTimeout) as exc:
                error = exc
                self._dirty = True
                # its replies, if they come late, end with the last request's
                self._unanswered.append((address, commands[-1]))
                self.last_error = str(exc)
                self.failed_exchanges += 1
                if isinstance(exc, rc.CrcError):
                    self._crc_error(exc)
        if error is None:
            error = ExchangeTimeout(f"{_named(address, commands)}: "
                                    "not sent, no time left before the call's deadline "
                                    f"(link.serial.budget = {self.budget * 1e3:.2f} ms)")
        raise error

    def _crc_error(self, exc: rc.CrcError) -> None:
        """Count a corrupted reply; LinkError when ``on_crc_error`` is "stop"."""
        self.crc_errors += 1
        self._crc_unsaid += 1
        if self.on_crc_error == "stop":
            raise LinkError(f"{self.port}: {exc} (link.serial.on_crc_error = 'stop')") from None

    def _recovered(self) -> None:
        """The one line after a run of corrupted replies that the retries got past."""
        log.warning("%s: %d repl%s with a bad CRC, retried: the link recovered (%d in all; "
                    "last: %s)", self.port, self._crc_unsaid,
                    "y" if self._crc_unsaid == 1 else "ies", self.crc_errors, self.last_error)
        self._crc_unsaid = 0

    def _send(self, request: bytes, until: float, address: int, command: rc.Command) -> None:
        """Write the whole request, waiting for room no later than ``until``."""
        sent = 0
        while True:
            try:
                sent += os.write(self._fd, request[sent:])
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):     # a socket's peer closed
                raise self._closed() from None
            except OSError as exc:
                raise LinkError(f"{self.port}: write failed: {exc}") from None
            if sent == len(request):
                return
            left = until - perf_counter()
            if left <= 0.0 or not select.select((), (self._fd,), (), left)[1]:
                raise ExchangeTimeout(f"{command.name} (cmd {command.code}) at "
                                      f"0x{address:02X}: the port did not take the request "
                                      "in time (output buffer full)")

    def _reply(self, address: int, commands: tuple, until: float, sent: float) -> list:
        """The values of the replies to the requests just sent (of ``commands``, in order),
        waiting no later than ``until``.

        Bytes are read as they come, and the replies are the last of them (their
        ``reply_length`` summed) once those decode (a read's CRC covers the address, the
        command and the data).
        Bytes before it are late replies to earlier attempts: a reply that came after its
        attempt had timed out and the input had been flushed. They are skipped and counted
        (``late_bytes``), so a late reply costs its own attempt only; taken for the next
        exchange's reply, it failed that one too, whose own reply then came late, and so on
        to the end of the tick (bench/bench_rigs.py, rig_serial on a busy host). What never
        decodes is the error of the last ``reply_length`` bytes at ``until`` (CrcError,
        FrameError: truncated), unless those bytes end with a reply to one of the latest
        attempts that gave up (``_late``): then, as when nothing came at all, this reply is
        missing, an ExchangeTimeout, and not corrupted (``sent``: when the attempt began,
        perf_counter s).
        """
        n = sum(c.reply_length for c in commands)
        received = b""
        error: rc.FrameError | None = None
        while True:
            chunk = self._receive(until)
            if not chunk:
                break
            received += chunk
            if len(received) < n:
                continue
            try:
                values = _decode(address, commands, received[-n:])
            except rc.FrameError as exc:
                error = exc             # late bytes, or this reply corrupted: wait on
                continue
            self.late_bytes += len(received) - n
            return values
        if not received or self._late(received):
            self.late_bytes += len(received)
            late = f" ({len(received)} late bytes of earlier requests skipped)" \
                if received else ""
            raise ExchangeTimeout(f"{_named(address, commands)}: "
                                  f"no reply within {(until - sent) * 1e3:.2f} ms{late}")
        if error is None:
            _decode(address, commands, received)     # raises: a truncated reply
        raise error

    def _late(self, received: bytes) -> bool:
        """Whether ``received`` ends with a complete reply, CRC checked, to one of the latest
        attempts that gave up: a reply that the pty (or the drive) delivered late, not one
        corrupted on the line (an ACK has no CRC: a late one cannot be told apart)."""
        for address, command in self._unanswered:
            n = command.reply_length
            if command.is_read and len(received) >= n:
                try:
                    rc.decode_reply(address, command, received[-n:])
                except rc.FrameError:
                    continue
                return True
        return False

    def _receive(self, until: float) -> bytes:
        """What has arrived (waiting for something no later than ``until``, perf_counter
        time), or b"" when nothing came by then."""
        left = until - perf_counter()
        if left <= 0.0:
            return b""
        try:
            if not select.select((self._fd,), (), (), left)[0]:
                return b""
            chunk = os.read(self._fd, 256)
        except ConnectionResetError:            # a socket's peer closed with bytes unread
            chunk = b""
        except OSError as exc:
            raise LinkError(f"{self.port}: read failed ({exc}); is the drive (or the "
                            "emulator) still there?") from None
        if not chunk:
            raise self._closed()
        return chunk

    def _closed(self) -> LinkError:
        """The other end closed the line (EOF, or a socket's EPIPE / ECONNRESET)."""
        return LinkError(f"{self.port}: the port was closed by the other end (the drive or "
                         "the emulator went away, or it serves another link)")

    # -- the phases ---------------------------------------------------------------

    def _read_controller(self, address: int, row, deadline: float) -> None:
        """The read phase of one controller: encoder and speed of each used channel, the
        currents, the status word (with ``pipeline``, in one exchange)."""
        commands, batch = self._batches[address]
        wait, tries = self.timeout, self.retries + 1
        if self.pipeline:
            replies = self._exchanges(address, commands, batch, deadline, wait, tries)
        else:
            replies = [self._exchange(address, cmd, self._reads[address, cmd.code], deadline,
                                      wait, tries) for cmd in commands]
        for k, (_, j) in enumerate(row):
            (count, _), (speed, _) = replies[2 * k], replies[2 * k + 1]
            raw = self._raw[j]
            if raw is None:
                self._count[j] = count - (1 << 32) if count >= 1 << 31 else count
            else:
                self._count[j] += ((count - raw + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
            self._raw[j] = count
            self._pos[j] = self._count[j] * self.rad_per_count[j]
            self._vel[j] = speed * self.rad_per_count[j]
        m1, m2 = replies[-2]
        for channel, j in row:
            self._cur[j] = 0.01 * (m1 if channel == 1 else m2)
        (word,) = replies[-1]
        self._check_status(address, row, word)

    def _check_status(self, address: int, row, word: int) -> None:
        self.status[address] = word
        errors = word & rc.ERROR_MASK
        if errors:
            j = next((j for c, j in row if errors & rc.CHANNEL_ERRORS[c]), row[0][1])
            raise DriveFault(j + 1, word, f"{rc.describe_status(errors)} (RoboClaw at "
                                          f"0x{address:02X} on {self.port})")
        for channel, j in row:
            self._overcurrent[j] = self._overcurrent[j] + 1 \
                if word & rc.OVERCURRENT_WARNING[channel] else 0
            if self.overcurrent_ticks and self._overcurrent[j] >= self.overcurrent_ticks:
                limit = f", limit {self.max_current[j]:g} A" if self.max_current[j] > 0 else ""
                raise DriveFault(j + 1, word, (
                    f"M{channel} over-current warning on {self._overcurrent[j]} consecutive "
                    f"reads (RoboClaw at 0x{address:02X}{limit}): the motor is stalled or its "
                    "joint is jammed"))

    def _send_duty(self, address: int, row, duty: list, deadline: float,
                   wait: float | None = None, tries: int | None = None) -> None:
        if len(row) == 2:
            command, values = rc.DUTY_M1M2, (duty[row[0][1]], duty[row[1][1]])
        else:
            channel, j = row[0]
            command, values = rc.DUTY[channel], (duty[j],)
        self._exchange(address, command, rc.encode_request(address, command, *values), deadline,
                       self.timeout if wait is None else wait,
                       self.retries + 1 if tries is None else tries)

    def _send_speed(self, address: int, row, duty: list, deadline: float) -> None:
        speed = [round(duty[j] * self.qpps[j] / rc.DUTY_FULL) for j in range(self.n_axes)]
        if len(row) == 2:
            command, values = rc.SPEED_M1M2, (speed[row[0][1]], speed[row[1][1]])
        else:
            channel, j = row[0]
            command, values = (rc.SPEED_M1, rc.SPEED_M2)[channel - 1], (speed[j],)
        self._exchange(address, command, rc.encode_request(address, command, *values), deadline,
                       self.timeout, self.retries + 1)

    def _set_up(self, address: int, row) -> None:
        try:
            (tenths,) = self.exchange(address, rc.READ_MAIN_BATTERY, timeout=OPEN_TIMEOUT,
                                      attempts=OPEN_ATTEMPTS)
        except (rc.FrameError, ExchangeTimeout) as exc:
            raise LinkError(f"no RoboClaw answers at address 0x{address:02X} on {self.port}: "
                            f"{exc}") from None
        supply = self.supply_voltage or 0.1 * tenths
        if supply <= 0.0:
            raise LinkError(f"RoboClaw at 0x{address:02X}: main battery reads {0.1 * tenths:g} V; "
                            "cannot turn volts into duty (set link.serial.supply_voltage?)")
        try:
            if self.drive_timeout > 0.0:
                self.exchange(address, rc.SET_SERIAL_TIMEOUT, round(self.drive_timeout * 10),
                              timeout=OPEN_TIMEOUT, attempts=OPEN_ATTEMPTS)
            for channel, j in row:
                self.supply[j] = supply
                if self.command_mode == "speed":
                    pid = (rc.READ_M1_VELOCITY_PID, rc.READ_M2_VELOCITY_PID)[channel - 1]
                    *_, qpps = self.exchange(address, pid, timeout=OPEN_TIMEOUT,
                                             attempts=OPEN_ATTEMPTS)
                    if qpps <= 0:
                        raise LinkError(f"RoboClaw at 0x{address:02X} M{channel}: QPPS is 0; "
                                        "tune its velocity PID before link.serial.command = "
                                        "'speed'")
                    self.qpps[j] = qpps
                if self.max_current[j] > 0.0:
                    self.exchange(address, rc.SET_MAX_CURRENT[channel],
                                  round(self.max_current[j] * 100), 0,
                                  timeout=OPEN_TIMEOUT, attempts=OPEN_ATTEMPTS)
            self._send_duty(address, row, [0] * self.n_axes,
                            perf_counter() + OPEN_ATTEMPTS * OPEN_TIMEOUT, OPEN_TIMEOUT,
                            OPEN_ATTEMPTS)
        except (rc.FrameError, ExchangeTimeout) as exc:
            raise LinkError(f"setting up the RoboClaw at 0x{address:02X} on {self.port} "
                            f"failed: {exc}") from None


def _named(address: int, commands: tuple) -> str:
    """An exchange in messages: its (first) command and the address."""
    more = f" and {len(commands) - 1} more requests" if len(commands) > 1 else ""
    return f"{commands[0].name} (cmd {commands[0].code}){more} at 0x{address:02X}"


def _decode(address: int, commands: tuple, data: bytes) -> list:
    """The values of each reply in ``data`` (the replies to ``commands``, back to back,
    their lengths summed or fewer); FrameError of the first that does not decode
    (truncated when ``data`` is short)."""
    values, at = [], 0
    for command in commands:
        values.append(rc.decode_reply(address, command, data[at:at + command.reply_length]))
        at += command.reply_length
    return values
