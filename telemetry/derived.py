"""Columns of a telemetry row derived from the state, computed by the writer thread.

The real-time loop records q and qd only; the model's diagnostics
(PlantModel.diagnostics: the 3RRR's residual max|f_i| in m², det Φθ, det Φx; a serial
arm's energy in J and centre of mass x_C, y_C in m) are computed here, per block of rows, off the
critical path, with the same kernel ``hil sim`` uses (plant.stepping.diagnostics).
"""
from __future__ import annotations

import numpy as np
from hilrig.plant.factory import plant_from_config, plant_model
from hilrig.plant.family import for_plant
from hilrig.jit.kernel import kernel
from hilrig.plant.stepping import diagnostics
from hilrig.schema import Config


@kernel
def _fill(p, rows, q_col, nq, diag_col, x, work, mech):
    for r in range(rows.shape[0]):
        for i in range(2 * nq):
            x[i] = rows[r, q_col + i]
        diagnostics(p, x, rows[r, diag_col:diag_col + 3], work, mech)


class Diagnostics:
    """``derive`` callable for telemetry.recorder.Telemetry with a ``run_groups`` layout."""

    def __init__(self, cfg: Config, columns: dict):
        plant = plant_from_config(cfg)
        self.params, self.work, self.mechanism = plant.params, plant.work.copy(), for_plant(plant)
        self.x = np.zeros(len(plant.x))
        self.nq = plant.nq
        self.q_col = columns["q"].start
        first = columns[plant_model(cfg.plant.model).diagnostics[0][0]]
        self.diag_col = first.start if isinstance(first, slice) else first
        if columns["qd"].start != self.q_col + self.nq:
            raise ValueError("telemetry layout: qd must follow q")
        self(np.zeros((1, max(self.diag_col + 3, columns["qd"].stop))))   # compile before use

    def __call__(self, rows: np.ndarray) -> None:
        _fill(self.params, rows, self.q_col, self.nq, self.diag_col, self.x, self.work,
              self.mechanism)
