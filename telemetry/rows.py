"""Telemetry rows as the compiled loops write them: one float64 row per tick in a ring.

A loop fills a row in place (``fill_row``: t, tick, q, qd, u, i, q_meas, qd_meas), adds
its five
timing columns and publishes it (``publish_row``: the row becomes visible to the
writer thread, telemetry.recorder, when ``head`` advances). ``row_columns``
tells a loop where each group starts in a row of a given layout. A loop without a
deadline checks ``ring_full`` before a row and waits while it is (the writer has not
taken the row that the next one would overwrite).
"""
import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.timing.clock import atomic_load, atomic_store

# cols: where each group starts in a telemetry row
COL_Q, COL_QD, COL_U, COL_I, COL_TICK, COL_TIMING, COL_SEEN = range(7)


def row_columns(columns: dict) -> np.ndarray:
    """Start columns of q, qd, u, i (-1: none), tick, lateness and q_meas (-1: none; qd_meas
    follows it) in a telemetry row.

    ``columns``: telemetry.recorder.Telemetry.columns of a ``run_groups`` layout; the
    five timing groups (lateness, compute_read, compute_control, compute_write,
    compute_tick, all s) must be adjacent, in that order.
    """
    def start(name):
        c = columns.get(name, -1)
        return c.start if isinstance(c, slice) else c
    cols = np.array([start("q"), start("qd"), start("u"), start("i"), start("tick"),
                     start("lateness"), start("q_meas")], dtype=np.int64)
    names = ("lateness", "compute_read", "compute_control", "compute_write", "compute_tick")
    if [start(n) for n in names] != list(range(cols[COL_TIMING], cols[COL_TIMING] + 5)):
        raise ValueError(f"telemetry layout: {names} must be adjacent, in this order")
    return cols



@kernel
def fill_row(ring, head, cols, tick, t, x, nq, held, cur, meas):
    """Write t, tick, q, qd, u, i and what the controller saw (q_meas, qd_meas: the
    positions and rates of the measurement buffer ``meas``, drivers.link.Measurement)
    into the next row (not yet published)."""
    row = ring[head[0] % ring.shape[0]]
    row[0] = t
    row[cols[COL_TICK]] = tick
    for i in range(nq):
        row[cols[COL_Q] + i] = x[i]
        row[cols[COL_QD] + i] = x[nq + i]
    nact = held.shape[0]
    for j in range(nact):
        row[cols[COL_U] + j] = held[j]
        if cols[COL_I] >= 0:
            row[cols[COL_I] + j] = cur[j]
        if cols[COL_SEEN] >= 0:
            row[cols[COL_SEEN] + j] = meas[1 + j]
            row[cols[COL_SEEN] + nact + j] = meas[1 + nact + j]


@kernel
def publish_row(ring, head, cols, timing):
    """Write the 5 timing columns (s) of the next row and publish it by advancing head."""
    slot = head[0] % ring.shape[0]
    for k in range(5):
        ring[slot, cols[COL_TIMING] + k] = timing[k]
    atomic_store(head, 0, head[0] + 1)


@kernel
def ring_full(ring, head):
    """True while the ring has no room for the next row (``head``:
    telemetry.recorder.Telemetry.head, [rows published, rows taken]).

    One slot stays spare: the writer counts a row lost once the loop may be writing
    over it (head = its index + capacity), so a loop that waits stops one row short.
    """
    return head[0] - atomic_load(head, 1) >= ring.shape[0] - 1
