"""The flexible chain on the ground as a plant step of the loops (``METHOD_CONTACT``).

``plant.stepping.advance`` with ``method = METHOD_CONTACT`` takes one tick of h with
plant.flex_chain.integrators.advance_fixed (RK4 substeps ``substep_fine`` in or near
contact, ``substep_coarse`` in flight, modes switched at substep boundaries), so that the
real-time loop steps the chain *with* its ground contact, allocation-free, with the same
arithmetic as ``hil sim`` with ``sim.integrator = "rk4"``.

The contact state that lives from tick to tick is kept in the plant's params array
(plant.flex_chain.model appends ``contact_block`` to the chain's body when
``plant.contact = true``); the per-tick matrices are rows of the plant's ``work`` array.
Block layout (offsets from the block's start; the block's offset from the body's start is
the params array's last entry):

    [h_fine, h_coarse (s), modes (n + 1), vminus (n + 1, m/s), y (state_size(n)),
     s (flex_chain.scratch_size(n)), pt (4), force (2), counters (3), offset]

y = [z, zd, W_N, W_T, W_D, W_U] (plant.flex_chain.contact): the loop's x is copied into y[:2 nz]
before the tick and back after it; the work terms (J) accumulate over the run, so the
energy books E - E(0) = W_N + W_T - W_D + W_U can be read from the params array after a
run (``energy_books``). The block is mutated by every tick: a loop must not step a
plant with contact on scratch copies that share its params array (rt.realtime's
rehearsal is turned off for it).
"""
from __future__ import annotations

import numpy as np
from hilrig.plant.flex_chain.contact import WORK_TERMS, state_size
from hilrig.plant.flex_chain.integrators import advance_fixed
from hilrig.plant.flex_chain.chain import P_N, n_coordinates, scratch_size
from hilrig.jit.kernel import kernel
from hilrig.plant.layout import A_GAIN, A_OFFSET, A_ON, A_VISCOUS, H_BODY

METHOD_CONTACT = 3      # beside plant.integrators' METHOD_RK4, METHOD_EULER, METHOD_ROSENBROCK

B_FINE, B_COARSE, B_MODES = 0, 1, 2


def block_size(n: int) -> int:
    """Floats of the contact block of an n-link chain (offset entry included)."""
    return 2 + 2 * (n + 1) + state_size(n) + scratch_size(n) + 4 + 2 + 3 + 1


def contact_block(n: int, body_offset: int, h_fine: float, h_coarse: float) -> np.ndarray:
    """A fresh contact block (every point in flight, no work done) that starts
    ``body_offset`` floats after the body's start; it must end the params array."""
    block = np.zeros(block_size(n))
    block[B_FINE], block[B_COARSE] = h_fine, h_coarse
    block[-1] = body_offset
    return block


def energy_books(params: np.ndarray) -> np.ndarray:
    """[W_N, W_T, W_D, W_U] (J) accumulated by the contact ticks of a plant's params."""
    body = int(params[H_BODY])
    n = int(params[body + P_N])
    start = body + int(params[-1]) + B_MODES + 2 * (n + 1) + 2 * n_coordinates(n)
    return params[start:start + WORK_TERMS].copy()


@kernel
def contact_step(p, jams, t, x, u, h, work):
    """One tick of h from t (s) of the chain on the ground under the joint torques u
    (N m, held); x = [z, zd] in and out. Returns False if the state became invalid.

    The joints' actuator faults (``jams``' A_* columns, plant.actuator_faults: the chain
    on the ground is torque-driven) change the torques held over the tick, in row nz + 1
    of ``work``: tau_j = A_GAIN u_j + A_OFFSET - A_VISCOUS qd_j, qd_j the joint's rate at
    the tick's start (raised friction held over the tick, as the torques are)."""
    body = int(p[H_BODY])
    chain = p[body:]
    n = int(chain[P_N])
    nz = 2 + 2 * n
    ny = 2 * nz + WORK_TERMS
    c = body + int(p[p.shape[0] - 1])
    h_fine, h_coarse = p[c + B_FINE], p[c + B_COARSE]
    c += B_MODES
    modes = p[c:c + n + 1]
    c += n + 1
    vminus = p[c:c + n + 1]
    c += n + 1
    y = p[c:c + ny]
    c += ny
    ns = 6 * nz + 2 * nz * (n + 1) + 4 * (n + 1)
    s = p[c:c + ns]
    c += ns
    pt = p[c:c + 4]
    force = p[c + 4:c + 6]
    counters = p[c + 6:c + 9]
    mass = work[:nz, :nz]
    rhs = work[nz, :nz]
    kst = work[nz + 2:nz + 7, :ny]
    events = work[nz + 7:nz + 7, :3]        # no room: the loop logs states, not events
    tau = work[nz + 1, :u.shape[0]]
    for j in range(u.shape[0]):
        tau[j] = u[j]
        if jams[j, A_ON] != 0.0:
            tau[j] = tau[j] * jams[j, A_GAIN] + jams[j, A_OFFSET] - jams[j, A_VISCOUS] * x[nz + j]
    for a in range(2 * nz):
        y[a] = x[a]
    ok = advance_fixed(chain, y, modes, vminus, tau, t, h, h_fine, h_coarse, kst, mass, rhs, s,
                       pt, force, events, counters)
    for a in range(2 * nz):
        x[a] = y[a]
    return ok
