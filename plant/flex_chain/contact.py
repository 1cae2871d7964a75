"""Ground contact of the flexible chain's end points (paper 004): the Hu-Guo normal force
(eq. 23), the Ambrosio friction law (eq. 24), and the chain's state derivative with them.

The ground is the line X_2 = 0. Each end point k (O_1 .. O_{n+1}) is either in flight
or in contact (``modes[k]`` 0 or 1); a point's mode changes only at an event (the
integrators in plant.flex_chain.integrators), never inside a step, so the derivative is
smooth within every step. In contact, with the indentation Delta = -X_2 (m) and its rate
Delta_dot = -dX_2/dt:

    F_N = K Delta^n [1 + 3 (1 - c_r) / (2 c_r) Delta_dot / Delta_dot(-)]     (Hu-Guo)

Delta_dot(-) (``vminus[k]``, m/s) is the indentation rate at the onset of this contact,
kept from the onset event (floored at P_MIN_IMPACT so that a grazing contact does not
divide by ~0). F_N is clamped at 0 (the ground does not pull) and Delta at 0 (a point
that has just risen above the ground before its separation event is located). Friction
opposes the sliding velocity V_T = dX_1/dt:

    F_T = -mu_k F_N sgn(V_T) * 1                          |V_T| >= v1
                             * (|V_T| - v0) / (v1 - v0)   v0 < |V_T| < v1
                             * 0                          |V_T| <= v0     (Ambrosio)

State of the integrators (``state_size(n)`` floats): y = [z, zd, W_N, W_T, W_D, W_U]:
z, zd the chain's coordinates and rates (plant.flex_chain.chain), then the cumulative work of
the normal forces, of friction, the energy dissipated by structural and air damping, and
the work of the joint torques (J), so that E(t) - E(0) = W_N + W_T - W_D + W_U.
"""
from __future__ import annotations

from hilrig.plant.flex_chain.chain import (
    P_CONTACT_ON,
    P_EXPONENT,
    P_FRICTION,
    P_MIN_IMPACT,
    P_N,
    P_RESTITUTION,
    P_STIFFNESS,
    P_V0,
    P_V1,
    assemble,
    dissipation_power,
    point_jacobian_offset,
    point_state,
    q_index,
    solve_spd,
)
from hilrig.jit.kernel import kernel

WORK_TERMS = 4          # W_N, W_T, W_D, W_U
FLIGHT, CONTACT = 0, 1


def state_size(n: int) -> int:
    return 2 * (2 + 2 * n) + WORK_TERMS


@kernel
def hu_guo(delta, delta_dot, vminus, stiffness, exponent, restitution):
    """Normal force (N) of eq. 23 at indentation ``delta`` (m, clamped at 0) and rate
    ``delta_dot`` (m/s) for a contact that began at rate ``vminus`` (m/s, > 0)."""
    if delta <= 0.0:
        return 0.0
    factor = 1.0 + 1.5 * (1.0 - restitution) / restitution * delta_dot / vminus
    force = stiffness * delta ** exponent * factor
    return force if force > 0.0 else 0.0


@kernel
def ambrosio(v_t, f_n, mu, v0, v1):
    """Friction force (N) along the ground of eq. 24, opposing the sliding velocity v_t."""
    speed = abs(v_t)
    if speed <= v0 or f_n <= 0.0:
        return 0.0
    ramp = 1.0 if speed >= v1 else (speed - v0) / (v1 - v0)
    return -mu * f_n * ramp * (1.0 if v_t > 0.0 else -1.0)


@kernel
def contact_force(p, pt, mode, vminus, out):
    """out[0:2] = (F_T, F_N) (N) on an end point whose state pt = (x, y, vx, vy)."""
    out[0] = 0.0
    out[1] = 0.0
    if mode != CONTACT or p[P_CONTACT_ON] == 0.0:
        return
    v = vminus if vminus > p[P_MIN_IMPACT] else p[P_MIN_IMPACT]
    fn = hu_guo(-pt[1], -pt[3], v, p[P_STIFFNESS], p[P_EXPONENT], p[P_RESTITUTION])
    out[1] = fn
    out[0] = ambrosio(pt[2], fn, p[P_FRICTION], p[P_V0], p[P_V1])


@kernel
def derivative(p, y, modes, vminus, tau, dy, mass, rhs, s, pt, force):
    """dy/dt of the state y (module docstring) under joint torques ``tau`` (n - 1, N m)
    with the contact modes held. mass (N x N), rhs (N), s (flex_chain.scratch_size),
    pt (4), force (2): scratch. Returns False if the mass matrix is singular."""
    n = int(p[P_N])
    nz = 2 + 2 * n
    z = y[0:nz]
    zd = y[nz:2 * nz]
    assemble(p, z, zd, mass, rhs, s)
    for a in range(nz):
        rhs[a] = -rhs[a]
    power_u = 0.0
    for i in range(1, n):
        iq = q_index(n, i)
        rhs[iq] += tau[i - 1]
        power_u += tau[i - 1] * zd[iq]
    power_n = 0.0
    power_t = 0.0
    for k in range(n + 1):
        if modes[k] != CONTACT:
            continue
        point_state(p, s, k, pt)
        contact_force(p, pt, modes[k], vminus[k], force)
        power_t += force[0] * pt[2]
        power_n += force[1] * pt[3]
        off = point_jacobian_offset(p, k)
        for a in range(nz):
            rhs[a] += s[off + a] * force[0] + s[off + nz + a] * force[1]
    ok = solve_spd(mass, rhs, nz)
    for a in range(nz):
        dy[a] = zd[a]
        dy[nz + a] = rhs[a]
    dy[2 * nz] = power_n
    dy[2 * nz + 1] = power_t
    dy[2 * nz + 2] = dissipation_power(p, zd)
    dy[2 * nz + 3] = power_u
    return ok

