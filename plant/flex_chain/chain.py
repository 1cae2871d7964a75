"""A planar chain of n flexible links with a floating base (paper 004): its parameters,
kinematics and equations of motion, without the ground (plant.flex_chain.contact adds it).

**Coordinates** (N = 2 + 2n; one assumed mode per link, Table 2's first Timoshenko mode):

    z = [q_2 .. q_n,  q_1,  X_1, X_2,  delta_1 .. delta_n]

q_1 (rad) is the absolute angle of link 1's base frame from the horizontal X_1 axis,
q_i (i >= 2, rad) the joint angle of link i relative to the *end* frame of link i - 1
(which the bending rotation of that link's tip turns); X_1, X_2 (m) the position of
link 1's base point O_1 in the ground frame (X_2 up); delta_i (m) the weight of link i's
mode shape. The joint angles q_2..q_n come first because they are the coordinates a
joint torque drives (the chain's ``nact = n - 1`` inputs, N m); the floating base and
the modes are never actuated.

**Kinematics.** A point at x = eta l of link i sits at
r = O_i + R(phi_i) [x, delta_i W_i(eta)], its cross-section turned by
psi = phi_i + delta_i Theta_i(eta) / l, where phi_1 = q_1,
phi_{i+1} = phi_i + delta_i Theta_i(1) / l + q_{i+1}, O_{i+1} = O_i + R(phi_i) [l, delta_i W_i(1)].
Both phi and psi are linear in z. The contact points are the link end points
O_1 .. O_{n+1}.

**Dynamics** (Kane's equations of the link masses at Gauss-Legendre points, which are
Lagrange's equations of the kinetic energy that quadrature defines, so energy is
conserved exactly up to the integration error):

    M(z) = sum_g w_g mu J_g^T J_g + sum_g w_g rho_I Jpsi_g^T Jpsi_g
    bias = sum_g w_g mu J_g^T (a0_g + [0, g]) + K delta + D delta_dot
    M(z) zdd + bias = Q (joint torques, contact forces)

with J_g = dr_g/dz, a0_g the part of r_g's acceleration that does not depend on zdd.
Because r_g = O_i + R(phi_i) p_g with p_g = [x_g, delta_i W(x_g)], both sums reduce to
nine integrals per link (int mu [1, x, W, x^2, x W, W^2] and int rho_I [1, Theta,
Theta^2], precomputed in the params), so a step costs O(n N^2) whatever the quadrature;
tests/test_flex_chain.py checks M against finite-difference Jacobians of the points.
K_i = int [k A G (W' - Theta)^2 + E I Theta'^2] dx (paper eq. 9, bending and shear),
D_i = int [gamma W^2 + K_v I W''^2] dx (eq. 11, air and Kelvin-Voigt damping, a Rayleigh
function of delta_dot). Units: SI throughout.

``FlexChainParams.block()`` is the flat params array the kernels read (layout below);
the kernels take a flat scratch array of ``scratch_size(n)`` floats and never allocate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.plant.flex_chain.mode_shapes import DDW, DTHETA, DW, THETA, W, shape

# -- params layout ---------------------------------------------------------------
P_N = 0            # number of links
P_GRAVITY = 1      # m/s^2, along -X_2
P_NG = 2           # Gauss points per link
P_STIFFNESS = 3    # contact K, N/m^1.5
P_EXPONENT = 4     # contact exponent n (3/2)
P_RESTITUTION = 5  # c_r
P_FRICTION = 6     # mu_k
P_V0 = 7           # Ambrosio lower velocity tolerance, m/s
P_V1 = 8           # Ambrosio upper velocity tolerance, m/s
P_CONTACT_ON = 9   # 1: ground contact, 0: none
P_MIN_IMPACT = 10  # floor of the impact speed in the Hu-Guo damping, m/s
HEAD = 11

# per link, from HEAD + i * link_size(ng)
L_LENGTH = 0       # m
L_MU = 1           # kg/m
L_RHO_I = 2        # rotary inertia of the cross-section per length, kg m
L_K = 3            # modal stiffness, N/m
L_D = 4            # modal damping, N s/m
L_THETA_END = 5    # Theta(1) / l, rad/m
L_W_END = 6        # W(1)
# mass integrals over the link (Gauss-Legendre, x in m): int mu [1, x, W, x^2, x W, W^2] dx
L_M0, L_MX, L_MW, L_MXX, L_MXW, L_MWW = 7, 8, 9, 10, 11, 12
# rotary inertia integrals: int rho_I [1, Theta / l, (Theta / l)^2] dx
L_R0, L_RT, L_RTT = 13, 14, 15
L_POINTS = 16      # then ng x (x, weight (m), W, Theta / l): the quadrature itself
POINT_SIZE = 4


def link_size(ng: int) -> int:
    return L_POINTS + POINT_SIZE * ng


def n_coordinates(n: int) -> int:
    return 2 + 2 * n


def scratch_size(n: int) -> int:
    """Floats of scratch the kernels need for n links."""
    nz = n_coordinates(n)
    return 6 * nz + 2 * nz * (n + 1) + 4 * (n + 1)


@dataclass(frozen=True)
class FlexChainParams:
    """The chain's physical parameters (SI), one entry per link where a list.

    modes: Table 2 names per link ("ss", "cc", "sc", "cs"). rho_i: rotary inertia of
    the cross-section per unit length (kg m; 0 drops it). shear: k A G (N, inf for
    Euler-Bernoulli bending stiffness). kv: Kelvin-Voigt coefficient (kg/(m s) in the
    paper's units: K_v I W''^2 is its damping density). gamma: air damping (kg/(m s)).
    """

    length: tuple
    mu: tuple
    rho_i: tuple
    ei: tuple
    shear: tuple
    kv_i: tuple
    gamma: tuple
    modes: tuple
    gravity: float = 9.81
    stiffness: float = 140e6
    exponent: float = 1.5
    restitution: float = 0.8
    friction: float = 0.1
    v0: float = 1e-4
    v1: float = 1e-3
    contact: bool = True
    min_impact_speed: float = 1e-3
    gauss_points: int = 12

    @property
    def n(self) -> int:
        return len(self.length)

    def block(self) -> np.ndarray:
        """The flat params array of the kernels (layout at the top of this module)."""
        n, ng = self.n, self.gauss_points
        head = np.zeros(HEAD)
        head[P_N], head[P_GRAVITY], head[P_NG] = n, self.gravity, ng
        head[P_STIFFNESS], head[P_EXPONENT] = self.stiffness, self.exponent
        head[P_RESTITUTION], head[P_FRICTION] = self.restitution, self.friction
        head[P_V0], head[P_V1] = self.v0, self.v1
        head[P_CONTACT_ON] = 1.0 if self.contact else 0.0
        head[P_MIN_IMPACT] = self.min_impact_speed
        nodes, weights = np.polynomial.legendre.leggauss(ng)
        eta, w_eta = 0.5 * (nodes + 1.0), 0.5 * weights
        blocks = [head]
        for i in range(n):
            blocks.append(_link_block(self, i, eta, w_eta))
        return np.concatenate(blocks)


def modal_integrals(chain: FlexChainParams, i: int, points: int = 64) -> tuple[float, float]:
    """(K_i, D_i) of link i (eqs. 9 and 11 for one mode), by Gauss-Legendre quadrature."""
    nodes, weights = np.polynomial.legendre.leggauss(points)
    eta, w = 0.5 * (nodes + 1.0), 0.5 * weights
    name, l = chain.modes[i], chain.length[i]
    dw = shape(name, eta, DW) / l                 # dW/dx
    theta = shape(name, eta, THETA) / l           # rotation per unit delta
    dtheta = shape(name, eta, DTHETA) / l ** 2
    ddw = shape(name, eta, DDW) / l ** 2
    gamma = dw - theta
    shear = 0.0 if math.isinf(chain.shear[i]) else chain.shear[i] * np.sum(w * gamma ** 2) * l
    if math.isinf(chain.shear[i]):   # Euler-Bernoulli: the curvature is W''
        bending = chain.ei[i] * np.sum(w * ddw ** 2) * l
    else:
        bending = chain.ei[i] * np.sum(w * dtheta ** 2) * l
    wv = shape(name, eta, W)
    damping = (chain.gamma[i] * np.sum(w * wv ** 2) * l + chain.kv_i[i] * np.sum(w * ddw ** 2) * l)
    return float(bending + shear), float(damping)


def _link_block(chain: FlexChainParams, i: int, eta: np.ndarray, w_eta: np.ndarray) -> np.ndarray:
    name, l = chain.modes[i], chain.length[i]
    k, d = modal_integrals(chain, i)
    head = np.zeros(L_POINTS)
    head[L_LENGTH], head[L_MU], head[L_RHO_I] = l, chain.mu[i], chain.rho_i[i]
    head[L_K], head[L_D] = k, d
    if math.isinf(chain.shear[i]):   # Euler-Bernoulli: the section turns with the slope
        head[L_THETA_END] = float(shape(name, 1.0, DW)) / l
        theta = shape(name, eta, DW) / l
    else:
        head[L_THETA_END] = float(shape(name, 1.0, THETA)) / l
        theta = shape(name, eta, THETA) / l
    head[L_W_END] = float(shape(name, 1.0, W))
    x, weight, wsh = eta * l, w_eta * l, shape(name, eta, W)
    mu, rho_i = chain.mu[i], chain.rho_i[i]
    for slot, values in ((L_M0, 1.0), (L_MX, x), (L_MW, wsh), (L_MXX, x * x), (L_MXW, x * wsh),
                         (L_MWW, wsh * wsh)):
        head[slot] = mu * float(np.sum(weight * values))
    for slot, values in ((L_R0, 1.0), (L_RT, theta), (L_RTT, theta * theta)):
        head[slot] = rho_i * float(np.sum(weight * values))
    points = np.column_stack([x, weight, wsh, theta]).ravel()
    return np.concatenate([head, points])


# -- coordinate indices ----------------------------------------------------------------
@kernel
def q_index(n, i):
    """Index in z of link i's joint angle (i 0-based)."""
    return n - 1 if i == 0 else i - 1


@kernel
def active_coordinate(n, j):
    """The j-th coordinate that can move link i's base or frame (j < 3 + 2 i): X_1, X_2,
    q_1, then delta_k and q_{k+1} of every link k before i."""
    if j == 0:
        return n
    if j == 1:
        return n + 1
    if j == 2:
        return n - 1
    k = (j - 3) // 2
    return n + 2 + k if (j - 3) % 2 == 0 else k


@kernel
def assemble(p, z, zd, mass, bias, s):
    """Fill mass (N x N) and bias (N) at (z, zd), and the end points' kinematics in the
    scratch ``s`` (see points/point_jacobian). Returns the potential energy V (J):
    gravity plus elastic. ``bias`` holds everything but joint torques and contact."""
    n = int(p[P_N])
    ng = int(p[P_NG])
    g = p[P_GRAVITY]
    nz = 2 + 2 * n
    jphi = s[0:nz]
    jo = s[nz:3 * nz]          # rows: d O_x / dz, d O_y / dz
    cross_o = s[3 * nz:4 * nz]    # JO^T (S R s): the link's first moment against O's motion
    mode_o = s[5 * nz:6 * nz]     # mW JO^T R e2: the mode against O's motion
    for a in range(nz):
        bias[a] = 0.0
        jphi[a] = 0.0
        jo[a] = 0.0
        jo[nz + a] = 0.0
        for b in range(nz):
            mass[a, b] = 0.0
    ix, iy = n, n + 1
    jo[ix] = 1.0
    jo[nz + iy] = 1.0
    ox, oy = z[ix], z[iy]
    vx, vy = zd[ix], zd[iy]
    ax0, ay0 = 0.0, 0.0          # acceleration of O_i at zdd = 0
    iq0 = q_index(n, 0)
    phi, phid = z[iq0], zd[iq0]
    jphi[iq0] = 1.0
    potential = 0.0
    lsize = L_POINTS + POINT_SIZE * ng
    _store_point(p, s, 0, ox, oy, vx, vy, jo, nz, n)
    for i in range(n):
        base = HEAD + i * lsize
        l = p[base + L_LENGTH]
        idl = n + 2 + i
        d, dd = z[idl], zd[idl]
        c, sn = math.cos(phi), math.sin(phi)
        m0, mx, mw = p[base + L_M0], p[base + L_MX], p[base + L_MW]
        mxx, mxw, mww = p[base + L_MXX], p[base + L_MXW], p[base + L_MWW]
        r0, rt, rtt = p[base + L_R0], p[base + L_RT], p[base + L_RTT]
        # first moment about O_i in the ground frame, R [mx, d mW], and the mode direction
        sx, sy = c * mx - sn * d * mw, sn * mx + c * d * mw
        ex, ey = -sn, c                                        # R [0, 1]
        inertia = mxx + d * d * mww + r0                       # about O_i, per unit phi
        cross = mxw + rt                                       # phi-delta coupling
        # a0 of O_i plus gravity, and the link's resultant of m (a0 + g)
        gx, gy = ax0, ay0 + g
        fx = m0 * gx - phid * phid * sx - 2.0 * phid * dd * mw * ey
        fy = m0 * gy - phid * phid * sy + 2.0 * phid * dd * mw * ex
        moment = -sy * gx + sx * gy + 2.0 * phid * dd * d * mww
        modal = mw * (ex * gx + ey * gy) - phid * phid * d * mww
        # only the coordinates that move O_i or turn link i's frame: X_1, X_2, q_1 and
        # the joint angles and modes of the links before it (3 + 2 i of them)
        active = 3 + 2 * i
        for ja in range(active):
            a = active_coordinate(n, ja)
            cross_o[a] = jo[nz + a] * sx - jo[a] * sy
            mode_o[a] = mw * (jo[a] * ex + jo[nz + a] * ey)
        for ja in range(active):
            a = active_coordinate(n, ja)
            bias[a] += jo[a] * fx + jo[nz + a] * fy + jphi[a] * moment
            for jb in range(active):
                b = active_coordinate(n, jb)
                mass[a, b] += (m0 * (jo[a] * jo[b] + jo[nz + a] * jo[nz + b])
                               + cross_o[a] * jphi[b] + jphi[a] * cross_o[b]
                               + inertia * jphi[a] * jphi[b])
            mass[a, idl] += mode_o[a] + cross * jphi[a]
            mass[idl, a] += mode_o[a] + cross * jphi[a]
        bias[idl] += modal
        mass[idl, idl] += mww + rtt
        potential += g * (m0 * oy + sy)
        # elastic and dissipative forces of the mode
        kk, dk = p[base + L_K], p[base + L_D]
        bias[idl] += kk * d + dk * dd
        potential += 0.5 * kk * d * d
        # the next joint O_{i+1}
        wend = p[base + L_W_END]
        y = d * wend
        prx, pry = c * l - sn * y, sn * l + c * y
        ex, ey = -sn * wend, c * wend
        for a in range(nz):
            jx = jo[a] - pry * jphi[a]
            jo[nz + a] = jo[nz + a] + prx * jphi[a]
            jo[a] = jx
        jo[idl] += ex
        jo[nz + idl] += ey
        vx += -phid * pry + dd * ex
        vy += phid * prx + dd * ey
        ax0 += -phid * phid * prx - 2.0 * phid * dd * ey
        ay0 += -phid * phid * pry + 2.0 * phid * dd * ex
        ox += prx
        oy += pry
        _store_point(p, s, i + 1, ox, oy, vx, vy, jo, nz, n)
        if i + 1 < n:
            tend = p[base + L_THETA_END]
            iq = q_index(n, i + 1)
            phi += d * tend + z[iq]
            phid += dd * tend + zd[iq]
            jphi[idl] += tend
            jphi[iq] += 1.0
    return potential


@kernel
def _store_point(p, s, k, ox, oy, vx, vy, jo, nz, n):
    """Keep end point k's position, velocity and Jacobian rows in the scratch."""
    jbase = 6 * nz + 2 * nz * k
    for a in range(nz):
        s[jbase + a] = jo[a]
        s[jbase + nz + a] = jo[nz + a]
    pbase = 6 * nz + 2 * nz * (n + 1) + 4 * k
    s[pbase] = ox
    s[pbase + 1] = oy
    s[pbase + 2] = vx
    s[pbase + 3] = vy


@kernel
def point_state(p, s, k, out):
    """out[0:4] = x, y (m), vx, vy (m/s) of end point k (0..n) after ``assemble``."""
    n = int(p[P_N])
    nz = 2 + 2 * n
    pbase = 6 * nz + 2 * nz * (n + 1) + 4 * k
    for a in range(4):
        out[a] = s[pbase + a]


@kernel
def point_jacobian_offset(p, k):
    """Where end point k's Jacobian rows (d x / dz, then d y / dz) start in the scratch."""
    n = int(p[P_N])
    nz = 2 + 2 * n
    return 6 * nz + 2 * nz * k


@kernel
def point_heights(p, z, out):
    """out[k] = height X_2 of end point k (m): positions only, no Jacobians."""
    n = int(p[P_N])
    ng = int(p[P_NG])
    lsize = L_POINTS + POINT_SIZE * ng
    phi = z[q_index(n, 0)]
    oy = z[n + 1]
    out[0] = oy
    for i in range(n):
        base = HEAD + i * lsize
        l = p[base + L_LENGTH]
        d = z[n + 2 + i]
        oy += math.sin(phi) * l + math.cos(phi) * d * p[base + L_W_END]
        out[i + 1] = oy
        if i + 1 < n:
            phi += d * p[base + L_THETA_END] + z[q_index(n, i + 1)]


@kernel
def dissipation_power(p, zd):
    """Power of the structural and air damping, sum D_i delta_dot_i^2 (W, >= 0)."""
    n = int(p[P_N])
    ng = int(p[P_NG])
    lsize = L_POINTS + POINT_SIZE * ng
    total = 0.0
    for i in range(n):
        dd = zd[n + 2 + i]
        total += p[HEAD + i * lsize + L_D] * dd * dd
    return total


@kernel
def solve_spd(a, b, nz):
    """Solve a x = b in place (b becomes x) for a symmetric positive definite a (N x N),
    by Cholesky (a is overwritten). Returns False if a is not positive definite."""
    for j in range(nz):
        acc = a[j, j]
        for k in range(j):
            acc -= a[j, k] * a[j, k]
        if not acc > 0.0:
            return False
        ljj = math.sqrt(acc)
        a[j, j] = ljj
        for i in range(j + 1, nz):
            acc = a[i, j]
            for k in range(j):
                acc -= a[i, k] * a[j, k]
            a[i, j] = acc / ljj
    for i in range(nz):
        acc = b[i]
        for k in range(i):
            acc -= a[i, k] * b[k]
        b[i] = acc / a[i, i]
    for i in range(nz - 1, -1, -1):
        acc = b[i]
        for k in range(i + 1, nz):
            acc -= a[k, i] * b[k]
        b[i] = acc / a[i, i]
    return True


@kernel
def mechanism(q, qd, params, mass, bias):
    """The chain without the ground as a hilrig chain mechanism (plant.interface):
    ``params`` is the params block followed by scratch_size(n) floats of scratch.
    Returns the potential energy (J)."""
    n = int(params[P_N])
    ng = int(params[P_NG])
    start = HEAD + n * (L_POINTS + POINT_SIZE * ng)
    return assemble(params, q, qd, mass, bias, params[start:])


def energy(p: np.ndarray, z: np.ndarray, zd: np.ndarray) -> float:
    """Mechanical energy T + V (J) at (z, zd) (Python helper for tests and output)."""
    n = int(p[P_N])
    nz = n_coordinates(n)
    mass, bias, s = np.zeros((nz, nz)), np.zeros(nz), np.zeros(scratch_size(n))
    potential = assemble(p, z, zd, mass, bias, s)
    return 0.5 * float(zd @ mass @ zd) + potential


def end_points(p: np.ndarray, z: np.ndarray) -> np.ndarray:
    """(n + 1, 2) positions x, y (m) of the end points O_1 .. O_{n+1}."""
    n = int(p[P_N])
    nz = n_coordinates(n)
    mass, bias, s = np.zeros((nz, nz)), np.zeros(nz), np.zeros(scratch_size(n))
    assemble(p, z, np.zeros(nz), mass, bias, s)
    out, state = np.zeros((n + 1, 2)), np.zeros(4)
    for k in range(n + 1):
        point_state(p, s, k, state)
        out[k] = state[:2]
    return out
