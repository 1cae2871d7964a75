"""Command limits are on by default (issue 11, item 5) and the first tick waits for the
first measurement (item 8)."""
from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
import zmq
from hilrig.drivers.link import LinkError
from hilrig.drivers.registry import link_from_config
from hilrig.drivers.zmq_link import ZmqLink
from hilrig.drivers.wire import MessageType, decode, encode
from hilrig.rt.loop import LinkLoop
from hilrig.rt.session import Session
from hilrig.rt.sim import SimulationError, simulate

from conftest import config
from rt_helpers import EmulatorProcess, endpoint, read_complete

# a gain that would ask for ~1e12 V on the first tick (the arms start 0.4..1 rad away)
HUGE_GAIN = ("controller.kp=1e12", "sim.duration=0.05")


def test_a_huge_gain_is_clamped_at_the_supply_from_the_first_tick(tmp_path):
    """kp = 1e12 logged 8.9e46 V; with no safety key set the command is clamped at the
    drives' supply (emulator.supply_voltage = 48 V), in hil run and in hil sim alike."""
    cfg = config("rig_inprocess", *HUGE_GAIN, "controller.reference=hold")
    assert cfg.safety.max_command is None and cfg.plant.drive == "voltage"
    result = Session(cfg, tmp_path / "run.mcap", fast=True).run()
    u = read_complete(result.log)[0]["u"]
    assert np.abs(u).max() == 48.0
    assert np.all(np.abs(u[0]) == 48.0)              # the first command already
    sim_u = simulate(cfg).arrays["u"]
    assert np.abs(sim_u).max() == 48.0 and np.all(np.abs(sim_u[0]) == 48.0)


def test_torque_commands_are_clamped_at_the_drives_peak_torque(tmp_path):
    cfg = config("serial3_free", "controller.type=pd", "controller.kp=1e12",
                 "controller.target=[1.0, 1.0, 1.0]", "sim.duration=0.02",
                 "emulator.max_torque=250.0")
    u = simulate(cfg).arrays["u"]
    assert np.abs(u).max() == 250.0 and np.all(np.abs(u[0]) == 250.0)


def test_limits_widen_only_on_purpose(tmp_path, caplog):
    """A larger safety.max_command widens the clamp; inf removes it with a warning line."""
    wide = simulate(config("rrr3_pd", *HUGE_GAIN, "safety.max_command=100.0")).arrays["u"]
    assert np.abs(wide).max() == 100.0
    with caplog.at_level(logging.WARNING, logger="hil.safety"), \
            pytest.raises(SimulationError) as unclamped:      # 1e12 V: the plant blows up
        simulate(config("rrr3_pd", *HUGE_GAIN, "safety.max_command=inf"))
    assert np.abs(unclamped.value.arrays["u"][0]).max() > 1e9
    assert any("safety.max_command = inf: commands are not clamped" in r.message
               for r in caplog.records)


@pytest.mark.system
def test_the_emulator_holds_the_slew_limit_per_its_own_tick(tmp_path):
    """Commands that bunch up on the wire (five per tick, each 0.05 V above the last) moved
    the plant's input by the whole step at once: the emulator now moves it by at most
    safety.max_slew * sim.dt per tick of its own (50 V/s * 1 ms = 0.05 V)."""
    ep = endpoint(tmp_path)
    log = tmp_path / "emu.mcap"
    emu = EmulatorProcess("rig_zmq", ep, log, "--set", "safety.max_slew=50.0",
                          "--duration", "0.5")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(ep)
    try:
        sock.send(encode(MessageType.HELLO, 0, 0.0, [3]))
        assert sock.poll(10000)
        u, seq = 0.0, 0
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline and emu.proc.poll() is None:
            for _ in range(5):                      # a burst: five commands at once
                u = min(u + 0.05, 10.0)
                seq += 1
                sock.send(encode(MessageType.COMMAND, seq, 0.0, [u, -u, u]))
            time.sleep(0.004)
            while sock.poll(0):
                sock.recv()
    finally:
        sock.close()
        emu.stop()
    applied, events = read_complete(log)[:2]
    applied = applied["u"]
    # the safe state (zero input, once the commands stop) is a drive disable: at once
    commanded = np.any(applied[1:] != 0.0, axis=1)
    steps = np.abs(np.diff(applied, axis=0))[commanded]
    assert applied[:, 0].max() > 1.0                 # the input did rise
    assert steps.max() <= 0.05 + 1e-12, steps.max()
    # from the first command on, every tick carries one (the emulator's clock starts at
    # HELLO: on a busy machine a tick or two pass before the first COMMAND)
    first = int(np.argmax(commanded))
    assert commanded[first:].all() or any(e["kind"] == "safe_state" for e in events)


class SilentPlant:
    """A ZeroMQ peer that welcomes a controller (3 axes of volts, or of N m with
    ``voltage`` 0) and never sends a state: a link whose measurements never come."""

    def __init__(self, ep: str, voltage: float = 1.0):
        self.voltage = voltage
        self.socket = zmq.Context.instance().socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(ep)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            if self.socket.poll(10):
                peer, frame = self.socket.recv_multipart()
                kind, _, _, _ = decode(frame, {MessageType.HELLO: 1, MessageType.COMMAND: 3,
                                               MessageType.BYE: 0})
                if kind == MessageType.HELLO:
                    self.socket.send_multipart(
                        [peer, encode(MessageType.WELCOME, 0, 0.0, [0, 3, 0.001, self.voltage])])

    def close(self):
        self.stop.set()
        self.thread.join()
        self.socket.close(0)


def test_no_first_measurement_stops_with_its_own_timeout_and_names_the_link(tmp_path):
    """Before the first measurement the watchdog does not count: the run waits up to
    link.first_measurement_timeout, holding zero, then stops naming the link."""
    ep = endpoint(tmp_path)
    plant = SilentPlant(ep)
    try:
        cfg = config("rig_zmq", f"link.endpoint='{ep}'", "link.first_measurement_timeout=0.3",
                     "safety.watchdog_ticks=5", "sim.duration=5.0")
        started = time.monotonic()
        result = LinkLoop(cfg, link_from_config(cfg), tmp_path / "ctl.mcap").run()
        took = time.monotonic() - started
    finally:
        plant.close()
    assert result.status == "error"
    assert result.reason.startswith(f"no measurement from the zmq link at {ep} within "
                                    "link.first_measurement_timeout = 0.3 s"), result.reason
    assert 250 <= result.ticks <= 400                # ~0.3 s of 1 ms ticks, not 5
    arrays = read_complete(result.log)[0]
    assert np.all(arrays["u"] == 0.0)                # nothing but zero was ever written
    assert took < 3.0


def test_a_peer_saying_torque_does_not_move_the_controllers_unit_or_clamp(tmp_path):
    """A squatter's WELCOME saying "torque" made `hil control` of a voltage config take
    N m and move its default clamp from the supply's 48 V to the drives' 1000 N m. The
    config's unit holds: the link refuses the peer, naming both units."""
    ep = endpoint(tmp_path)
    plant = SilentPlant(ep, voltage=0.0)
    try:
        cfg = config("rig_zmq", f"link.endpoint='{ep}'")
        link = ZmqLink.from_config(cfg)
        with pytest.raises(LinkError, match=r"takes N m, this controller's config V "):
            link.open()
        assert link.command_unit == "V"
    finally:
        plant.close()
