"""Euler-Bernoulli beam finite elements for a link that translates and rotates in a plane.

A link of length L, mass per metre mu and bending stiffness EI is split into n equal
elements of length le = L / n. Element j (0-based) spans the link's axial coordinate
s = s_j + x, s_j = j le, x in [0, le]; its transverse deflection is w(x) = N(x) u with the
cubic Hermite shape functions (xi = x / le)

    N = [1 - 3 xi^2 + 2 xi^3,  le (xi - 2 xi^2 + xi^3),  3 xi^2 - 2 xi^3,  le (xi^3 - xi^2)]

and u = [w, w', w, w'] at its two nodes (m, rad). A link whose frame moves with the
velocity (v_x, v_y) and turns at the rate qd sees, at s, the velocity
(v_x - qd w, v_y + qd s + w_dot) in its own frame, so its kinetic energy needs, besides
the consistent mass matrix int mu N^T N, the first moments int mu N (the deflection's
share of a translation) and int mu s N (its share of a rotation about the hub). The
elastic energy is 1/2 int EI w''^2 = 1/2 u^T K u.

The functions here give the element integrals in closed form (tests/test_flex_rp.py
derives them again with sympy) and assemble them over a link clamped at its hub node
(w = w' = 0 at s = 0), with an optional point mass at the tip.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def element_mass(mu: float, le: float) -> np.ndarray:
    """Consistent mass matrix int_0^le mu N^T N dx (4 x 4; kg, kg m, kg m^2)."""
    return mu * le / 420.0 * np.array([
        [156.0, 22.0 * le, 54.0, -13.0 * le],
        [22.0 * le, 4.0 * le ** 2, 13.0 * le, -3.0 * le ** 2],
        [54.0, 13.0 * le, 156.0, -22.0 * le],
        [-13.0 * le, -3.0 * le ** 2, -22.0 * le, 4.0 * le ** 2]])


def element_stiffness(ei: float, le: float) -> np.ndarray:
    """Bending stiffness matrix int_0^le EI N''^T N'' dx (4 x 4; N/m, N, N m)."""
    return ei / le ** 3 * np.array([
        [12.0, 6.0 * le, -12.0, 6.0 * le],
        [6.0 * le, 4.0 * le ** 2, -6.0 * le, 2.0 * le ** 2],
        [-12.0, -6.0 * le, 12.0, -6.0 * le],
        [6.0 * le, 2.0 * le ** 2, -6.0 * le, 4.0 * le ** 2]])


def element_first_moment(mu: float, le: float) -> np.ndarray:
    """int_0^le mu N dx (4; kg, kg m): the element's mass seen by a translation."""
    return mu * le * np.array([0.5, le / 12.0, 0.5, -le / 12.0])


def element_rotary_moment(mu: float, le: float, start: float) -> np.ndarray:
    """int_0^le mu (start + x) N dx (4; kg m, kg m^2): the element's share of a rotation
    about the hub, ``start`` (m) the element's first node's distance from the hub."""
    return start * element_first_moment(mu, le) \
        + mu * le ** 2 * np.array([3.0 / 20.0, le / 30.0, 7.0 / 20.0, -le / 20.0])


@dataclass(frozen=True)
class ClampedBeam:
    """A link of n elements clamped at its hub, with a point mass at the tip.

    Elastic coordinates e = [w_1, w'_1, ..., w_n, w'_n] at the nodes 1..n (the hub, node 0,
    is clamped): 2n of them. mass: int mu N^T N + tip (2n x 2n). stiffness: K (2n x 2n).
    first_moment: int mu N + tip (2n). rotary_moment: int mu s N + tip L (2n). Rigid-body
    figures of the whole link with its tip mass: total mass (kg), static moment S about
    the hub (kg m) and moment of inertia J0 about the hub (kg m^2).
    """

    mass: np.ndarray
    stiffness: np.ndarray
    first_moment: np.ndarray
    rotary_moment: np.ndarray
    total_mass: float
    static_moment: float
    hub_inertia: float

    @staticmethod
    def assemble(length: float, mu: float, ei: float, elements: int,
                 tip_mass: float = 0.0) -> "ClampedBeam":
        """Assemble ``elements`` equal elements over ``length`` (m); mu kg/m, ei N m^2,
        tip_mass kg (a point mass at s = length, no rotary inertia)."""
        n = int(elements)
        le = length / n
        nodal = 2 * (n + 1)
        m = np.zeros((nodal, nodal))
        k = np.zeros((nodal, nodal))
        b = np.zeros(nodal)
        c = np.zeros(nodal)
        me, ke, be = element_mass(mu, le), element_stiffness(ei, le), element_first_moment(mu, le)
        for j in range(n):
            dofs = slice(2 * j, 2 * j + 4)
            m[dofs, dofs] += me
            k[dofs, dofs] += ke
            b[dofs] += be
            c[dofs] += element_rotary_moment(mu, le, j * le)
        m[nodal - 2, nodal - 2] += tip_mass
        b[nodal - 2] += tip_mass
        c[nodal - 2] += tip_mass * length
        free = slice(2, nodal)     # node 0 clamped: w = w' = 0
        return ClampedBeam(mass=m[free, free].copy(), stiffness=k[free, free].copy(),
                           first_moment=b[free].copy(), rotary_moment=c[free].copy(),
                           total_mass=mu * length + tip_mass,
                           static_moment=0.5 * mu * length ** 2 + tip_mass * length,
                           hub_inertia=mu * length ** 3 / 3.0 + tip_mass * length ** 2)


def cantilever_tip_mass_frequencies(length: float, mu: float, ei: float, tip_mass: float,
                                    count: int) -> np.ndarray:
    """The first ``count`` natural frequencies (rad/s) of a clamped-free Euler-Bernoulli
    beam with a point mass at its free end, from the frequency equation

        1 + cos(bL) cosh(bL) + r bL (cos(bL) sinh(bL) - sin(bL) cosh(bL)) = 0,
        r = tip_mass / (mu L),  omega = b^2 sqrt(EI / mu),

    its roots bracketed on a fine grid of bL and refined by Brent's method."""
    from scipy.optimize import brentq

    r = tip_mass / (mu * length)

    def equation(x: float) -> float:
        # divided by cosh(x), so that it stays of order one at large x
        return 1.0 / np.cosh(x) + np.cos(x) + r * x * (np.cos(x) * np.tanh(x) - np.sin(x))

    roots: list[float] = []
    grid = np.linspace(1e-6, np.pi * (count + 2), 4000 * (count + 2))
    values = [equation(x) for x in grid]
    for a, b, fa, fb in zip(grid[:-1], grid[1:], values[:-1], values[1:]):
        if fa * fb < 0.0:
            roots.append(brentq(equation, a, b, xtol=1e-15, rtol=1e-15))
            if len(roots) == count:
                break
    beta = np.array(roots) / length
    return beta ** 2 * np.sqrt(ei / mu)
