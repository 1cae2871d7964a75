"""The robot in 3D: its frames at a configuration q and its shape, for the live view and
the logs (telemetry.scene turns them into Foxglove's FrameTransforms and SceneUpdate).

A model that can be drawn declares the trait ``PlantModel.frames(cfg) -> Skeleton``
(plant.interface). A ``Skeleton`` names its frames, ``(child, parent)``, and gives their
poses at rows of coordinates q (numpy over the rows: a block of log rows at once),

    poses(qs) -> translations (n, F, 3) m, quaternions (n, F, 4) (x, y, z, w)

every moving frame in the terms of the model's base frame ``BASE`` (whose parent is
``WORLD``: the first frame places the base, e.g. turns a vertical plane upright), and
``shapes``: rods, spheres and polylines fixed in those frames (``Shape``), each drawn
once and carried by its frame. A sphere may mark a coordinate's joint (coloured while
that joint is jammed) or a contact point (coloured while ``contacts(q)`` says it
touches). Python and numpy, off the critical path: the live view and the log writer call
it at their rates, never the loop.

This module holds the papers' models: the planar serial arm (paper 000: plant.serial_arm),
the 3RRR with its legs and platform (paper 003: plant.rrr3) and the flexible chain with
its end points, the contact points (paper 004: plant.flex_chain); a URDF chain's are in
plant.urdf.frames.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

WORLD = "world"
BASE = "base"
ROD = 0.04        # m, diameter of a link's rod
JOINT = 0.07      # m, diameter of a joint's sphere


@dataclass(frozen=True)
class Shape:
    """A piece of the robot's shape, fixed in ``frame``.

    kind: ``"rod"`` (a cylinder from points[0] to points[1]), ``"sphere"`` (centred at
    points[0]) or ``"lines"`` (a polyline through points). points: (k, 3) in the frame,
    m. size: diameter (rod, sphere) or line thickness, m. joint: the coordinate (0-based)
    whose joint the sphere marks, or -1. contact: the contact point (an index of
    ``Skeleton.contacts``' result) it marks, or -1.
    """

    frame: str
    kind: str
    points: tuple
    size: float
    joint: int = -1
    contact: int = -1


@dataclass(frozen=True)
class Skeleton:
    """A model's frames and shape (module docstring).

    frames: (child, parent) of every frame, ``(BASE, WORLD)`` first. poses(qs): the
    frames' poses at the rows of coordinates qs (n, nq): translations (n, F, 3), m, and
    quaternions (n, F, 4) (x, y, z, w), F = len(frames), each in its parent's terms.
    shapes: what is drawn, in those frames. contacts(qs): (n, K) bools, True where
    contact point k touches, or None where the model has none.
    """

    frames: tuple
    poses: Callable[[np.ndarray], tuple]
    shapes: tuple
    contacts: Callable[[np.ndarray], np.ndarray] | None = None

    def at(self, q: np.ndarray) -> list:
        """[(child, parent, translation (3,), quaternion (4,))] at one q."""
        t, r = self.poses(np.asarray(q, dtype=float)[None, :])
        return [(child, parent, t[0, f], r[0, f])
                for f, (child, parent) in enumerate(self.frames)]


def quaternion_z(angle: np.ndarray) -> np.ndarray:
    """Rotations by ``angle`` (rad, any shape) about z as quaternions (..., 4) (x, y, z, w)."""
    angle = np.asarray(angle, dtype=float)
    out = np.zeros(angle.shape + (4,))
    out[..., 2], out[..., 3] = np.sin(0.5 * angle), np.cos(0.5 * angle)
    return out


def quaternion(rotation: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) as unit quaternions (..., 4) (x, y, z, w), w >= 0
    (Shepperd's method: from the largest of the four squares, accurate at every angle)."""
    r = np.asarray(rotation, dtype=float)
    r00, r11, r22 = r[..., 0, 0], r[..., 1, 1], r[..., 2, 2]
    squares = np.stack([1.0 + r00 + r11 + r22, 1.0 + r00 - r11 - r22,
                        1.0 - r00 + r11 - r22, 1.0 - r00 - r11 + r22], axis=-1)
    k = np.argmax(squares, axis=-1)
    s = 2.0 * np.sqrt(np.take_along_axis(squares, k[..., None], axis=-1)[..., 0])
    a, b = r[..., 2, 1] - r[..., 1, 2], r[..., 0, 2] - r[..., 2, 0]
    c = r[..., 1, 0] - r[..., 0, 1]
    xy, xz, yz = r[..., 0, 1] + r[..., 1, 0], r[..., 0, 2] + r[..., 2, 0], \
        r[..., 1, 2] + r[..., 2, 1]
    candidates = np.stack([np.stack([a, b, c, s * s / 4], -1), np.stack([s * s / 4, xy, xz, a], -1),
                           np.stack([xy, s * s / 4, yz, b], -1), np.stack([xz, yz, s * s / 4, c], -1)],
                          axis=-2)
    q = np.take_along_axis(candidates, k[..., None, None], axis=-2)[..., 0, :] / s[..., None]
    return np.where(q[..., 3:] < 0, -q, q)


IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])
# base placements of the planar models: a vertical plane with x down (the serial arm:
# x -> -z, a quarter turn about y) and one with X_2 up (the flexible chain: y -> z, a
# quarter turn about x)
X_DOWN = np.array([0.0, math.sqrt(0.5), 0.0, math.sqrt(0.5)])
Y_UP = np.array([math.sqrt(0.5), 0.0, 0.0, math.sqrt(0.5)])


def planar(n: int, base: np.ndarray, xy: np.ndarray, angle: np.ndarray) -> tuple:
    """Poses of a planar model's frames: ``base`` (the base frame's quaternion in the
    world) first, then frames at the points xy (n, F - 1, 2), m, turned by ``angle``
    (n, F - 1), rad, about z."""
    t = np.zeros((n, xy.shape[1] + 1, 3))
    t[:, 1:, :2] = xy
    r = np.empty((n, xy.shape[1] + 1, 4))
    r[:, 0] = base
    r[:, 1:] = quaternion_z(angle)
    return t, r


def _rod(frame: str, length: float) -> Shape:
    """A rod along the frame's x axis from its origin, ``length`` m."""
    return Shape(frame, "rod", ((0.0, 0.0, 0.0), (length, 0.0, 0.0)), ROD)


def _sphere(frame: str, at=(0.0, 0.0, 0.0), joint: int = -1, contact: int = -1) -> Shape:
    return Shape(frame, "sphere", (tuple(at),), JOINT, joint=joint, contact=contact)


# -- the planar serial arm (paper 000) ------------------------------------------------

def serial_arm(length) -> Skeleton:
    """The serial arm of link lengths ``length`` (m): frame ``link{i}`` at joint i, its x
    axis along link i (absolute angle phi_i = q_1 + .. + q_i from the downward x axis,
    about z), ``tip`` at the end of the last link; the base turned so that x points down."""
    length = np.asarray(length, dtype=float)
    n = len(length)
    names = tuple(f"link{i + 1}" for i in range(n)) + ("tip",)

    def poses(qs: np.ndarray) -> tuple:
        phi = np.cumsum(qs[:, :n], axis=1)
        ends = np.cumsum(length[:, None] * np.stack([np.cos(phi), np.sin(phi)], -1), axis=1)
        xy = np.concatenate([np.zeros((len(qs), 1, 2)), ends], axis=1)   # joints, tip
        return planar(len(qs), X_DOWN, xy, np.concatenate([phi, phi[:, -1:]], axis=1))

    shapes = tuple(_rod(names[i], length[i]) for i in range(n)) + \
        tuple(_sphere(names[i], joint=i) for i in range(n)) + (_sphere("tip"),)
    return Skeleton(((BASE, WORLD),) + tuple((name, BASE) for name in names), poses, shapes)


# -- the 3RRR (paper 003) ---------------------------------------------------------------

def rrr3(geometry) -> Skeleton:
    """The 3RRR of ``geometry`` (plant.rrr3.Rrr3Params) in its horizontal plane: per leg i
    (1..3) ``leg{i}_link1`` at the base joint O_i along O_iA_i (angle theta_i),
    ``leg{i}_link2`` at A_i along A_iB_i; ``platform`` at C turned by phi; the base
    triangle O_1O_2O_3 in the base frame, the platform triangle B_1B_2B_3 in ``platform``."""
    base = np.asarray(geometry.base, dtype=float)
    l1, b = float(geometry.l1), float(geometry.platform_radius)
    alpha = np.asarray(geometry.alpha, dtype=float)
    corners = np.column_stack([b * np.cos(alpha), b * np.sin(alpha), np.zeros(3)])
    names = tuple(f"leg{i + 1}_link{k}" for i in range(3) for k in (1, 2)) + ("platform",)

    def poses(qs: np.ndarray) -> tuple:
        n = len(qs)
        theta, c, phi = qs[:, :3], qs[:, 3:5], qs[:, 5]
        a = base + l1 * np.stack([np.cos(theta), np.sin(theta)], -1)          # (n, 3, 2)
        turn = phi[:, None] + alpha
        d = c[:, None, :] + b * np.stack([np.cos(turn), np.sin(turn)], -1) - a
        xy = np.empty((n, 7, 2))
        xy[:, 0:6:2], xy[:, 1:6:2], xy[:, 6] = base, a, c
        angle = np.empty((n, 7))
        angle[:, 0:6:2], angle[:, 1:6:2] = theta, np.arctan2(d[..., 1], d[..., 0])
        angle[:, 6] = phi
        return planar(n, IDENTITY, xy, angle)

    triangle = tuple(map(tuple, np.vstack([corners, corners[:1]])))
    floor = np.column_stack([base, np.zeros(3)])
    shapes = []
    for i in range(3):
        shapes += [_rod(f"leg{i + 1}_link1", l1), _rod(f"leg{i + 1}_link2", geometry.l2),
                   _sphere(f"leg{i + 1}_link1", joint=i), _sphere(f"leg{i + 1}_link2"),
                   _sphere("platform", corners[i])]
    shapes += [Shape("platform", "lines", triangle, 0.02),
               Shape(BASE, "lines", tuple(map(tuple, np.vstack([floor, floor[:1]]))), 0.01)]
    return Skeleton(((BASE, WORLD),) + tuple((name, BASE) for name in names), poses,
                    tuple(shapes))


# -- the flexible chain (paper 004) -------------------------------------------------------

def flex_chain(params: np.ndarray, n: int, length: float,
               end_points: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Skeleton:
    """The flexible chain of n links of ``length`` (m) in its vertical plane (X_1
    horizontal, X_2 up): ``link{i}`` at O_i along the chord O_iO_{i+1} (a rod of the
    link's length: the bending shows as the chord's turn), ``node{k}`` at each end point
    O_k (k = 1 .. n + 1, the contact points: in contact at or below the ground, X_2 <= 0).
    ``end_points(params, q)``: plant.flex_chain.chain.end_points, (n + 1, 2) m."""
    names = tuple(f"link{i + 1}" for i in range(n)) + tuple(f"node{k + 1}" for k in range(n + 1))

    def points(qs: np.ndarray) -> np.ndarray:
        return np.stack([end_points(params, np.ascontiguousarray(q)) for q in qs])

    def poses(qs: np.ndarray) -> tuple:
        p = points(qs)                                                   # (rows, n + 1, 2)
        d = p[:, 1:] - p[:, :-1]
        angle = np.concatenate([np.arctan2(d[..., 1], d[..., 0]), np.zeros((len(qs), n + 1))],
                               axis=1)
        return planar(len(qs), Y_UP, np.concatenate([p[:, :-1], p], axis=1), angle)

    def contacts(qs: np.ndarray) -> np.ndarray:
        return points(qs)[..., 1] <= 0.0

    shapes = tuple(_rod(f"link{i + 1}", length) for i in range(n)) + \
        tuple(_sphere(f"node{k + 1}", contact=k) for k in range(n + 1)) + \
        (Shape(BASE, "lines", ((-3.0, 0.0, 0.0), (3.0, 0.0, 0.0)), 0.01),)   # the ground
    return Skeleton(((BASE, WORLD),) + tuple((name, BASE) for name in names), poses, shapes,
                    contacts)
