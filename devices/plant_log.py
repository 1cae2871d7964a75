"""Telemetry of the plant behind emulated drives (``hil emulate --log`` for CAN and serial).

One row per plant step, in the layout of a real-time run (telemetry.recorder.run_groups:
t, q, qd, the plant input u, the motor currents i, energy, ...; the timing columns are
zero, the drives are not ticked by a clock of their own), events (``stop`` with its
reason), and the summary at ``close``. ``hil log export`` and ``hil plot`` read it.

Drives stepped by their controller's clock (SYNC, requests) never wait for the log's
writer: rows it lost are acted on as ``telemetry.on_overrun`` says (``lost``, polled by
the drives' serve loop) and named by ``close``. Drives in lockstep (no clock) wait for
room in the ring instead (``wait``) and lose none.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from hilrig.drivers.inprocess import PlantLink
from hilrig.plant.factory import plant_model
from hilrig.schema import Config
from hilrig.telemetry.derived import Diagnostics
from hilrig.telemetry.recorder import RowLoss, Telemetry, ring_capacity, run_groups
from hilrig.telemetry.rows import fill_row, publish_row, row_columns
from hilrig.telemetry.scene import attach as attach_scene
from hilrig.timing.sched import helper_priority
from hilrig.timing.signals import ignored_signals

log = logging.getLogger("hil.plant_log")


class PlantLog:
    """Rows of the plant of ``link`` (a PlantLink) written to ``path`` (.mcap).

    Call ``record(u, current)`` just before each plant step with the input about to be
    applied (V or N m per axis) and the motor currents (A), ``close(reason)`` at the end
    (idempotent; it flushes everything). ``wait``: the drives have no clock of their
    own (lockstep), so ``record`` waits for room in the ring rather than lose a row.
    """

    def __init__(self, cfg: Config, path: str | Path, link: PlantLink, wait: bool = False):
        plant = link.plant
        self.plant = plant
        self.wait = wait
        groups = run_groups(plant_model(cfg.plant.model).diagnostics, plant.nq, link.n_axes,
                            cfg.plant.drive, seen=False)
        self.telemetry = Telemetry(path, groups, cfg.to_dict(),
                                   capacity=ring_capacity(cfg.sim.dt, cfg.telemetry.ring_rows),
                                   priority=helper_priority(cfg.emulator.fifo_priority))
        self.telemetry.derive = Diagnostics(cfg, self.telemetry.columns)
        attach_scene(self.telemetry, cfg)               # the robot's 3D frames in the log
        self.row_loss = RowLoss(self.telemetry, cfg.telemetry.on_overrun, log)
        self.cols = row_columns(self.telemetry.columns)
        self.timing = np.zeros(5)
        self.steps = 0
        self.unseen = np.zeros(0)        # no q_meas columns: the drives' own reports
        self.loss: str | None = None     # after close: the rows lost, named (None: none)
        self._closed = False

    def record(self, u: np.ndarray, current: np.ndarray) -> None:
        tel, p = self.telemetry, self.plant
        if self.wait:
            tel.wait_for_room()
        fill_row(tel.ring, tel.head, self.cols, self.steps, p.t, p.x, p.nq, u, current,
                 self.unseen)
        publish_row(tel.ring, tel.head, self.cols, self.timing)
        self.steps += 1

    def lost(self) -> bool:
        """True once, when the log has lost rows and ``telemetry.on_overrun`` says "stop"
        (the caller stops the drives); with "warn", one line the first time."""
        return self.row_loss.check()

    def event(self, kind: str, **fields) -> None:
        self.telemetry.event(kind, **fields)

    def close(self, reason: str) -> str | None:
        """Finish the log; returns (and keeps in ``loss``) the reason naming the rows it
        lost, or None if it lost none (the drives' ``serve`` raises it). Idempotent."""
        if self._closed:
            return self.loss
        self._closed = True
        self.telemetry.event("stop", reason=reason, tick=self.steps)
        summary = {"reason": reason, "ticks": self.steps}
        if self.telemetry.failure is None:
            self.loss = self.row_loss.settle(reason)
        if self.loss is not None:
            summary.update(reason=self.loss, lost_rows=self.telemetry.lost_rows)
        with ignored_signals():
            self.telemetry.close(summary)
        return self.loss
