"""A URDF chain in 3D (plant.frames): the frame of every moving joint's child link at q,
from parse.UrdfChain's joint placements and axes, in Python (off the critical path).

Body k's frame is the child link of moving joint k (URDF's own link name, so a viewer's
URDF layer and these frames agree); its pose in ``base_link``'s frame is

    T_k = T_{k-1} [rotation_k | origin_k] motion_k(q_k),   T_0 = I,

motion_k a rotation by q_k (rad) about axis_k (revolute, continuous) or a translation
by q_k (m) along it (prismatic), for a block of rows of q at once (numpy). ``base_link`` is the model's base frame
(plant.frames.BASE), placed at the world's origin as it is (ROS: z up). The shape: a rod
from each joint to the next (in the body before it), a sphere at each joint (coloured
while it is jammed).
"""
from __future__ import annotations

import numpy as np
from hilrig.plant.frames import BASE, IDENTITY, JOINT, ROD, WORLD, Shape, Skeleton, quaternion
from hilrig.plant.urdf import parse

SHORTEST_ROD = 1e-3    # m: joints closer than this get no rod between them


def poses(chain: parse.UrdfChain, qs: np.ndarray) -> np.ndarray:
    """(rows, n, 4, 4) poses of the bodies 1..n in base_link's frame (m) at the rows of
    coordinates qs (rows, n)."""
    rows = len(qs)
    out = np.empty((rows, chain.n, 4, 4))
    pose = np.broadcast_to(np.eye(4), (rows, 4, 4))
    for k in range(chain.n):
        placement = np.eye(4)
        placement[:3, :3], placement[:3, 3] = chain.rotation[k], chain.origin[k]
        motion = np.broadcast_to(np.eye(4), (rows, 4, 4)).copy()
        axis = chain.axis[k]
        if chain.kinds[k] == "prismatic":
            motion[:, :3, 3] = qs[:, k, None] * axis
        else:                           # Rodrigues: I + sin K + (1 - cos) K^2
            skew = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]],
                             [-axis[1], axis[0], 0.0]])
            angle = qs[:, k, None, None]
            motion[:, :3, :3] += np.sin(angle) * skew + (1.0 - np.cos(angle)) * (skew @ skew)
        pose = pose @ placement @ motion
        out[:, k] = pose
    return out


def link_names(chain: parse.UrdfChain) -> tuple[str, ...]:
    """The child link of each moving joint of the chain (body k's frame name)."""
    child = {joint.name: joint.child for joint in parse._read(chain.path).joints}
    return tuple(child[name] for name in chain.joints)


def skeleton(chain: parse.UrdfChain) -> Skeleton:
    """The chain's frames (each body's pose in base_link's terms) and shape."""
    names = link_names(chain)

    def frame_poses(qs: np.ndarray) -> tuple:
        bodies = poses(chain, qs)
        t = np.zeros((len(qs), chain.n + 1, 3))
        r = np.empty((len(qs), chain.n + 1, 4))
        r[:, 0] = IDENTITY
        t[:, 1:], r[:, 1:] = bodies[..., :3, 3], quaternion(bodies[..., :3, :3])
        return t, r

    shapes = []
    for k in range(chain.n):
        before = names[k - 1] if k else BASE
        if np.linalg.norm(chain.origin[k]) >= SHORTEST_ROD:
            shapes.append(Shape(before, "rod", ((0.0, 0.0, 0.0), tuple(chain.origin[k])), ROD))
        shapes.append(Shape(names[k], "sphere", ((0.0, 0.0, 0.0),), JOINT, joint=k))
    return Skeleton(((BASE, WORLD),) + tuple((name, BASE) for name in names), frame_poses,
                    tuple(shapes))
