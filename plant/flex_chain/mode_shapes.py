"""The first Timoshenko mode shapes of paper 004's Table 2, for the flexible chain.

Each shape is a pair over eta = x / l in [0, 1]: the transverse displacement W(eta)
(normalised to max |W| = 1) and the bending rotation Theta(eta) of the cross-section
(rad per unit of W, per unit length of a 1 m link), built from the Timoshenko form

    W     = C1 sin(a eta) + C2 cos(a eta) + C3 sinh(b eta) + C4 cosh(b eta)
    Theta = A1 cos(a eta) + A2 sin(a eta) + A3 cosh(b eta) + A4 sinh(b eta)

with the wavenumbers and coefficients printed in Table 2. The names give the supports at
eta = 0 and eta = 1: s (simply supported: W = 0 and no bending moment, Theta' = 0) and
c (clamped: W = 0 and Theta = 0). The shear strain is Gamma = W' - Theta.

``shape(name, eta, derivative)`` evaluates W, W', W'', Theta, Theta' (derivative 0..4).
"""
from __future__ import annotations

import numpy as np

# name -> (a, b, (C_sin, C_cos, C_sinh, C_cosh) of W, (A_cos, A_sin, A_cosh, A_sinh) of Theta)
TABLE_2 = {
    "ss": (3.141592653589793, 3.141592653589793,
           (1.0, 0.0, 0.0, 0.0),
           (3.140333690109594, 0.0, 0.0, 0.0)),
    "cc": (4.728894916196515, 4.72606095063675,
           (0.6189067368941716, -0.6292076184824934, -0.6181543604098716, 0.6292076184824934),
           (2.924089234018893, 2.97275682019588, -2.924089234018893, 2.976375062609595)),
    "sc": (3.926181400745614, 3.924559038288969,
           (0.937356072626805, 0.0, 0.02617115567137916, 0.0),
           (3.677927210568842, 0.0, 0.1027745658114473, 0.0)),
    "cs": (3.926181400745614, 3.924559038288969,
           (0.6633471080156852, -0.6622741284223433, -0.6627910308436212, 0.6622741284223433),
           (2.602791457664548, 2.598581381090682, -2.602791457664547, 2.600761573215394)),
}
MODE_NAMES = tuple(TABLE_2)

W, DW, DDW, THETA, DTHETA = range(5)


def shape(name: str, eta, what: int = W) -> np.ndarray:
    """W, dW/deta, d2W/deta2, Theta or dTheta/deta (``what``) of mode ``name`` at eta."""
    a, b, (c1, c2, c3, c4), (a1, a2, a3, a4) = TABLE_2[name]
    e = np.asarray(eta, dtype=float)
    sa, ca, sb, cb = np.sin(a * e), np.cos(a * e), np.sinh(b * e), np.cosh(b * e)
    if what == W:
        return c1 * sa + c2 * ca + c3 * sb + c4 * cb
    if what == DW:
        return a * (c1 * ca - c2 * sa) + b * (c3 * cb + c4 * sb)
    if what == DDW:
        return -a * a * (c1 * sa + c2 * ca) + b * b * (c3 * sb + c4 * cb)
    if what == THETA:
        return a1 * ca + a2 * sa + a3 * cb + a4 * sb
    if what == DTHETA:
        return a * (-a1 * sa + a2 * ca) + b * (a3 * sb + a4 * cb)
    raise ValueError(f"what must be 0..4, got {what}")


def boundary_values(name: str) -> dict:
    """The quantities the supports fix, at each end: W, Theta (clamped) and Theta'
    (simply supported: the bending moment EI Theta' vanishes)."""
    out = {}
    for end, eta in (("0", 0.0), ("1", 1.0)):
        out["W" + end] = float(shape(name, eta, W))
        out["Theta" + end] = float(shape(name, eta, THETA))
        out["dTheta" + end] = float(shape(name, eta, DTHETA))
    return out


def supports(name: str) -> tuple[str, str]:
    """The support at eta = 0 and at eta = 1: 's' or 'c'."""
    return name[0], name[1]
