"""The emulator from a user's own Python loop: ``hilrig.connect(endpoint)``.

    import hilrig
    with hilrig.connect() as plant:              # `hil emulate` runs at the default endpoint
        for _ in range(1000):
            meas = plant.read()                  # t (s), pos (rad), vel (rad/s), current (A)
            plant.write(-5.0 * meas.pos)         # V or N m per axis (plant.command_unit)
        plant.jam(joint=2, duration=0.1)         # a live fault at the next tick boundary
        plant.estop()                            # safe state: zero input, no more writes

The client speaks the ZeroMQ wire format (docs/WIRE.md) through the same link that
``hil control`` uses (drivers.zmq_link) and the fault requests of ``hil fault``.
"""
from __future__ import annotations

import numpy as np
from hilrig.drivers import endpoint as endpoints
from hilrig.drivers.link import LinkError, LinkState, LinkTimeout, Measurement
from hilrig.drivers.zmq_link import ZmqLink
from hilrig.remote.fault import FaultAck, send_fault

DEFAULT_ENDPOINT = endpoints.EMULATOR     # ipc://$RUNTIME/emulator (drivers.endpoint)


class EmulatorClient:
    """A connection to a running ``hil emulate``, as its commanding controller.

    Attributes:
        n_axes: the plant's actuated joints (from the emulator).
        command_unit: "V" or "N m", what ``write`` takes.
        lockstep: True when the emulator steps once per command.
    """

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, timeout: float = 1.0,
                 takeover: bool = False):
        self.endpoint = endpoint
        self.timeout = timeout
        self._link = ZmqLink(endpoint, 0, timeout, takeover=takeover)
        self._link.open()
        self.n_axes = self._link.n_axes
        self.command_unit = self._link.command_unit
        self.lockstep = self._link.lockstep
        self._meas = Measurement(self.n_axes)

    def read(self) -> Measurement:
        """The newest measurement, waiting up to ``timeout`` s for a fresh one.

        Returns the client's one Measurement buffer (overwritten by the next read).
        Raises LinkTimeout when none arrives, LinkError when the emulator rejects us.
        """
        link = self._link
        while not link.read(self._meas):
            if not link.socket.poll(int(self.timeout * 1000)):
                raise LinkTimeout(f"no state from the emulator at {self.endpoint} within "
                                  f"{self.timeout} s")
        return self._meas

    def write(self, command) -> None:
        """Send one command per axis (``command_unit``); the emulator holds it (free mode)
        or steps once under it (lockstep)."""
        u = np.asarray(command, dtype=float).reshape(-1)
        if u.shape != (self.n_axes,):
            raise ValueError(f"command: expected {self.n_axes} values, got {u.size}")
        if not np.all(np.isfinite(u)):
            raise ValueError(f"command: not finite: {u}")
        if self._link.lifecycle is LinkState.STOPPED:
            raise LinkError("e-stopped: this client sends no more commands")
        self._link.write(u)

    def jam(self, joint: int, duration: float = 0.1) -> FaultAck:
        """Jam ``joint`` (1-based) over ``duration`` s at the emulator's next tick boundary."""
        return send_fault(self.endpoint, "jam", joint, duration, self.timeout)

    def clear(self, joint: int) -> FaultAck:
        """Make ``joint`` (1-based) healthy again from its current state."""
        return send_fault(self.endpoint, "clear", joint, 0.0, self.timeout)

    def estop(self) -> None:
        """Put the plant in its safe state (zero input) and refuse further writes."""
        self._link.safe_stop()

    def close(self) -> None:
        """E-stop, then release the connection. Idempotent."""
        self._link.safe_stop()
        self._link.close()

    def __enter__(self) -> "EmulatorClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(endpoint: str = DEFAULT_ENDPOINT, timeout: float = 1.0,
            takeover: bool = False) -> EmulatorClient:
    """Connect to the ``hil emulate`` serving ``endpoint`` (raises LinkTimeout if none does).

    While another controller is connected the emulator refuses (LinkError) unless
    ``takeover``: then this client commands the plant and the emulator logs the takeover.
    """
    return EmulatorClient(endpoint, timeout, takeover)
