"""The tip of a URDF chain (plant.urdf.dynamics' params block): its pose and its Jacobian,
as numba kernels that allocate nothing (the caller passes the scratch of
``dynamics.scratch_size(n)`` floats, or plant.model_kernels does it on its stack).

The tip is ``tip_link``'s frame (the chain's last link; the fixed joints after the last
moving joint included). Everything is in the base frame (``base_link``):

    tip_pose:      rotation R (3 x 3, the tip frame's axes as columns) and the position
                   p of its origin, m
    tip_jacobian:  J (6 x n) with [v; w] = J qd: v the velocity of the tip's origin
                   (m/s), w the tip's angular velocity (rad/s), both in the base frame
                   (Pinocchio's LOCAL_WORLD_ALIGNED)

Joint k's column is its motion subspace S_k = (z, p x z) (dynamics' kinematics pass:
(0, z) for a prismatic joint) moved to the tip's origin: w = z, v = p_k x z + z x p_tip.
"""
from hilrig.jit.kernel import kernel
from hilrig.plant.urdf.dynamics import (
    BODY_STRIDE,
    JOINT_STRIDE,
    P_JOINTS,
    P_N,
    S_MOTION,
    kinematics,
)


@kernel
def tip_pose(p, q, rotation, position, s):
    """tip_link's frame at coordinates q: ``rotation`` (3 x 3) and ``position`` (3, m) in
    the base frame. ``s``: scratch of dynamics.scratch_size(n) floats."""
    n = int(p[P_N])
    kinematics(p, q, s)
    pose = BODY_STRIDE * n              # the last body's pose, as kinematics leaves it
    tip = P_JOINTS + JOINT_STRIDE * n   # tip_link's frame in the last body's frame
    for i in range(3):
        acc = s[pose + 9 + i]
        for j in range(3):
            acc += s[pose + 3 * i + j] * p[tip + 9 + j]
            v = 0.0
            for m in range(3):
                v += s[pose + 3 * i + m] * p[tip + 3 * m + j]
            rotation[i, j] = v
        position[i] = acc


@kernel
def tip_jacobian(p, q, jacobian, s):
    """The tip's Jacobian at q into ``jacobian`` (6 x n: rows v (m/s), then w (rad/s), base
    frame; module docstring). ``s``: scratch of dynamics.scratch_size(n) floats."""
    n = int(p[P_N])
    kinematics(p, q, s)
    pose = BODY_STRIDE * n
    tip = P_JOINTS + JOINT_STRIDE * n
    x = s[pose + 9] + s[pose] * p[tip + 9] + s[pose + 1] * p[tip + 10] + s[pose + 2] * p[tip + 11]
    y = s[pose + 10] + s[pose + 3] * p[tip + 9] + s[pose + 4] * p[tip + 10] \
        + s[pose + 5] * p[tip + 11]
    z = s[pose + 11] + s[pose + 6] * p[tip + 9] + s[pose + 7] * p[tip + 10] \
        + s[pose + 8] * p[tip + 11]
    for k in range(n):
        b = BODY_STRIDE * k + S_MOTION
        w0, w1, w2 = s[b], s[b + 1], s[b + 2]
        jacobian[0, k] = s[b + 3] + w1 * z - w2 * y
        jacobian[1, k] = s[b + 4] + w2 * x - w0 * z
        jacobian[2, k] = s[b + 5] + w0 * y - w1 * x
        jacobian[3, k] = w0
        jacobian[4, k] = w1
        jacobian[5, k] = w2
