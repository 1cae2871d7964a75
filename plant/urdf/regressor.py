"""The rigid-body regressor of a URDF chain (plant.urdf.parse): the joint torques are linear
in each body's ten inertial parameters,

    tau = Y(q, qd, qdd) pi,   pi_k = (m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz)

for body k (kg, kg m, kg m^2): its mass, first moment m c and rotational inertia I about
the origin of its own frame (the child link frame of moving joint k, where the URDF puts
joint k), all in that frame; Pinocchio's ordering (``Inertia.toDynamicParameters``, the
columns of ``computeJointTorqueRegressor``). Offline, vectorised over samples with numpy
(identification, hil excite): never called by the loops.

The passes are the plant's (plant.urdf.dynamics: spatial vectors in the base frame about
its origin, a_0 = -gravity): the spatial velocity and acceleration of every body, each
turned into the body's frame (w_b = R^T w, v_b = R^T (v + w x p): the velocity of the
body's origin p); there the body's spatial force is linear in its parameters,

    n = I dw + h x dv + w x (I w) + w x (h x v) - v x (h x w),
    F = m dv - h x dw + w x (m v - h x w),        h = m c,

and joint j's torque is S_j . (the forces of the bodies j..n-1 turned back into the base
frame: n_0 = R n + p x R F, F_0 = R F). A prismatic joint's "torque" is its force (N).
"""
from __future__ import annotations

import numpy as np

PER_BODY = 10
PARAMETERS = ("m", "mc_x", "mc_y", "mc_z", "I_xx", "I_xy", "I_yy", "I_xz", "I_yz", "I_zz")
# I's entries in PARAMETERS' order as (row, column) of the 3x3 matrix
_INERTIA_ENTRIES = ((0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2))


def standard(chain) -> np.ndarray:
    """The chain's standard parameters (10 n, body-major, PARAMETERS' order) from its
    URDF: mass, m c and the inertia about the body frame's origin, I_C + m ([c]^T [c])."""
    out = np.zeros((chain.n, PER_BODY))
    for k in range(chain.n):
        m, c = float(chain.mass[k]), np.asarray(chain.com[k], float)
        inertia = np.asarray(chain.inertia[k], float) + m * (c @ c * np.eye(3) - np.outer(c, c))
        out[k, 0] = m
        out[k, 1:4] = m * c
        out[k, 4:] = [inertia[i, j] for i, j in _INERTIA_ENTRIES]
    return out.ravel()


def inertial(parameters: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(m kg, c m, I_C kg m^2 about the centre of mass) of one body's ten parameters; c and
    I_C are NaN for a body of zero mass."""
    m, h = float(parameters[0]), np.asarray(parameters[1:4], float)
    inertia = np.zeros((3, 3))
    for value, (i, j) in zip(parameters[4:], _INERTIA_ENTRIES):
        inertia[i, j] = inertia[j, i] = value
    with np.errstate(divide="ignore", invalid="ignore"):
        c = h / m
    return m, c, inertia - m * (c @ c * np.eye(3) - np.outer(c, c))


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.cross(a, b, axis=-1)


def _rotate(R: np.ndarray, x: np.ndarray) -> np.ndarray:
    """R x per sample (R: N x 3 x 3, x: N x 3)."""
    return np.einsum("nij,nj->ni", R, x)


def _rotate_back(R: np.ndarray, x: np.ndarray) -> np.ndarray:
    """R^T x per sample."""
    return np.einsum("nji,nj->ni", R, x)


def _axis_rotation(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rotations about the unit ``axis`` by ``angle`` (N): N x 3 x 3 (Rodrigues)."""
    c, s = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    x, y, z = axis
    cross = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return c * np.eye(3) + s * cross + (1.0 - c) * np.outer(axis, axis)


def regressor(chain, gravity, q, qd, qdd) -> np.ndarray:
    """Y (N x n x 10 n): the joint torques at the samples q, qd, qdd (N x n each; rad,
    rad/s, rad/s^2, m for a prismatic joint) are Y @ pi (module docstring), ``gravity``
    the base frame's (3, m/s^2). Without damping, friction or drives."""
    q, qd, qdd = (np.atleast_2d(np.asarray(x, float)) for x in (q, qd, qdd))
    N, n = q.shape
    R = np.broadcast_to(np.eye(3), (N, 3, 3))
    p = np.zeros((N, 3))
    w, v = np.zeros((N, 3)), np.zeros((N, 3))
    dw, dv = np.zeros((N, 3)), np.broadcast_to(-np.asarray(gravity, float), (N, 3)).copy()
    motion = []           # S_k in the base frame: (z, p x z) or (0, z)
    bodies = []           # per body: R, p and Y_body (N x 6 x 10, body frame)
    for k in range(n):
        joint_R = R @ chain.rotation[k]
        joint_p = p + _rotate(R, np.broadcast_to(chain.origin[k], (N, 3)))
        z = _rotate(joint_R, np.broadcast_to(chain.axis[k], (N, 3)))
        if chain.kinds[k] == "prismatic":
            R, p = joint_R, joint_p + z * q[:, k:k + 1]
            s_w, s_v = np.zeros((N, 3)), z
        else:
            R, p = joint_R @ _axis_rotation(np.asarray(chain.axis[k], float), q[:, k]), joint_p
            s_w, s_v = z, _cross(joint_p, z)
        motion.append((s_w, s_v))
        e_w, e_v = s_w * qd[:, k:k + 1], s_v * qd[:, k:k + 1]
        w, v = w + e_w, v + e_v
        dw = dw + s_w * qdd[:, k:k + 1] + _cross(w, e_w)
        dv = dv + s_v * qdd[:, k:k + 1] + _cross(w, e_v) + _cross(v, e_w)
        bodies.append((R, p, _body_regressor(
            _rotate_back(R, w), _rotate_back(R, v + _cross(w, p)),
            _rotate_back(R, dw), _rotate_back(R, dv + _cross(dw, p)))))
    Y = np.zeros((N, n, PER_BODY * n))
    for k, (Rk, pk, Yb) in enumerate(bodies):
        F = np.einsum("nij,njc->nic", Rk, Yb[:, 3:])                       # N x 3 x 10
        moment = np.einsum("nij,njc->nic", Rk, Yb[:, :3]) + np.cross(
            pk[:, :, None], F, axis=1)
        for j in range(k + 1):
            s_w, s_v = motion[j]
            Y[:, j, PER_BODY * k:PER_BODY * (k + 1)] = np.einsum(
                "ni,nic->nc", s_w, moment) + np.einsum("ni,nic->nc", s_v, F)
    return Y


def _body_regressor(w, v, dw, dv) -> np.ndarray:
    """A body's spatial force (n, F) at its origin, in its frame, per unit of each of its
    ten parameters (N x 6 x 10; module docstring) at the body-frame motion (w, v) and
    acceleration (dw, dv)."""
    N = len(w)
    out = np.zeros((N, 6, PER_BODY))
    out[:, 3:, 0] = dv + _cross(w, v)                         # m
    for a in range(3):                                        # h = m c
        h = np.zeros((N, 3))
        h[:, a] = 1.0
        out[:, :3, 1 + a] = _cross(h, dv) + _cross(w, _cross(h, v)) - _cross(v, _cross(h, w))
        out[:, 3:, 1 + a] = -_cross(h, dw) - _cross(w, _cross(h, w))
    for col, (i, j) in enumerate(_INERTIA_ENTRIES):          # I about the origin
        inertia = np.zeros((3, 3))
        inertia[i, j] = inertia[j, i] = 1.0
        out[:, :3, 4 + col] = dw @ inertia + _cross(w, w @ inertia)
    return out


class UrdfRegressor:
    """The URDF arm's rigid-body parameters as ``hil identify`` and ``hil excite`` fit them
    (plant.interface: PlantModel.regressor; identify.regressor describes the protocol).
    Two names, each a block of columns of Y:

    - ``plant.payload``: a payload fixed to tip_link (``plant.payload``), its ten
      parameters in the last body's frame (the last body's columns); CONFIG's payload, or
      none, is the prior. Written back as ``plant.payload`` (mass, centre of mass and
      inertia in tip_link's frame).
    - ``plant.inertial``: every body's ten parameters (10 n columns), the URDF's links
      (without the payload) as the prior. Reported only: they are the URDF's, which a
      config does not override (the fitted config is refused with one line).

    ``n`` joints, ``ratio`` the gear ratios (None: a torque drive), ``keys``: the [plant]
    keys that must agree between the logs and CONFIG (the same chain).
    """

    names = {"plant.payload": "the payload at tip_link: m kg, m c kg m, I kg m^2 about the "
                              "last body's origin, in its frame",
             "plant.inertial": "every body's m kg, m c kg m, I kg m^2 about its joint's "
                               "origin, in its frame (the URDF's links)"}
    default = ("plant.payload",)
    keys = ("urdf", "base_link", "tip_link")

    def __init__(self, cfg):
        from hilrig.plant.urdf import model, parse
        p = cfg.plant
        self.chain = parse.load(p.urdf, p.base_link, p.tip_link)
        model.chain(p)                                    # the payload checked
        self.gravity = np.asarray(p.gravity, float)
        self.n = self.chain.n
        self.ratio = None if p.drive == "torque" else np.asarray(p.motor.gear_ratio, float)

    def width(self, name: str) -> int:
        """Columns of ``name``."""
        return PER_BODY * (self.n if name == "plant.inertial" else 1)

    def columns(self, names: list[str], q, qd, qdd) -> dict:
        """{name: its columns (n N rows, joint by joint; width(name) columns)} at the
        samples q, qd, qdd (N x n)."""
        Y = regressor(self.chain, self.gravity, q, qd, qdd)        # N x n x 10 n
        rows = Y.transpose(1, 0, 2).reshape(self.n * len(q), -1)
        return {name: rows if name == "plant.inertial" else rows[:, -PER_BODY:]
                for name in names}

    def values(self, cfg) -> dict:
        """A config's value of each name (CONFIG's: the prior); its chain is this one."""
        return {"plant.inertial": standard(self.chain),
                "plant.payload": self._payload_parameters(cfg.plant.payload)}

    def column_names(self, name: str) -> list[str]:
        """A label per column: ``plant.payload.m``, ``plant.inertial[k].I_xx``, ..."""
        if name == "plant.payload":
            return [f"plant.payload.{p}" for p in PARAMETERS]
        return [f"plant.inertial[{k + 1}].{p}" for k in range(self.n) for p in PARAMETERS]

    @staticmethod
    def unit(label: str) -> str | None:
        """The unit of a column's label, None when the label is not one of this regressor's."""
        if not label.startswith(("plant.payload.", "plant.inertial[")):
            return None
        what = label.split(".")[-1]
        return "kg" if what == "m" else "kg m" if what.startswith("mc") else "kg m^2"

    def write(self, plant: dict, values: dict, cfg=None) -> None:
        """Put the fitted ``values`` ({name: standard values}) into CONFIG's raw [plant] table.
        ConfigError (one line) for values a config cannot take (plant.inertial) or that are
        not physical (a payload's mass or inertia)."""
        from hilrig.errors import ConfigError
        if "plant.inertial" in values:
            raise ConfigError("plant.inertial: the fitted link parameters are reported, not "
                              "written: a config does not override the URDF's links (fit "
                              "plant.payload for a config, or edit the URDF)")
        if "plant.payload" not in values:
            return
        m, centre, at_centre = inertial(values["plant.payload"])
        rot, shift = self.chain.tip_frame[:3, :3], self.chain.tip_frame[:3, 3]
        local = rot.T @ at_centre @ rot
        if not m > 0.0:
            raise ConfigError(f"the fit is not physical: plant.payload's mass would be {m:.4g} kg "
                              "(fit other parameters, or excite the arm more)")
        if np.linalg.eigvalsh(local).min() < -1e-9 * max(1.0, np.abs(local).max()):
            raise ConfigError("the fit is not physical: plant.payload's inertia about its centre "
                              "of mass would not be positive semi-definite (fit fewer of its "
                              "parameters, or excite the arm more)")
        plant["payload"] = [float(v) for v in (m, *(rot.T @ (centre - shift)), local[0, 0],
                                               local[1, 1], local[2, 2], local[0, 1],
                                               local[0, 2], local[1, 2])]

    def _payload_parameters(self, payload) -> np.ndarray:
        """A [plant] payload's ten parameters in the last body's frame (zeros: none)."""
        if payload is None or len(payload) == 0 or float(payload[0]) == 0.0:
            return np.zeros(PER_BODY)
        values = [float(v) for v in payload]
        rot, shift = self.chain.tip_frame[:3, :3], self.chain.tip_frame[:3, 3]
        local = np.zeros((3, 3))
        if len(values) == 10:
            ixx, iyy, izz, ixy, ixz, iyz = values[4:]
            local = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
        m, c = values[0], rot @ np.array(values[1:4]) + shift
        at_origin = rot @ local @ rot.T + m * (c @ c * np.eye(3) - np.outer(c, c))
        return np.concatenate([[m], m * c, [at_origin[i, j] for i, j in _INERTIA_ENTRIES]])
