"""Jammed joints (paper 000 §2): prescribed joint motion, equations restructured with E_k.

A joint k that starts to jam at t1 decelerates at the constant rate
qdd_k = -qd_k(t1) / dt until t2 = t1 + dt, then stays blocked (qd_k = qdd_k = 0).
With the set K of jammed joints and the structure matrix E (the identity's
columns of the free joints) and e_K (the columns of the jammed ones):

    M_a = E^T M E,   h_a = E^T (bias + M e_K qdd_K),   u_a = E^T force,
    qdd_a = M_a^{-1} (u_a - h_a),   qdd = E qdd_a + e_K qdd_K       (eqs. 3, 4)

The paper treats one joint; building E from all remaining columns handles any
number at once. Nothing is re-derived: M, bias and force come from the healthy
model. A jam is an event the model accepts at any step boundary.
"""
import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.plant.layout import BLOCKED, HEALTHY, JAM_PHASE, JAM_QDD, JAM_T_END, JAMMING
from hilrig.plant.linalg import chain_solve


@kernel
def restructured_accel(mass, bias, force, jams, qdd, scratch):
    """Joint accelerations (rad/s^2) of a chain with jammed joints, eqs. (3)-(4).

    ``mass`` (n x n, kg m^2), ``bias`` and ``force`` (n, N m) are the healthy
    model's terms; ``mass`` is overwritten. ``jams`` (n x 3) holds each joint's
    phase. ``scratch`` is 2-D with at least n + 2 rows and n columns. Returns
    the smallest Cholesky pivot of M_a (<= 0: M_a not positive definite; inf
    when no joint is free).
    """
    n = bias.shape[0]
    healthy = True
    for k in range(n):
        if jams[k, JAM_PHASE] != HEALTHY:
            healthy = False
    if healthy:  # E = I: solve M qdd = force - bias directly
        for i in range(n):
            qdd[i] = force[i] - bias[i]
        return chain_solve(mass, qdd, n)
    reduced = scratch[:n, :n]
    rhs = scratch[n + 1, :n]
    nfree = 0
    for k in range(n):
        phase = jams[k, JAM_PHASE]
        if phase == HEALTHY:
            nfree += 1
        elif phase == JAMMING:
            qdd[k] = jams[k, JAM_QDD]
        else:
            qdd[k] = 0.0
    a = 0
    for i in range(n):          # the free joints' rows of M_a and h_a, in order
        if jams[i, JAM_PHASE] != HEALTHY:
            continue
        r = force[i] - bias[i]
        b = 0
        for k in range(n):
            if jams[k, JAM_PHASE] != HEALTHY:
                r -= mass[i, k] * qdd[k]
            else:
                reduced[a, b] = mass[i, k]
                b += 1
        rhs[a] = r
        a += 1
    pivot = chain_solve(reduced, rhs, nfree) if nfree > 0 else np.inf
    a = 0
    for i in range(n):
        if jams[i, JAM_PHASE] == HEALTHY:
            qdd[i] = rhs[a]
            a += 1
    return pivot


# A jamming phase lasts 0 (blocked at once) or this long at least, and at most
# MAX_JAM_DURATION: shorter phases give decelerations -qd/dt that overflow (a duration
# of 1e-320 s made the plant NaN).
MIN_JAM_DURATION = 1e-6     # s
MAX_JAM_DURATION = 1e4      # s


def jam_duration_error(duration: float) -> str | None:
    """Why ``duration`` (s) cannot be a jamming phase, or None when it can."""
    if not (duration == 0.0 or MIN_JAM_DURATION <= duration <= MAX_JAM_DURATION):
        return (f"jam duration must be 0 (blocked at once) or {MIN_JAM_DURATION:g}.."
                f"{MAX_JAM_DURATION:g} s, got {duration!r}")
    return None


@kernel
def start_jam(jams, x, nq, joint, t, duration):
    """Start jamming ``joint`` (0-based) at time t (s) over ``duration`` (s).

    The deceleration is fixed from the joint's velocity now: qdd = -qd(t1)/dt.
    A zero duration blocks the joint at once.
    """
    if duration <= 0.0:
        jams[joint, JAM_PHASE] = BLOCKED
        jams[joint, JAM_T_END] = t
        jams[joint, JAM_QDD] = 0.0
        x[nq + joint] = 0.0
        return
    jams[joint, JAM_PHASE] = JAMMING
    jams[joint, JAM_T_END] = t + duration
    jams[joint, JAM_QDD] = -x[nq + joint] / duration


@kernel
def clear_jam(jams, joint):
    """Restore a healthy ``joint`` (0-based); it moves on from its current state."""
    jams[joint, JAM_PHASE] = HEALTHY
    jams[joint, JAM_T_END] = np.inf
    jams[joint, JAM_QDD] = 0.0


@kernel
def any_jamming(jams):
    """True while some joint is in its jamming phase (a step may then have to split)."""
    for k in range(jams.shape[0]):
        if jams[k, JAM_PHASE] == JAMMING:
            return True
    return False


@kernel
def next_jam_end(jams, t_from, t_to):
    """Earliest end of a jamming phase in (t_from, t_to], or t_to if none."""
    t_next = t_to
    for k in range(jams.shape[0]):
        if jams[k, JAM_PHASE] == JAMMING:
            te = jams[k, JAM_T_END]
            if t_from < te < t_next:
                t_next = te
    return t_next


@kernel
def finish_jams(jams, x, nq, t, tol):
    """Block every joint whose jamming phase ends at or before t (+tol): qd_k = 0 exactly."""
    for k in range(jams.shape[0]):
        if jams[k, JAM_PHASE] == JAMMING and jams[k, JAM_T_END] <= t + tol:
            jams[k, JAM_PHASE] = BLOCKED
            jams[k, JAM_QDD] = 0.0
            x[nq + k] = 0.0
