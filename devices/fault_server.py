"""`hil fault` for the emulated drives: FAULT frames (drivers.wire) on a ZeroMQ endpoint.

The ZeroMQ plant server (devices.zmq_plant) takes FAULT frames on its own socket. The
emulated CiA 402 and packet-serial drives talk CAN or serial to the controller, so
``hil emulate --bind ENDPOINT`` with ``link.type`` canopen or serial starts a
``FaultServer`` beside them: a ROUTER bound as the emulator's is (drivers.endpoint:
owner-only ipc, CURVE over tcp, loopback by default), served by its own thread, that
takes the link faults the drives take (devices.link_faults.KINDS) through their
thread-safe ``inject`` and answers each FAULT with a FAULT_ACK naming the drives' tick
(SYNC or serial step) at which the fault started, or the reason it was refused
(drivers.wire.FAULT_REFUSALS). Frames are decoded and checked as the emulator checks
them; nothing is unpickled.
"""
from __future__ import annotations

import logging
import threading
import time

import zmq
from hilrig.devices.link_faults import PARAMETERS, link_kinds_mask
from hilrig.drivers import endpoint as endpoints
from hilrig.drivers.wire import (
    ERROR_TEXT,
    FAULT_VALUES,
    REFUSED_JOINT,
    REFUSED_KIND,
    REFUSED_PARAM,
    MessageType,
    WireError,
    decode,
    decode_fault,
    encode,
)
from hilrig.errors import ConfigError

log = logging.getLogger("hil.emulator")

START_WAIT = 1.0      # s: how long an answer waits for the drives' next tick to take the fault
POLL = 0.1            # s: the serving thread's poll, so that close() is prompt


class FaultServer:
    """FAULT frames for ``device`` (an EmulatedDrives or RoboClawEmulator: ``inject`` and
    ``link_faults``, whose ``n_joints`` drives a fault may name; 0: all) on ``endpoint``.
    ConfigError (one line) for an endpoint it cannot bind."""

    def __init__(self, device, endpoint: str):
        self.device, self.n_joints = device, device.link_faults.n_joints
        self.endpoint = endpoints.expand(endpoint)
        self.socket = zmq.Context.instance().socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        endpoints.bind(self.socket, self.endpoint, "emulator")
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="hil-fault-server",
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving and release the endpoint."""
        self._stop.set()
        self.thread.join(10)
        endpoints.close(self.socket, self.endpoint)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.socket.poll(int(POLL * 1000)):
                continue
            parts = self.socket.recv_multipart()
            if len(parts) != 2:
                continue
            peer, frame = parts
            try:
                _, _, _, values = decode(frame, {MessageType.FAULT: FAULT_VALUES})
            except WireError as exc:
                log.warning("rejected a frame from peer %s: %s", peer.hex(), exc)
                self._send(peer, MessageType.ERROR, [exc.code])
                continue
            self._send(peer, MessageType.FAULT_ACK, self._fault(peer, values))

    def _send(self, peer: bytes, kind: MessageType, values) -> None:
        try:
            self.socket.send_multipart([peer, encode(kind, 0, 0.0, values)], zmq.NOBLOCK)
        except zmq.Again:
            log.warning("peer %s not keeping up: dropped a %s", peer.hex(), kind.name)

    def _fault(self, peer: bytes, values) -> list:
        """The FAULT_ACK's values for a FAULT (drivers.wire): the fault injected and its
        start awaited (tick -1: not started within START_WAIT, the drives not stepping:
        it starts at their next tick), or the reason it was refused."""
        from hilrig.plant.faults import NAMES

        code, joint = int(values[0]), int(values[1])
        kinds = self.device.link_faults.kinds
        window, status, detail = None, 0, ""
        try:
            code, joint, duration, _, given = decode_fault(values)
            name = NAMES.get(code)
            if name not in kinds:
                status, detail = REFUSED_KIND, (f"{name or code}: the emulated drives take the "
                                                f"link faults {', '.join(kinds)}")
            elif not 0 <= joint <= self.n_joints:
                status, detail = REFUSED_JOINT, (f"joint {joint}: 0 (every drive) or "
                                                 f"1..{self.n_joints}")
            else:
                params = {k: v for k, v in zip(PARAMETERS[name], given) if v is not None}
                window = self.device.inject(name, params, duration, joint)
        except WireError as exc:
            status, detail = exc.code, exc.detail
        except ConfigError as exc:
            status, detail = REFUSED_PARAM, str(exc)
        if status:
            log.warning("rejected a frame from peer %s: fault refused: %s", peer.hex(),
                        detail or ERROR_TEXT.get(status, status))
            return [status, 0, 0.0, code, joint, self.n_joints, link_kinds_mask(kinds)]
        deadline = time.monotonic() + START_WAIT
        while not window.started and time.monotonic() < deadline:
            time.sleep(0.001)
        tick = window.tick if window.started else -1
        return [0, tick, window.t1 if window.started else 0.0, code, joint, self.n_joints,
                link_kinds_mask(kinds)]
