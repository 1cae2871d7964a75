"""The link to the plant emulator over ZeroMQ (devices.zmq_plant, wire format drivers.wire).

A DEALER socket connects to the emulator's ROUTER. ``configure`` says HELLO and
waits for WELCOME (which tells the mode and the plant's size); the emulator then
sends STATEs but holds its safe zero input until the first COMMAND, which
``write`` sends only after ``activate``. ``read`` takes
the newest STATE (free mode: whatever arrived since the last tick, never
waiting; lockstep: waits for the answer to the last COMMAND, up to
``link.timeout``); a frame that breaks the wire format (corrupted) is discarded
and counted (``bad_frames``), so only the watchdog stops a run for them; ``write``
sends a COMMAND; ``safe_stop`` sends BYE, so the emulator puts its plant in the safe
state; later writes send nothing (the base, drivers.link, keeps the lifecycle).

The link's ZeroMQ context is its own (unless one is given), its I/O thread at the
loop's SCHED_FIFO priority (``fifo_priority``, drivers.endpoint.context): the STATEs
and COMMANDs go through that thread, so on a busy host it must not wait behind
processes of normal priority. ``close`` terminates it.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import zmq
from hilrig.drivers import curve
from hilrig.drivers import endpoint as endpoints
from hilrig.drivers.link import Link, LinkError, LinkTimeout, Measurement
from hilrig.drivers.registry import command_unit
from hilrig.drivers.wire import (
    ERROR_BUSY, ERROR_TEXT, MessageType, WireError, decode, encode)
from hilrig.plant.factory import actuated_joints
from hilrig.schema import Config

log = logging.getLogger("hil.link.zmq")

# On close, frames still queued (the last COMMAND, the BYE) get this long to leave:
# closing with 0 dropped them whenever ZeroMQ's I/O thread had not sent them yet, and
# a lockstep emulator then never stepped the last command. A dead emulator costs a
# close at most this much.
LINGER_MS = 500
HELLO_RESEND_S = 0.2      # s between HELLOs while the emulator has not welcomed us


class ZmqLink(Link):
    """Controller side of the emulator protocol.

    Args:
        endpoint: the emulator's endpoint, e.g. ipc://$RUNTIME/emulator (drivers.endpoint.expand).
        n_axes: actuated joints the controller drives; 0 takes the plant's number from
            the emulator's WELCOME at configure.
        timeout: s to wait for WELCOME and (lockstep) for each STATE.
        takeover: say TAKEOVER instead of HELLO: command the plant even while another
            controller is connected (the emulator logs it); otherwise the emulator refuses.
        fifo_priority: SCHED_FIFO priority of the I/O thread of the link's own context
            (the loop's, loop.fifo_priority; 0: normal scheduling); not used when
            ``context`` is given.

    An invalid endpoint, or a tcp endpoint without this user's CURVE keys, is a
    ConfigError here.
    """

    def __init__(self, endpoint: str, n_axes: int, timeout: float = 0.1,
                 context: zmq.Context | None = None, takeover: bool = False,
                 fifo_priority: int = 0):
        transport, _ = endpoints.check(endpoint)
        if transport == "tcp":
            curve.client_keys()
        self.endpoint = endpoints.expand(endpoint)     # messages name the real socket
        self.takeover = takeover
        self.n_axes = n_axes
        self.timeout_ms = max(1, int(timeout * 1000))
        self.context = context
        self.owns_context = context is None     # made at configure, terminated at close
        self.fifo_priority = fifo_priority
        self.socket = None
        self.lockstep = False
        self.command_unit = "V"
        self.configured_unit = None    # from_config: the config's; else the WELCOME's
        self.seq = 0
        self.state_seq = -1
        self.commands_dropped = 0      # COMMANDs the full send queue refused (write)
        self.bad_frames = 0            # frames that broke the wire format, discarded (read)
        self.expected = {MessageType.STATE: 1 + 3 * n_axes, MessageType.ERROR: 1,
                         MessageType.WELCOME: 4}

    @classmethod
    def from_config(cls, cfg: Config) -> "ZmqLink":
        link = cls(cfg.link.endpoint, actuated_joints(cfg), cfg.link.timeout,
                   fifo_priority=cfg.loop.fifo_priority)
        # the config decides the unit (and so the clamps); a WELCOME must agree with it
        link.configured_unit = link.command_unit = command_unit(cfg.link.type,
                                                                cfg.plant.drive)
        return link

    def describe(self) -> str:
        return f"emulator link {self.endpoint}"

    def _configure(self) -> None:
        """HELLO, then WELCOME within max(timeout, 1 s): mode, axes and command unit.

        Sends no COMMAND: the emulator's plant stays at zero input. Raises LinkError
        (LinkTimeout when nobody answers); the base then closes the socket.
        """
        if self.context is None:
            self.context = endpoints.context(self.fifo_priority)
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, LINGER_MS)
        mode, n_axes, _, voltage = self._hello()
        if self.n_axes == 0:     # asked for the plant's size (HELLO [0])
            self.n_axes = int(n_axes)
            self.expected[MessageType.STATE] = 1 + 3 * self.n_axes
        elif int(n_axes) != self.n_axes:
            raise LinkError(f"emulator plant has {int(n_axes)} axes, the controller "
                            f"{self.n_axes}: are both started with the same config?")
        self.lockstep = int(mode) == 1
        unit = "V" if voltage else "N m"
        if self.configured_unit is not None and unit != self.configured_unit:
            raise LinkError(f"the emulator at {self.endpoint} takes {unit}, this controller's "
                            f"config {self.configured_unit} (plant.drive): are both started "
                            "with the same config? (the config's unit and limits hold, "
                            "never the peer's)")
        self.command_unit = unit

    def _hello(self) -> np.ndarray:
        """Say HELLO until WELCOME; the WELCOME's values [mode, n_axes, dt, voltage].

        HELLO is said again every HELLO_RESEND_S until max(timeout, 1 s) has passed: the
        emulator may have dropped its answer (its ERROR replies are rate-limited during a
        flood of bad frames) or may not yet have seen the previous controller disconnect
        (it answers ERROR_BUSY until then). A repeated HELLO is answered as the first.
        """
        endpoints.connect(self.socket, self.endpoint, "emulator")
        hello = encode(MessageType.TAKEOVER if self.takeover else MessageType.HELLO, 0, 0.0,
                       [self.n_axes])
        deadline = time.monotonic() + max(self.timeout_ms, 1000) / 1000
        busy = False
        while True:
            self.socket.send(hello)
            resend_at = min(time.monotonic() + HELLO_RESEND_S, deadline)
            while (left := resend_at - time.monotonic()) > 0 \
                    and self.socket.poll(max(1, int(1000 * left))):
                frame = self.socket.recv()
                if self._is_busy(frame):
                    busy = True        # wait for the next HELLO: the other may be leaving
                    continue
                kind, _, _, values = self._decode(frame)
                if kind != MessageType.WELCOME:
                    raise LinkError(f"emulator at {self.endpoint} answered HELLO with "
                                    f"{kind.name}")
                return values
            if time.monotonic() >= deadline:
                if busy:
                    raise LinkError(f"emulator at {self.endpoint} rejected our message: "
                                    f"{ERROR_TEXT[ERROR_BUSY]}")
                raise LinkTimeout(f"no emulator answered at {self.endpoint} (is `hil "
                                  f"emulate` running there?)")

    def _is_busy(self, frame: bytes) -> bool:
        """Whether ``frame`` is the emulator's ERROR_BUSY (another controller commands)."""
        try:
            kind, _, _, values = decode(frame, self.expected)
        except WireError:
            return False
        return kind == MessageType.ERROR and int(values[0]) == ERROR_BUSY

    def _decode(self, frame: bytes):
        try:
            kind, seq, t, values = decode(frame, self.expected)
        except WireError as exc:
            raise LinkError(f"emulator at {self.endpoint} sent a bad frame: {exc}") from None
        if kind == MessageType.ERROR:
            raise LinkError(f"emulator at {self.endpoint} rejected our message: "
                            f"{ERROR_TEXT.get(int(values[0]), 'unknown error')}")
        return kind, seq, t, values

    def _read(self, meas: Measurement) -> bool:
        fresh = False
        if self.lockstep and not self.socket.poll(self.timeout_ms):
            raise LinkTimeout(f"emulator at {self.endpoint} did not answer within "
                              f"{self.timeout_ms} ms (stopped or killed?)")
        while True:
            try:
                frame = self.socket.recv(flags=zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return fresh
            try:
                kind, seq, _, values = decode(frame, self.expected)
            except WireError as exc:
                self._bad_frame(exc)
                continue
            if kind == MessageType.ERROR:
                self._decode(frame)           # raises, naming the emulator's refusal
            if kind == MessageType.STATE and seq > self.state_seq:
                self.state_seq = seq
                meas.buffer[:] = values
                fresh = True
                if self.lockstep:
                    return True

    def _bad_frame(self, exc: WireError) -> None:
        """A frame that breaks the wire format (corrupted on the way): discarded and
        counted in ``bad_frames``, as a CAN controller drops a frame with a bad CRC; the
        first is said in one line. The measurement is then not fresh, so a stream of them
        trips the loop's watchdog (``safety.watchdog_ticks``), naming the link lost."""
        if self.bad_frames == 0:
            log.warning("emulator at %s sent a bad frame (%s): discarded; further ones are "
                        "counted (bad_frames) and the watchdog decides", self.endpoint, exc)
        self.bad_frames += 1

    def _write(self, command: np.ndarray) -> None:
        """One COMMAND (the first takes the plant out of its safe state)."""
        self.seq += 1
        try:
            self.socket.send(encode(MessageType.COMMAND, self.seq, 0.0, command),
                             flags=zmq.NOBLOCK)
        except zmq.Again:
            # The queue to the emulator is full (it is flooded or stalled): this command
            # is dropped, the emulator holds the last one it took, and a lockstep read
            # or the free-mode watchdog notices if nothing comes back.
            if self.commands_dropped == 0:
                log.warning("emulator at %s takes no more commands for now (its queue is "
                            "full): dropping commands until it does", self.endpoint)
            self.commands_dropped += 1

    def _controlled_stop(self, category: int, stop_time: float) -> None:
        """STOP [category, stop time]: the emulator's drives bring the plant to rest (then
        category 1 removes the power, 2 holds); the COMMANDs that follow keep the session
        alive and move nothing."""
        try:
            self.socket.send(encode(MessageType.STOP, self.seq, 0.0, [category, stop_time]),
                             flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            raise LinkError(f"STOP not sent to {self.endpoint}: {exc}") from None

    def _safe_stop(self) -> None:
        """BYE: the emulator puts its plant in the safe state."""
        try:
            self.socket.send(encode(MessageType.BYE, self.seq, 0.0), flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            log.warning("BYE not sent to %s: %s", self.endpoint, exc)

    def _close(self) -> None:
        """Close the socket (if configure got as far), giving queued frames up to
        LINGER_MS to leave, then the link's own context."""
        if self.socket is not None:
            self.socket.close()
            self.socket = None
        if self.owns_context and self.context is not None:
            self.context.term()
            self.context = None
