"""Exact stick-slip of joint friction at step boundaries (plant.friction, docs/FRICTION.md).

A smoothed sign(qd) of small width is stiff (slope coulomb/width against a reflected
inertia of ~0.1 kg m^2: time constants far below a 1 ms RK4 step), so Coulomb friction
is not integrated through zero: at each step boundary, before the step,

1. every joint that can stick (a Coulomb or breakaway level), is HEALTHY (sliding) and
   is slower than ``stick_velocity`` or would stop within the step (qd (qd + h qdd) <= 0
   with qdd from the derivative at the boundary) becomes a candidate: STUCK, with qd = 0.
   Looking ahead matters: RK4 carried through qd = 0 finds a fixed point of the switching
   law (stages of alternating sign that cancel) and slides on at a constant small rate;
   stopping the joint up to one step early costs at most h |qd| <= h^2 |qdd| of travel;
2. the jam machinery's restructured solve (plant.jam: E_k, the held joints' qdd = 0)
   gives the accelerations of the others, and each held joint's holding torque
   tau_k = (M qdd + bias - force)_k, the torque friction must supply to keep it still;
3. while some held joint needs more than its breakaway ``static``, the one with the
   largest ratio |tau_k| / static_k is released (HEALTHY, its rate restored) and the
   solve repeats (at most nq times): what remains held holds with |tau_k| <= static_k;
4. the held joints get qd = 0 exactly, as a plastic lock: the free (HEALTHY) joints keep
   their generalised momenta, M_aa qd_a' = (M qd)_a, so they take up what the stopped
   joints carried (qd_a' = qd_a + M_aa^-1 M_aK qd_K), and the lock dissipates
   1/2 qd_K^T (M_KK - M_Ka M_aa^-1 M_aK) qd_K, second order in h. Zeroing qd_K alone
   would change the energy by about qd_K (M qd)_K: first order, and seen in the books.

Within the step a STUCK joint is a blocked one (qdd = 0), so a joint held by friction
stays exactly still; a jammed or blocked joint is never touched (the jam wins). A released
joint starts from qd = 0, where the sliding law gives no Coulomb term for the first
evaluation of its first step. Only chains (serial arms, a user's chain, a URDF arm)
carry a friction block.
"""
from hilrig.jit.kernel import kernel
from hilrig.plant.dynamics import derivative
from hilrig.plant.friction import FR_STATIC, can_stick, row
from hilrig.plant.linalg import cholesky_solve
from hilrig.plant.layout import H_FRICTION, H_NQ, HEALTHY, JAM_PHASE, STUCK


@kernel
def stick_slip(p, jams, t, x, u, h, work, stages, mech=None):
    """Decide at time t (s, the start of a step of h s) which joints friction holds
    (module docstring); x's held rates are set to 0. ``work``, ``stages``: the plant's
    scratch (stages[0] and stages[4] are overwritten; both are free between steps)."""
    nq = int(p[H_NQ])
    if int(p[H_FRICTION]) == 0:
        return
    v_stick = p[int(p[H_FRICTION])]
    dx = stages[0]
    sliding = False
    for k in range(nq):
        if can_stick(p, row(p, k)) and jams[k, JAM_PHASE] == HEALTHY:
            sliding = True
    looked = sliding and derivative(p, jams, t, x, u, dx, work, mech) > 0.0
    held = False
    for k in range(nq):
        if not can_stick(p, row(p, k)):
            continue
        phase = jams[k, JAM_PHASE]
        if phase == STUCK:
            held = True
        elif phase == HEALTHY:
            v = x[nq + k]
            if abs(v) <= v_stick or (looked and v * (v + h * dx[nq + k]) <= 0.0):
                jams[k, JAM_PHASE] = STUCK
                held = True
    if held:
        xs = stages[4]
        for i in range(x.shape[0]):
            xs[i] = x[i]
        for k in range(nq):
            if jams[k, JAM_PHASE] == STUCK:
                xs[nq + k] = 0.0
        mass = work[:nq, :nq]
        bias = work[nq, :nq]
        force = work[nq + 1, :nq]
        for _ in range(nq):
            if not derivative(p, jams, t, xs, u, dx, work, mech) > 0.0:
                break       # an invalid state: the step that follows reports it
            worst = -1
            worst_ratio = 1.0
            for k in range(nq):
                if jams[k, JAM_PHASE] == STUCK:
                    tau = bias[k] - force[k]
                    for j in range(nq):
                        tau += mass[k, j] * dx[nq + j]
                    ratio = abs(tau) / p[row(p, k) + FR_STATIC]
                    if ratio > worst_ratio:
                        worst = k
                        worst_ratio = ratio
            if worst < 0:
                break
            jams[worst, JAM_PHASE] = HEALTHY
            xs[nq + worst] = x[nq + worst]
        lock(jams, x, nq, mass, work[nq + 2:])


@kernel
def lock(jams, x, nq, mass, scratch):
    """Stop the STUCK joints (qd_K = 0) keeping the free joints' momenta (module
    docstring, step 4); ``mass``: M at x (kg m^2, with the drives' rotor inertia);
    ``scratch``: 2-D, at least nq + 2 rows of nq."""
    reduced = scratch[:nq, :nq]
    free = scratch[nq, :nq]
    rhs = scratch[nq + 1, :nq]
    moving = False
    for k in range(nq):
        if jams[k, JAM_PHASE] == STUCK and x[nq + k] != 0.0:
            moving = True
    if moving:
        nfree = 0
        for k in range(nq):
            if jams[k, JAM_PHASE] == HEALTHY:
                free[nfree] = k
                nfree += 1
        for a in range(nfree):
            i = int(free[a])
            r = 0.0
            for k in range(nq):
                if jams[k, JAM_PHASE] == STUCK:
                    r += mass[i, k] * x[nq + k]
            rhs[a] = r
            for b in range(nfree):
                reduced[a, b] = mass[i, int(free[b])]
        if nfree == 0 or cholesky_solve(reduced, rhs, nfree) > 0.0:
            for a in range(nfree):
                x[nq + int(free[a])] += rhs[a]
    for k in range(nq):
        if jams[k, JAM_PHASE] == STUCK:
            x[nq + k] = 0.0
