"""Telemetry of the plant behind emulated drives (``hil emulate --log`` for CAN and serial).

One row per plant step, in the layout of a real-time run (telemetry.recorder.run_groups:
t, q, qd, the plant input u, the motor currents i, energy, ...; the timing columns are
zero, the drives are not ticked by a clock of their own), events (``stop`` with its
reason), and the summary at ``close``. ``hil log export`` and ``hil plot`` read it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from hilrig.drivers.inprocess import PlantLink
from hilrig.plant.factory import plant_model
from hilrig.schema import Config
from hilrig.telemetry.derived import Diagnostics
from hilrig.telemetry.recorder import Telemetry, run_groups
from hilrig.telemetry.rows import fill_row, publish_row, row_columns
from hilrig.timing.signals import deferred_signals


class PlantLog:
    """Rows of the plant of ``link`` (a PlantLink) written to ``path`` (.mcap).

    Call ``record(u, current)`` just before each plant step with the input about to be
    applied (V or N m per axis) and the motor currents (A), ``close(reason)`` at the end
    (idempotent; it flushes everything).
    """

    def __init__(self, cfg: Config, path: str | Path, link: PlantLink):
        plant = link.plant
        self.plant = plant
        groups = run_groups(plant_model(cfg.plant.model).diagnostics, plant.nq, link.n_axes,
                            cfg.plant.drive)
        self.telemetry = Telemetry(path, groups, cfg.to_dict(),
                                   capacity=max(4096, int(4 / cfg.sim.dt)))
        self.telemetry.derive = Diagnostics(cfg, self.telemetry.columns)
        self.cols = row_columns(self.telemetry.columns)
        self.timing = np.zeros(5)
        self.steps = 0

    def record(self, u: np.ndarray, current: np.ndarray) -> None:
        tel, p = self.telemetry, self.plant
        fill_row(tel.ring, tel.head, self.cols, self.steps, p.t, p.x, p.nq, u, current)
        publish_row(tel.ring, tel.head, self.cols, self.timing)
        self.steps += 1

    def event(self, kind: str, **fields) -> None:
        self.telemetry.event(kind, **fields)

    def close(self, reason: str) -> None:
        self.telemetry.event("stop", reason=reason, tick=self.steps)
        with deferred_signals():
            self.telemetry.close({"reason": reason, "ticks": self.steps})
