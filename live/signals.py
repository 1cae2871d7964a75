"""What the live view and the terminal view show of a block of telemetry rows: the
rows' own groups, and what the loop does not record, computed off the critical path:
the controller's reference r(t) and r'(t) and the tracking error r - q (built-in PD and
feed-forward laws, actuated joints, rad), and the model's diagnostics (3RRR residual
and determinants; serial arm energy and centre of mass) when the layout has them.
"""
from __future__ import annotations

import numpy as np
from hilrig.controllers.law import FEEDFORWARD, PD
from hilrig.controllers.layout import C_KIND, C_REF
from hilrig.controllers.reference import reference
from hilrig.jit.kernel import kernel
from hilrig.schema import Config
from hilrig.telemetry.derived import Diagnostics


@kernel
def reference_rows(kind, ts, ctrl, work, r, rd):
    """r(t) and r'(t) (rad, rad/s) of the reference ``kind`` at the times ts (s)."""
    for k in range(ts.shape[0]):
        reference(kind, ts[k], ctrl, work)
        for j in range(r.shape[1]):
            r[k, j] = work[0, j]
            rd[k, j] = work[1, j]


class RowSignals:
    """Signals of blocks of rows of one run's telemetry layout.

    ``params``: the law's live params array (read, never written), or None. The
    reference is computed from its current values, so a live change shows from the
    block after it.
    """

    def __init__(self, cfg: Config, columns: dict, params: np.ndarray | None, nact: int):
        self.columns = columns
        self.nact = nact
        self.params = params
        builtin = cfg.controller.law is None and params is not None
        self.has_reference = builtin and int(params[C_KIND]) in (PD, FEEDFORWARD)
        self.work = np.zeros((3, nact))
        self.diagnostics = None
        if "residual" in columns or "energy" in columns:
            self.diagnostics = Diagnostics(cfg, columns)
        if self.has_reference:    # compile or load before the first block
            self.reference(np.zeros(1))

    def reference(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(r, r') at times t, each (len(t), nact)."""
        r, rd = np.zeros((len(t), self.nact)), np.zeros((len(t), self.nact))
        reference_rows(int(self.params[C_REF]), np.ascontiguousarray(t), self.params,
                       self.work, r, rd)
        return r, rd

    def block(self, rows: np.ndarray) -> dict:
        """Named arrays of a (n, width) block of rows (a copy: diagnostics are filled in)."""
        if self.diagnostics is not None:
            self.diagnostics(rows)
        out = {name: rows[:, col] for name, col in self.columns.items()}
        if self.has_reference:
            r, rd = self.reference(rows[:, self.columns["t"]])
            q = rows[:, self.columns["q"]][:, :self.nact]
            out["reference"], out["reference_rate"] = r, rd
            out["tracking_error"] = r - q
        return out
