"""A linearly implicit fixed step for stiff chains: the two-stage Rosenbrock W-method ROS2.

For a plant whose springs and dampers are stiff (a flexible link's bending modes,
plant.flex_rp.robot), explicit RK4 at a 1 ms tick is unstable; this step is L-stable and of
second order, with one linear solve of the chain's size per stage and no iteration, so
it costs the same on every tick (what a real-time loop needs).

ROS2 (Verwer, Spee, Blom and Hundsdorfer 1999) for y' = f(y), y = [q, v]:

    (I - g h A) k1 = f(y_n)
    (I - g h A) k2 = f(y_n + h k1) - 2 k1
    y_n+1 = y_n + 3/2 h k1 + 1/2 h k2,           g = 1 + 1/sqrt(2)

It is of order two for any matrix A (a W-method) and L-stable when A is f's Jacobian.
Here A = [[0, I], [-P Kj, -P Dj]], with Kj = -dG/dq and Dj = -dG/dv the derivatives of
the generalised force G = force - bias (drives included; one-sided finite differences,
so any chain of hilrig or of a user takes it) and P = E M_a^-1 E^T, M at y_n
restructured for jammed joints (plant.jam: a jammed coordinate's acceleration is
prescribed).

The lagged Jacobian. Each step refreshes only ``columns`` (default JACOBIAN_COLUMNS = 1)
of Kj and Dj's 2 nq columns by differences at y_n, in turn, and keeps the others from
earlier steps; the first step of a fresh ``work`` computes all of them, and ``columns``
>= 2 nq refreshes all on every step (the formulation before the lag). A step then costs
three evaluations of the mechanism (y_n, one column, stage 2) instead of 2 nq + 2, the
same on every tick. What this relies on:
- order: a step's Taylor expansion matches the exact flow to h^2 whatever A is (a
  W-method, Verwer et al. 1999; test_flex_feedforward.py expands it with sympy), so the
  lagged step stays of second order (test_rosenbrock_is_second_order runs it);
- stability: L-stability needs A close to J on the stiff modes. M (hence P) is exact at
  every step; Kj and Dj are at most 2 nq steps old. For a flexible link the stiff part,
  the elastic stiffness and its Rayleigh damping, is constant (linear in the elastic
  coordinates, plant.flex_rp.robot), so the lag touches only the slow, state-dependent terms
  (the joints' coupling and the velocity terms). A chain whose stiff forces change fast
  with the state would want ``columns`` = 2 nq (a kernel argument; no config key).
Eliminating k_q = r_q + g h k_v, each stage solves one nq x nq system

    (M + g h Dj + g^2 h^2 Kj) k_v = M r_v - g h Kj r_q     (free rows)
    k_v = r_v                                             (jammed rows)

where M r_v = G for the first stage, so only the second stage needs the accelerations
(one Cholesky solve, plant.jam.restructured_accel). The stage matrix is not symmetric
(the velocity terms), so it is factored by LU with partial pivoting.

Scratch: ``work`` rows [work_rows(nq) - 2 nq, work_rows(nq)) hold Kj, Dj and the stage
matrix side by side and a copy of M (plant.layout.work_shape reserves them), and beside
that copy the lag's cursor (1 + the next column to refresh; 0 in a fresh ``work``: none
computed yet). Kj, Dj and the cursor carry over from step to step; ``stages`` (5, nx)
the stage vectors.
"""
import math

import numpy as np
from hilrig.plant import jam, motor, serial_arm
from hilrig.plant.dynamics import chain_mechanism
from hilrig.plant.family import compiled
from hilrig.jit.kernel import kernel
from hilrig.plant.layout import (
    BLOCKED,
    H_MODEL,
    H_NQ,
    HEALTHY,
    JAM_PHASE,
    JAM_QDD,
    JAMMING,
    MODEL_CHAIN,
    MODEL_SERIAL_ARM,
)

GAMMA = 1.0 + 1.0 / math.sqrt(2.0)
FD_STEP = 1e-7     # relative perturbation of the finite-difference Jacobian (absolute below 1)
JACOBIAN_COLUMNS = 1   # Jacobian columns refreshed per step (the lagged Jacobian, above)


@kernel
def supports(p):
    """True for the plants this step serves: serial arms and chains (not the 3RRR)."""
    model = int(p[H_MODEL])
    return model == MODEL_SERIAL_ARM or model == MODEL_CHAIN


@kernel
def generalised_force(p, jams, x, u, work, g, mech):
    """G = force - bias at the state x (drives included) into g; M into work[:nq, :nq].
    Returns False where the mechanism gives NaN."""
    nq = int(p[H_NQ])
    mass = work[:nq, :nq]
    bias = work[nq, :nq]
    force = work[nq + 1, :nq]
    q = x[:nq]
    qd = x[nq:2 * nq]
    if int(p[H_MODEL]) == MODEL_SERIAL_ARM:
        compiled(mech, MODEL_SERIAL_ARM, serial_arm.mass_and_bias, None, p, q, qd, mass, bias,
                 work[nq + 2:])
    elif np.isnan(compiled(mech, MODEL_CHAIN, chain_mechanism, np.nan, p, q, qd, mass, bias,
                           mech)):
        return False
    motor.apply_drive(p, jams, x, u, mass, bias, force, g)   # no current states: g untouched
    for i in range(nq):
        g[i] = force[i] - bias[i]
    return True


@kernel
def lu_factor(a, perm, n):
    """LU with partial pivoting of a's n x n block in place; perm[i] the row taken at
    step i. Returns the smallest |pivot| (0: singular)."""
    smallest = np.inf
    for k in range(n):
        best = k
        big = abs(a[k, k])
        for i in range(k + 1, n):
            if abs(a[i, k]) > big:
                big = abs(a[i, k])
                best = i
        perm[k] = best
        if best != k:
            for j in range(n):
                tmp = a[k, j]
                a[k, j] = a[best, j]
                a[best, j] = tmp
        if big < smallest:
            smallest = big
        if big == 0.0:
            return 0.0
        inv = 1.0 / a[k, k]
        for i in range(k + 1, n):
            f = a[i, k] * inv
            a[i, k] = f
            if f != 0.0:
                for j in range(k + 1, n):
                    a[i, j] -= f * a[k, j]
    return smallest


@kernel
def lu_solve(a, perm, b, n):
    """Solve A x = b in place with lu_factor's factors."""
    for k in range(n):
        r = int(perm[k])
        if r != k:
            tmp = b[k]
            b[k] = b[r]
            b[r] = tmp
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= a[i, k] * b[k]
        b[i] = s
    for i in range(n - 1, -1, -1):
        s = b[i]
        for k in range(i + 1, n):
            s -= a[i, k] * b[k]
        b[i] = s / a[i, i]


@kernel
def _prescribed(jams, k):
    """The prescribed acceleration of a jammed coordinate k."""
    if jams[k, JAM_PHASE] == JAMMING:
        return jams[k, JAM_QDD]
    return 0.0


@kernel
def ros2(p, jams, x, u, h, work, stages, mech=None, columns=JACOBIAN_COLUMNS):
    """One ROS2 step of h seconds from x in place (module docstring), refreshing
    ``columns`` columns of the lagged Jacobian (>= 2 nq: all). Returns the health
    figure (the smallest Cholesky pivot of the stage-2 mass matrix, as
    plant.dynamics.derivative; <= 0: invalid)."""
    nq = int(p[H_NQ])
    r0 = work.shape[0] - 2 * nq
    kj = work[r0:r0 + nq, 0:nq]
    dj = work[r0:r0 + nq, nq:2 * nq]
    w = work[r0:r0 + nq, 2 * nq:3 * nq]
    m0 = work[r0 + nq:r0 + 2 * nq, 0:nq]
    mass = work[:nq, :nq]
    k1 = stages[0]
    k2 = stages[1]
    ys = stages[2]
    g0 = stages[3, :nq]
    g1 = stages[3, nq:2 * nq]
    rhs = stages[4, :nq]
    perm = stages[4, nq:2 * nq]
    # G and M at y_n, then some columns of the Jacobian of G by one-sided differences
    for j in range(2 * nq):
        ys[j] = x[j]
    if not generalised_force(p, jams, ys, u, work, g0, mech):
        return -1.0
    for i in range(nq):
        for j in range(nq):
            m0[i, j] = mass[i, j]
    first = int(work[r0 + nq, nq]) - 1
    count = columns
    if first < 0 or count >= 2 * nq:
        first = 0
        count = 2 * nq
    for c in range(count):
        j = (first + c) % (2 * nq)
        step = FD_STEP * max(1.0, abs(x[j]))
        ys[j] = x[j] + step
        if not generalised_force(p, jams, ys, u, work, g1, mech):
            return -1.0
        ys[j] = x[j]
        target = kj if j < nq else dj
        col = j if j < nq else j - nq
        for i in range(nq):
            target[i, col] = -(g1[i] - g0[i]) / step
    work[r0 + nq, nq] = (first + count) % (2 * nq) + 1
    gh = GAMMA * h
    for i in range(nq):
        for j in range(nq):
            w[i, j] = m0[i, j] + gh * dj[i, j] + gh * gh * kj[i, j]
    for k in range(nq):
        if jams[k, JAM_PHASE] != HEALTHY:
            for j in range(nq):
                w[k, j] = 0.0
            w[k, k] = 1.0
    if lu_factor(w, perm, nq) == 0.0:
        return -1.0
    # stage 1: r = f(y_n), M r_v = G
    for i in range(nq):
        s = g0[i]
        for j in range(nq):
            s -= gh * kj[i, j] * x[nq + j]
        rhs[i] = s
    for k in range(nq):
        if jams[k, JAM_PHASE] != HEALTHY:
            rhs[k] = _prescribed(jams, k)
    lu_solve(w, perm, rhs, nq)
    for i in range(nq):
        k1[nq + i] = rhs[i]
        k1[i] = x[nq + i] + gh * rhs[i]
    # stage 2: r = f(y_n + h k1) - 2 k1
    for i in range(2 * nq):
        ys[i] = x[i] + h * k1[i]
    for k in range(nq):
        if jams[k, JAM_PHASE] == BLOCKED:
            ys[nq + k] = 0.0
    if not generalised_force(p, jams, ys, u, work, g1, mech):
        return -1.0
    accel = k2[nq:2 * nq]
    bias = work[nq, :nq]
    force = work[nq + 1, :nq]
    for i in range(nq):
        bias[i] = -g1[i]       # M accel = force - bias = G
        force[i] = 0.0
    health = jam.restructured_accel(mass, bias, force, jams, accel, work[nq + 2:])
    if not health > 0.0:
        return health
    for i in range(nq):
        accel[i] -= 2.0 * k1[nq + i]              # r_v
        k2[i] = ys[nq + i] - 2.0 * k1[i]          # r_q
    for i in range(nq):
        s = 0.0
        for j in range(nq):
            s += m0[i, j] * accel[j] - gh * kj[i, j] * k2[j]
        rhs[i] = s
    for k in range(nq):
        if jams[k, JAM_PHASE] != HEALTHY:
            rhs[k] = accel[k]
    lu_solve(w, perm, rhs, nq)
    for i in range(nq):
        k2[nq + i] = rhs[i]
        k2[i] += gh * rhs[i]
    for i in range(2 * nq):
        x[i] += h * (1.5 * k1[i] + 0.5 * k2[i])
    for k in range(nq):
        if jams[k, JAM_PHASE] == BLOCKED:
            x[nq + k] = 0.0
    return health
