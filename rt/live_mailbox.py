"""The live-parameter mailbox: how a new controller ``params`` array and new command
limits reach a running loop at a tick boundary, without a lock.

One float64 array, ``live``: a header (LV_*) then the pending payload: the law's
params (``n_params`` values) followed by the limits (2 x nact, row-major: max |u|,
then max slew; controllers.limits.L_MAX, L_SLEW). The writer (live.params, one change in
flight at a time) fills the payload, then publishes it by storing a new sequence number
in ``live[LV_SEQ]`` (release); the loop, once per tick before the controller runs,
sees a sequence number it has not acknowledged (acquire), copies the payload into its
own ``params`` and ``limits`` and acknowledges with the tick and its plant time. The
copy is a few dozen float stores: no allocation, no wait.
"""
import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.timing.clock import atomic_load, atomic_store

LV_SEQ, LV_ACK_SEQ, LV_ACK_TICK, LV_ACK_TIME = range(4)
LV_HEADER = 4


def new_mailbox(params: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """A mailbox for a law with these params and limits (controllers.limits: its first two
    rows, the command's, are what a live change carries), nothing pending."""
    return np.zeros(LV_HEADER + len(params) + limits.size)


@kernel
def apply_pending(live, params, limits, tick, t):
    """At a tick boundary: take a pending change into ``params`` and ``limits`` and
    acknowledge it with (tick, t). Returns True if a change was taken."""
    seq = atomic_load(live, LV_SEQ)
    if seq == live[LV_ACK_SEQ]:
        return False
    n = params.shape[0]
    for i in range(n):
        params[i] = live[LV_HEADER + i]
    nact = limits.shape[1]
    for r in range(2):
        for j in range(nact):
            limits[r, j] = live[LV_HEADER + n + r * nact + j]
    live[LV_ACK_TICK] = tick
    live[LV_ACK_TIME] = t
    atomic_store(live, LV_ACK_SEQ, seq)
    return True


@kernel
def post_change(live, params, limits, seq):
    """Writer side: fill the payload with ``params`` and ``limits``, then publish it as
    change number ``seq`` (release: the loop sees the payload before the number)."""
    n = params.shape[0]
    for i in range(n):
        live[LV_HEADER + i] = params[i]
    nact = limits.shape[1]
    for r in range(2):
        for j in range(nact):
            live[LV_HEADER + n + r * nact + j] = limits[r, j]
    atomic_store(live, LV_SEQ, seq)
