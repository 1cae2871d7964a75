"""The robot in 3D: its frames at a configuration q and its shape, for the live view and
the logs (telemetry.scene turns them into Foxglove's FrameTransforms and SceneUpdate).

A model that can be drawn declares the trait ``PlantModel.frames(cfg) -> Skeleton``
(plant.interface). A ``Skeleton`` gives, for a state's coordinates q,

    frames(q) -> [(child, parent, translation (3,) m, rotation quaternion (x, y, z, w))]

every moving frame in the terms of the model's base frame ``BASE`` (whose parent is
``WORLD``: the first entry places the base, e.g. turns a vertical plane upright), and
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

    frames(q): the frames at the coordinates q (the state's first nq entries).
    shapes: what is drawn, in those frames. contacts(q): a bool per contact point
    (True: touching), or None where the model has none.
    """

    frames: Callable[[np.ndarray], list]
    shapes: tuple
    contacts: Callable[[np.ndarray], np.ndarray] | None = None


def quaternion_z(angle: float) -> np.ndarray:
    """The rotation by ``angle`` (rad) about z as a quaternion (x, y, z, w)."""
    return np.array([0.0, 0.0, math.sin(0.5 * angle), math.cos(0.5 * angle)])


def quaternion(rotation: np.ndarray) -> np.ndarray:
    """A rotation matrix (3, 3) as a unit quaternion (x, y, z, w), w >= 0 (Shepperd's
    method: the largest of the four squares first, so it is accurate at every angle)."""
    r = rotation
    trace = r[0, 0] + r[1, 1] + r[2, 2]
    k = int(np.argmax([trace, r[0, 0], r[1, 1], r[2, 2]]))
    if k == 0:
        s = 2.0 * math.sqrt(1.0 + trace)
        q = [(r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, s / 4]
    elif k == 1:
        s = 2.0 * math.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
        q = [s / 4, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s, (r[2, 1] - r[1, 2]) / s]
    elif k == 2:
        s = 2.0 * math.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
        q = [(r[0, 1] + r[1, 0]) / s, s / 4, (r[1, 2] + r[2, 1]) / s, (r[0, 2] - r[2, 0]) / s]
    else:
        s = 2.0 * math.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
        q = [(r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, s / 4, (r[1, 0] - r[0, 1]) / s]
    q = np.array(q)
    return -q if q[3] < 0 else q


IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])
ORIGIN = np.zeros(3)
# base placements of the planar models: a vertical plane with x down (the serial arm:
# x -> -z, a quarter turn about y) and one with X_2 up (the flexible chain: y -> z, a
# quarter turn about x)
X_DOWN = np.array([0.0, math.sqrt(0.5), 0.0, math.sqrt(0.5)])
Y_UP = np.array([math.sqrt(0.5), 0.0, 0.0, math.sqrt(0.5)])


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

    def frames(q: np.ndarray) -> list:
        out = [(BASE, WORLD, ORIGIN, X_DOWN)]
        x = y = phi = 0.0
        for i in range(n):
            phi += q[i]
            out.append((names[i], BASE, np.array([x, y, 0.0]), quaternion_z(phi)))
            x += length[i] * math.cos(phi)
            y += length[i] * math.sin(phi)
        out.append(("tip", BASE, np.array([x, y, 0.0]), quaternion_z(phi)))
        return out

    shapes = tuple(_rod(names[i], length[i]) for i in range(n)) + \
        tuple(_sphere(names[i], joint=i) for i in range(n)) + (_sphere("tip"),)
    return Skeleton(frames, shapes)


# -- the 3RRR (paper 003) ---------------------------------------------------------------

def rrr3(geometry) -> Skeleton:
    """The 3RRR of ``geometry`` (plant.rrr3.Rrr3Params) in its horizontal plane: per leg i
    (1..3) ``leg{i}_link1`` at the base joint O_i along O_iA_i (angle theta_i),
    ``leg{i}_link2`` at A_i along A_iB_i; ``platform`` at C turned by phi; the base
    triangle O_1O_2O_3 in the base frame, the platform triangle B_1B_2B_3 in ``platform``."""
    base = np.asarray(geometry.base, dtype=float)
    l1, l2, b = float(geometry.l1), float(geometry.l2), float(geometry.platform_radius)
    alpha = np.asarray(geometry.alpha, dtype=float)
    corners = np.column_stack([b * np.cos(alpha), b * np.sin(alpha), np.zeros(3)])

    def frames(q: np.ndarray) -> list:
        out = [(BASE, WORLD, ORIGIN, IDENTITY)]
        c, phi = np.array([q[3], q[4]]), q[5]
        for i in range(3):
            a = base[i] + l1 * np.array([math.cos(q[i]), math.sin(q[i])])
            bi = c + b * np.array([math.cos(phi + alpha[i]), math.sin(phi + alpha[i])])
            d = bi - a
            out.append((f"leg{i + 1}_link1", BASE, np.array([base[i, 0], base[i, 1], 0.0]),
                        quaternion_z(q[i])))
            out.append((f"leg{i + 1}_link2", BASE, np.array([a[0], a[1], 0.0]),
                        quaternion_z(math.atan2(d[1], d[0]))))
        out.append(("platform", BASE, np.array([c[0], c[1], 0.0]), quaternion_z(phi)))
        return out

    triangle = tuple(map(tuple, np.vstack([corners, corners[:1]])))
    floor = np.column_stack([base, np.zeros(3)])
    shapes = []
    for i in range(3):
        shapes += [_rod(f"leg{i + 1}_link1", l1), _rod(f"leg{i + 1}_link2", l2),
                   _sphere(f"leg{i + 1}_link1", joint=i), _sphere(f"leg{i + 1}_link2"),
                   _sphere("platform", corners[i])]
    shapes += [Shape("platform", "lines", triangle, 0.02),
               Shape(BASE, "lines", tuple(map(tuple, np.vstack([floor, floor[:1]]))), 0.01)]
    return Skeleton(frames, tuple(shapes))


# -- the flexible chain (paper 004) -------------------------------------------------------

def flex_chain(params: np.ndarray, n: int, length: float,
               end_points: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Skeleton:
    """The flexible chain of n links of ``length`` (m) in its vertical plane (X_1
    horizontal, X_2 up): ``node{k}`` at each end point O_k (k = 1 .. n + 1, the contact
    points: in contact at or below the ground, X_2 <= 0), ``link{i}`` at O_i along the
    chord O_iO_{i+1} (a rod of the link's length: the bending shows as the chord's turn).
    ``end_points(params, q)``: plant.flex_chain.chain.end_points."""
    names = tuple(f"link{i + 1}" for i in range(n))

    def frames(q: np.ndarray) -> list:
        points = end_points(params, np.asarray(q, dtype=float))
        out = [(BASE, WORLD, ORIGIN, Y_UP)]
        for i in range(n):
            d = points[i + 1] - points[i]
            out.append((names[i], BASE, np.array([points[i, 0], points[i, 1], 0.0]),
                        quaternion_z(math.atan2(d[1], d[0]))))
        for k in range(n + 1):
            out.append((f"node{k + 1}", BASE, np.array([points[k, 0], points[k, 1], 0.0]),
                        IDENTITY))
        return out

    def contacts(q: np.ndarray) -> np.ndarray:
        return end_points(params, np.asarray(q, dtype=float))[:, 1] <= 0.0

    shapes = tuple(_rod(names[i], length) for i in range(n)) + \
        tuple(_sphere(f"node{k + 1}", contact=k) for k in range(n + 1)) + \
        (Shape(BASE, "lines", ((-3.0, 0.0, 0.0), (3.0, 0.0, 0.0)), 0.01),)   # the ground
    return Skeleton(frames, shapes, contacts)
