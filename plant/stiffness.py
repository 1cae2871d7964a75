"""Stiffness and natural frequencies of the 3RRR (paper 001's method on paper 003's robot).

The platform pose x = (x_C, y_C, phi) is held by the three actuators, each an angular
spring of stiffness k_i (N m/rad) about its commanded angle theta0_i; links and passive
joints are rigid. With the constraints f(theta, x) = 0 of plant.rrr3 (f_i = |r_Bi -
r_Ai|^2 - l2^2) and an external wrench W = (F_x, F_y, M_z) on the platform, the static
equilibrium is the stationary point of V = 1/2 (theta - theta0)^T K (theta - theta0) -
W.x under f = 0:

    K (theta - theta0) + Phi_theta^T lam = 0,     -W + Phi_x^T lam = 0,     f = 0.

Small increments dW move the pose by dx = C dW. Along the constraints dq = T dtheta with
T = [I; J] and the kinematic Jacobian J = -Phi_x^-1 Phi_theta (dx = J dtheta), and

    K_red = T^T (K (+) 0 + sum_k lam_k Hess f_k) T,     C = J K_red^-1 J^T,
    K_x = C^-1 = J^-T K_red J^-1                                                   (N/m...)

The sum over the constraints' Hessians is the loaded-mode term (paper 001's
H (x) G + H (x) F Kronecker products, eqs. 18-20): zero without a wrench, where K_x =
J^-T K J^-1 (its eq. 21). The task-space mass matrix comes from the kinetic energy the
same way (paper 001 §3.2): M_x = J^-T (T^T M T) J^-1 with the plant's mass matrix M
(legs, platform, rotor inertias). Natural frequencies: K_x v = w^2 M_x v; the mode
directions are the v (pose increments, normalised).

``grid`` evaluates the unloaded figures over a grid of platform positions at once
(numpy, batched), for the workspace maps of ``hil analyze stiffness --map``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hilrig.plant.rrr3 import Rrr3Params


def _legs(geo: Rrr3Params, q: np.ndarray):
    """r_i = B_i - A_i (..., 3, 2) and the unit vectors of O_iA_i and C B_i (..., 3, 2),
    for coordinates q (..., 6)."""
    q = np.asarray(q, dtype=float)
    theta = q[..., :3]
    angle = q[..., 5:6] + geo.alpha
    a_dir = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
    b_dir = np.stack([np.cos(angle), np.sin(angle)], axis=-1)
    centre = q[..., None, 3:5]
    r = centre + geo.platform_radius * b_dir - geo.base - geo.l1 * a_dir
    return r, a_dir, b_dir


def constraint_jacobian(geo: Rrr3Params, q: np.ndarray) -> np.ndarray:
    """Phi_q = df/dq (..., 3, 6), m^2 per rad or m (as plant.rrr3.jacobian)."""
    r, a_dir, b_dir = _legs(geo, q)
    perp_a = np.stack([-a_dir[..., 1], a_dir[..., 0]], axis=-1)    # dA/dtheta / l1
    perp_b = np.stack([-b_dir[..., 1], b_dir[..., 0]], axis=-1)    # dB/dphi / b
    jac = np.zeros(r.shape[:-2] + (3, 6))
    for i in range(3):
        jac[..., i, i] = -2.0 * geo.l1 * np.sum(r[..., i, :] * perp_a[..., i, :], axis=-1)
        jac[..., i, 3] = 2.0 * r[..., i, 0]
        jac[..., i, 4] = 2.0 * r[..., i, 1]
        jac[..., i, 5] = 2.0 * geo.platform_radius * np.sum(r[..., i, :] * perp_b[..., i, :],
                                                           axis=-1)
    return jac


def constraint_hessians(geo: Rrr3Params, q: np.ndarray) -> np.ndarray:
    """d^2 f_i / dq^2 (3, 6, 6) at one pose q: 2 Jr^T Jr + 2 sum_c r_c Hess r_c, with
    Jr = dr_i/d(theta_i, x_C, y_C, phi) and r's only second derivatives
    d^2 r/dtheta_i^2 = l1 (cos, sin) and d^2 r/dphi^2 = -b (cos, sin)(phi + alpha_i)."""
    r, a_dir, b_dir = _legs(geo, q)
    hess = np.zeros((3, 6, 6))
    for i in range(3):
        idx = [i, 3, 4, 5]
        jr = np.zeros((2, 4))
        jr[:, 0] = geo.l1 * np.array([a_dir[i, 1], -a_dir[i, 0]])
        jr[:, 1] = [1.0, 0.0]
        jr[:, 2] = [0.0, 1.0]
        jr[:, 3] = geo.platform_radius * np.array([-b_dir[i, 1], b_dir[i, 0]])
        local = 2.0 * jr.T @ jr
        local[0, 0] += 2.0 * geo.l1 * r[i] @ a_dir[i]
        local[3, 3] -= 2.0 * geo.platform_radius * r[i] @ b_dir[i]
        hess[i][np.ix_(idx, idx)] = local
    return hess


def equilibrium(geo: Rrr3Params, stiffness, theta0, wrench, q_start,
                tol: float = 1e-14, iterations: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """The static equilibrium (q, lam) under ``wrench`` (N, N, N m) of the platform held by
    actuator springs ``stiffness`` (N m/rad) about ``theta0`` (rad); Newton from q_start."""
    k = np.diag(np.asarray(stiffness, dtype=float))
    q = np.array(q_start, dtype=float)
    lam = np.zeros(3)
    w = np.asarray(wrench, dtype=float)
    for _ in range(iterations):
        jac = constraint_jacobian(geo, q)
        r, _, _ = _legs(geo, q)
        f = np.sum(r * r, axis=-1) - geo.l2 ** 2
        grad = np.concatenate([k @ (q[:3] - theta0), -w]) + jac.T @ lam
        residual = np.concatenate([grad, f])
        hess = np.zeros((6, 6))
        hess[:3, :3] = k
        hess += np.einsum("k,kij->ij", lam, constraint_hessians(geo, q))
        kkt = np.block([[hess, jac.T], [jac, np.zeros((3, 3))]])
        step = np.linalg.solve(kkt, -residual)
        q += step[:6]
        lam += step[6:]
        if np.max(np.abs(step[:6])) < tol:
            break
    return q, lam


@dataclass(frozen=True)
class PoseStiffness:
    """The figures at one pose: J (dx = J dtheta), K_x (N/m, N/rad, N m/rad; rows and
    columns x_C, y_C, phi), the compliance C = K_x^-1, M_x (kg, kg m, kg m^2), natural
    frequencies (rad/s, ascending) and mode directions (columns, unit pose increments)."""

    jacobian: np.ndarray
    stiffness: np.ndarray
    compliance: np.ndarray
    mass: np.ndarray
    omega: np.ndarray
    modes: np.ndarray


def pose_stiffness(geo: Rrr3Params, stiffness, mass_diag, q, lam=None,
                   loaded: bool = True) -> PoseStiffness:
    """Cartesian stiffness, task-space mass and modes at the pose q (6) with the multipliers
    lam (3; None or zeros: unloaded). ``loaded`` False drops the loaded-mode term."""
    jac = constraint_jacobian(geo, q)
    phi_t, phi_x = jac[:, :3], jac[:, 3:]
    j = -np.linalg.solve(phi_x, phi_t)
    t = np.vstack([np.eye(3), j])
    hess = np.zeros((6, 6))
    hess[:3, :3] = np.diag(np.asarray(stiffness, dtype=float))
    if loaded and lam is not None:
        hess += np.einsum("k,kij->ij", lam, constraint_hessians(geo, q))
    k_red = t.T @ hess @ t
    m_red = t.T @ np.diag(np.asarray(mass_diag, dtype=float)) @ t
    j_inv = np.linalg.inv(j)
    k_x = j_inv.T @ k_red @ j_inv
    m_x = j_inv.T @ m_red @ j_inv
    compliance = j @ np.linalg.solve(k_red, j.T)
    from scipy.linalg import eigh
    w2, vec = eigh(0.5 * (k_red + k_red.T), m_red)
    modes = j @ vec
    modes /= np.linalg.norm(modes, axis=0)
    return PoseStiffness(j, k_x, compliance, m_x, np.sqrt(np.maximum(w2, 0.0)), modes)


def inverse_kinematics(geo: Rrr3Params, pose: np.ndarray, elbows: np.ndarray) -> np.ndarray:
    """theta (..., 3) placing the platform at pose (..., 3) = (x_C, y_C, phi); leg i on the
    elbow side elbows[i] = +1 or -1 (the sign of the cross product O_iA_i x A_iB_i, as
    ``elbow_signs`` gives it). NaN where the leg cannot reach."""
    pose = np.asarray(pose, dtype=float)
    angle = pose[..., 2:3] + geo.alpha
    b = pose[..., None, 0:2] + geo.platform_radius * np.stack([np.cos(angle), np.sin(angle)],
                                                              axis=-1)
    v = b - geo.base                            # O_i -> B_i
    dist = np.hypot(v[..., 0], v[..., 1])
    base_angle = np.arctan2(v[..., 1], v[..., 0])
    cos_a = (geo.l1 ** 2 + dist ** 2 - geo.l2 ** 2) / (2.0 * geo.l1 * dist)
    with np.errstate(invalid="ignore"):
        offset = np.arccos(np.where(np.abs(cos_a) <= 1.0, cos_a, np.nan))
    # the elbow sign s = sign(OA x AB): A left of O->B (theta = base + offset) gives s < 0
    return base_angle - np.asarray(elbows) * offset


def elbow_signs(geo: Rrr3Params, q: np.ndarray) -> np.ndarray:
    """sign(O_iA_i x A_iB_i) of each leg at coordinates q (the branch of ``inverse_kinematics``)."""
    r, a_dir, _ = _legs(geo, q)
    return np.sign(a_dir[:, 0] * r[:, 1] - a_dir[:, 1] * r[:, 0])


def grid(geo: Rrr3Params, stiffness, mass_diag, xs: np.ndarray, ys: np.ndarray, phi: float,
         elbows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Over the grid of platform positions (len(ys) x len(xs)) at orientation phi, on the
    given elbow branches, unloaded: the lowest natural frequency (rad/s) and the smallest
    eigenvalue of the translational block of K_x (N/m). NaN where out of reach or singular."""
    gx, gy = np.meshgrid(xs, ys)
    pose = np.stack([gx, gy, np.full_like(gx, phi)], axis=-1).reshape(-1, 3)
    theta = inverse_kinematics(geo, pose, elbows)
    q = np.concatenate([theta, pose], axis=-1)
    ok = np.all(np.isfinite(theta), axis=-1)
    q[~ok] = 0.0
    jac = constraint_jacobian(geo, q)
    phi_t, phi_x = jac[..., :3], jac[..., 3:]
    good = ok & (np.abs(np.linalg.det(phi_x)) > 1e-12) & (np.abs(np.linalg.det(phi_t)) > 1e-12)
    phi_x[~good] = np.eye(3)
    phi_t[~good] = np.eye(3)
    j = -np.linalg.solve(phi_x, phi_t)                                   # (N, 3, 3)
    mass = np.asarray(mass_diag, dtype=float)
    # M_red = M_theta + J^T M_x J; K_red = K (unloaded); frequencies from K_red, M_red
    m_red = np.diag(mass[:3]) + np.einsum("nki,k,nkj->nij", j, mass[3:], j)
    chol = np.linalg.cholesky(m_red)
    l_inv = np.linalg.inv(chol)
    k = np.diag(np.asarray(stiffness, dtype=float))
    a = l_inv @ k @ np.swapaxes(l_inv, -1, -2)
    omega = np.sqrt(np.linalg.eigvalsh(a)[:, 0])
    j_inv = np.linalg.inv(j)
    k_x = np.swapaxes(j_inv, -1, -2) @ k @ j_inv
    translational = np.linalg.eigvalsh(k_x[:, :2, :2])[:, 0]
    omega[~good] = np.nan
    translational[~good] = np.nan
    shape = gx.shape
    return omega.reshape(shape), translational.reshape(shape)
