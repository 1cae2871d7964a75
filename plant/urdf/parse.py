"""A URDF read once, outside every loop, into the flat arrays of a serial chain
(docs/URDF.md).

The chain runs from ``base_link`` (fixed to the world) to ``tip_link`` through the URDF's
joints; its moving joints (revolute, continuous, prismatic) are its coordinates, base to
tip. Body k is everything that moves rigidly with moving joint k: the joint's child link,
the links hanging from it through fixed joints, and any branch off the chain (a gripper's
fingers beyond the tip, a side arm), whose moving joints are locked at 0 (or the limit
nearest 0) and carried as rigid mass. The links above ``base_link`` and those fixed to
it do not move and are not part of the model.

Units as in URDF: m, kg, kg m^2, rad; a joint's damping in N m s/rad (N s/m prismatic).
Frames: body k's frame is the child link frame of moving joint k; each joint's fixed
placement (``rotation``, ``origin``) is given in the frame of the body before it (for the
first joint: ``base_link``'s frame, through any fixed joints between them).

What the model cannot represent is refused with one ConfigError line that names the link
or joint: a closed loop (a link with two parent joints), a floating or planar joint, a
``<mimic>`` joint on the chain, a moving body without ``<inertial>``, a zero or negative
mass, a joint axis of zero length, a ``tip_link`` that is not below ``base_link``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources

import numpy as np
from hilrig.errors import ConfigError

MOVING = ("revolute", "continuous", "prismatic")
ROBOTS_PACKAGE = "hilrig.plant.urdf"


@dataclass(frozen=True, eq=False)
class UrdfChain:
    """A serial chain of n moving joints cut out of a URDF (module docstring).

    Per joint k (arrays of n rows), base to tip:
        joints: names; kinds: "revolute", "continuous" or "prismatic"
        axis (n, 3): unit joint axis in the joint frame (= body k's frame)
        rotation (n, 3, 3), origin (n, 3): joint k's frame in body k-1's frame (m)
        mass (n,) kg; com (n, 3) m, in body k's frame; inertia (n, 3, 3) kg m^2 about
        the centre of mass, in body k's frame (the whole rigid body k)
        damping (n,) N m s/rad or N s/m; friction (n,) N m or N (<dynamics>)
        lower, upper (n,) rad or m (-inf, inf where the URDF gives none, continuous
        joints); effort (n,) N m or N and velocity (n,) rad/s or m/s (inf where none)
    locked: (name, value) of each off-chain moving joint carried locked (rad or m).
    tip_frame (4, 4): tip_link's frame in the last body's frame (the fixed joints between
    the last moving joint's child link and tip_link composed; identity when they are one).
    """

    robot: str
    path: str
    base_link: str
    tip_link: str
    joints: tuple
    kinds: tuple
    axis: np.ndarray
    rotation: np.ndarray
    origin: np.ndarray
    mass: np.ndarray
    com: np.ndarray
    inertia: np.ndarray
    damping: np.ndarray
    friction: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    effort: np.ndarray
    velocity: np.ndarray
    locked: tuple
    tip_frame: np.ndarray = field(default_factory=lambda: np.eye(4))

    @property
    def n(self) -> int:
        """Number of moving joints (coordinates)."""
        return len(self.joints)


@lru_cache(maxsize=None)     # the package's files: read once per process
def shipped_robots() -> tuple[str, ...]:
    """The names of the robots shipped with hilrig (plant/urdf/robots/NAME.urdf)."""
    folder = resources.files(ROBOTS_PACKAGE) / "robots"
    return tuple(sorted(entry.name[:-5] for entry in folder.iterdir()
                        if entry.name.endswith(".urdf")))


def resolve(urdf: str) -> str:
    """The file ``plant.urdf`` names: a path (relative to the current folder), or the name
    of a shipped robot (``panda``, ``ur5``, ``kinova``). ConfigError when neither."""
    if os.path.isfile(urdf):
        return os.path.abspath(urdf)
    if urdf in shipped_robots():
        return _shipped(urdf)
    raise ConfigError(f"plant.urdf: {urdf!r} is neither a file nor a shipped robot "
                      f"({', '.join(shipped_robots())})")


@lru_cache(maxsize=None)
def _shipped(name: str) -> str:
    """The file of the shipped robot ``name``."""
    with resources.as_file(resources.files(ROBOTS_PACKAGE) / "robots" / f"{name}.urdf") as path:
        return str(path)


def load(urdf: str, base_link: str | None = None, tip_link: str | None = None) -> UrdfChain:
    """The chain ``plant.urdf``, ``plant.base_link`` and ``plant.tip_link`` name (None: the
    URDF's root; the end of its only line of moving joints), read once per file version."""
    path = resolve(urdf)
    return _load(path, os.stat(path).st_mtime_ns, base_link, tip_link)


@lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int, base_link: str | None, tip_link: str | None) -> UrdfChain:
    robot = _read(path)
    return _Tree(robot, path).chain(base_link, tip_link)


def _read(path: str):
    """yourdfpy's Robot of the file, without meshes or scene graphs."""
    import yourdfpy

    try:
        urdf = yourdfpy.URDF.load(path, build_scene_graph=False, load_meshes=False,
                                  build_collision_scene_graph=False,
                                  load_collision_meshes=False)
    except Exception as exc:    # lxml's parse errors, yourdfpy's missing attributes
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"plant.urdf: {path} is not a readable URDF: {first}") from exc
    return urdf.robot


def _number(value, default: float) -> float:
    """A URDF attribute as a float (yourdfpy leaves some as strings), default when absent."""
    return default if value is None else float(value)


def _rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rotation by ``angle`` (rad) about the unit ``axis`` (Rodrigues)."""
    x, y, z = axis
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


class _Tree:
    """The URDF's links and joints as a tree, with the checks that name the culprit."""

    def __init__(self, robot, path: str):
        self.robot, self.path = robot, path
        self.links = {link.name: link for link in robot.links}
        self.parent_joint: dict = {}
        self.children: dict = {name: [] for name in self.links}
        for joint in robot.joints:
            for end in (joint.parent, joint.child):
                if end not in self.links:
                    raise ConfigError(f"plant.urdf: joint {joint.name!r} names link {end!r}, "
                                      f"which {os.path.basename(path)} does not define")
            if joint.child in self.parent_joint:
                raise ConfigError(f"plant.urdf: closed loop: link {joint.child!r} is the child "
                                  f"of joints {self.parent_joint[joint.child].name!r} and "
                                  f"{joint.name!r}; hilrig models open chains only")
            self.parent_joint[joint.child] = joint
            self.children[joint.parent].append(joint)
        for name in self.links:         # a cycle of joints, each link with one parent
            seen, link = {name}, name
            while link in self.parent_joint:
                link = self.parent_joint[link].parent
                if link in seen:
                    raise ConfigError(f"plant.urdf: closed loop: the joints above link "
                                      f"{name!r} lead back to it; hilrig models open chains "
                                      f"only")
                seen.add(link)
        self.roots = [name for name in self.links if name not in self.parent_joint]
        self.locked: list = []          # (name, value) of the off-chain joints carried

    # -- the chain ---------------------------------------------------------------
    def chain(self, base_link: str | None, tip_link: str | None) -> UrdfChain:
        base = self._base(base_link)
        tip = self._tip(base, tip_link)
        path = []                       # joints from base to tip
        link = tip
        while link != base:
            joint = self.parent_joint.get(link)
            if joint is None:
                raise ConfigError(f"plant.tip_link: {tip!r} is not below plant.base_link "
                                  f"{base!r} in {os.path.basename(self.path)}")
            path.append(joint)
            link = joint.parent
        path.reverse()
        for joint in path:
            self._check_type(joint)
        moving = [joint for joint in path if joint.type in MOVING]
        if not moving:
            raise ConfigError(f"plant.tip_link: no moving joint between {base!r} and {tip!r}")
        for joint in moving:
            if joint.mimic is not None:
                raise ConfigError(f"plant.urdf: joint {joint.name!r} mimics joint "
                                  f"{joint.mimic.joint!r}; <mimic> joints are not supported "
                                  f"on the chain")
        rows = [self._joint_row(k, joint, moving, base) for k, joint in enumerate(moving)]
        locked = tuple(sorted(self.locked))
        fields = {key: np.array([row[key] for row in rows]) for key in rows[0]}
        tip_frame, link = np.eye(4), tip
        while link != moving[-1].child:
            inner = self.parent_joint[link]
            tip_frame = _origin(inner) @ tip_frame
            link = inner.parent
        return UrdfChain(robot=self.robot.name, path=self.path, base_link=base, tip_link=tip,
                         joints=tuple(j.name for j in moving),
                         kinds=tuple(j.type for j in moving), locked=locked,
                         tip_frame=tip_frame, **fields)

    def _base(self, base_link: str | None) -> str:
        if base_link is None:
            if len(self.roots) > 1:
                raise ConfigError(f"plant.base_link: {os.path.basename(self.path)} has "
                                  f"{len(self.roots)} root links ({', '.join(self.roots)}): "
                                  f"name one")
            return self.roots[0]
        if base_link not in self.links:
            raise ConfigError(f"plant.base_link: no link {base_link!r} in "
                              f"{os.path.basename(self.path)}")
        return base_link

    def _tip(self, base: str, tip_link: str | None) -> str:
        """The named tip, or the end of the only line of moving joints below ``base``."""
        if tip_link is not None:
            if tip_link not in self.links:
                raise ConfigError(f"plant.tip_link: no link {tip_link!r} in "
                                  f"{os.path.basename(self.path)}")
            return tip_link
        link, last = base, None
        while True:
            below = self._reachable_moving(link)
            if not below:
                break
            if len(below) > 1:
                raise ConfigError(f"plant.tip_link: the moving joints branch below link "
                                  f"{link!r} ({', '.join(j.name for j in below)}): name the "
                                  f"chain's last link")
            last = below[0]
            link = last.child
        if last is None:
            raise ConfigError(f"plant.tip_link: no moving joint below {base!r}")
        return last.child

    def _reachable_moving(self, link: str) -> list:
        """The moving joints reached from ``link`` through fixed joints only."""
        found, todo = [], [link]
        while todo:
            for joint in self.children[todo.pop()]:
                if joint.type in MOVING:
                    found.append(joint)
                else:
                    todo.append(joint.child)
        return found

    def _check_type(self, joint) -> None:
        if joint.type in ("floating", "planar"):
            raise ConfigError(f"plant.urdf: joint {joint.name!r} is {joint.type}: hilrig "
                              f"models a fixed-base chain (no floating base)")
        if joint.type not in MOVING + ("fixed",):
            raise ConfigError(f"plant.urdf: joint {joint.name!r} has unknown type "
                              f"{joint.type!r}")

    # -- one moving joint and its body ------------------------------------------
    def _joint_row(self, k: int, joint, moving: list, base: str) -> dict:
        axis = _axis(joint)
        # the joint's frame in the frame of the body before it (the previous moving
        # joint's child link, or base_link), through the fixed joints in between
        start = moving[k - 1].child if k > 0 else base
        placement = _origin(joint)
        link = joint.parent
        while link != start:
            inner = self.parent_joint[link]
            placement = _origin(inner) @ placement
            link = inner.parent
        stop = moving[k + 1] if k + 1 < len(moving) else None
        mass, com, inertia = self._body(joint, stop)
        limit, dynamics = joint.limit, joint.dynamics
        continuous = joint.type == "continuous"
        return {"axis": axis, "rotation": placement[:3, :3], "origin": placement[:3, 3],
                "mass": mass, "com": com, "inertia": inertia,
                "damping": _number(getattr(dynamics, "damping", None), 0.0),
                "friction": _number(getattr(dynamics, "friction", None), 0.0),
                "lower": -math.inf if continuous or limit is None
                else _number(limit.lower, -math.inf),
                "upper": math.inf if continuous or limit is None
                else _number(limit.upper, math.inf),
                "effort": math.inf if limit is None else _number(limit.effort, math.inf),
                "velocity": math.inf if limit is None else _number(limit.velocity, math.inf)}

    def _body(self, joint, stop) -> tuple[float, np.ndarray, np.ndarray]:
        """Mass (kg), centre of mass (m) and inertia about it (kg m^2) of the rigid body
        that moving ``joint`` turns, in its child link's frame: every link below it except
        the subtree of the chain's next moving joint ``stop``."""
        parts = []                      # (mass, com, inertia at com), body frame
        declared = False
        todo = [(joint.child, np.eye(4))]
        while todo:
            name, pose = todo.pop()
            inertial = self.links[name].inertial
            if inertial is not None:
                declared = True
                mass = _number(inertial.mass, 0.0)
                local = np.zeros((3, 3)) if inertial.inertia is None \
                    else np.asarray(inertial.inertia, dtype=float)
                if mass < 0.0 or (mass == 0.0 and np.any(local != 0.0)):
                    raise ConfigError(f"plant.urdf: link {name!r} has mass {mass:g} kg with "
                                      f"that inertia: a link's mass must be positive (or 0 "
                                      f"with zero inertia, a massless frame)")
                frame = pose @ (np.eye(4) if inertial.origin is None else inertial.origin)
                rot = frame[:3, :3]
                parts.append((mass, frame[:3, 3], rot @ local @ rot.T))
            for child in self.children[name]:
                if child is stop:
                    continue
                self._check_type(child)
                if child.type in MOVING:
                    self.locked.append((child.name, _locked_value(child)))
                todo.append((child.child, pose @ _origin(child) @ _locked_motion(child)))
        if not declared:
            raise ConfigError(f"plant.urdf: link {joint.child!r} (moved by joint "
                              f"{joint.name!r}) has no <inertial>: a moving link needs mass "
                              f"and inertia")
        total = sum(m for m, _, _ in parts)
        if not total > 0.0:
            raise ConfigError(f"plant.urdf: link {joint.child!r} (moved by joint "
                              f"{joint.name!r}) has zero mass: a moving link needs a positive "
                              f"mass")
        com = sum(m * c for m, c, _ in parts) / total
        inertia = np.zeros((3, 3))
        for m, c, inertia_c in parts:
            d = c - com
            inertia += inertia_c + m * (d @ d * np.eye(3) - np.outer(d, d))
        return total, com, inertia


def with_payload(chain: UrdfChain, payload) -> UrdfChain:
    """The chain with a payload rigidly fixed to its tip link (``plant.payload``): [mass kg,
    cx, cy, cz m] (its centre of mass in tip_link's frame), optionally followed by its
    inertia about that centre in tip_link's frame, [Ixx, Iyy, Izz, Ixy, Ixz, Iyz] kg m^2
    (unset: a point mass). Merged into the last body's mass, centre of mass and inertia
    (parallel axes), as a fixed link would be; None or mass 0: the chain as it is."""
    if payload is None or len(payload) == 0:
        return chain
    values = [float(v) for v in payload]
    if len(values) not in (4, 10):
        raise ConfigError(f"plant.payload: expected [mass, cx, cy, cz] or [mass, cx, cy, cz, "
                          f"Ixx, Iyy, Izz, Ixy, Ixz, Iyz], got {len(values)} values")
    mass = values[0]
    if not mass >= 0.0 or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"plant.payload: the mass must be finite and >= 0 kg, got {mass:g}")
    if len(values) == 10:
        ixx, iyy, izz, ixy, ixz, iyz = values[4:]
        local = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
        if np.any(np.linalg.eigvalsh(local) < -1e-12 * max(1.0, np.abs(local).max())):
            raise ConfigError("plant.payload: the inertia is not positive semi-definite")
    else:
        local = np.zeros((3, 3))
    if mass == 0.0:
        if np.any(local != 0.0):
            raise ConfigError("plant.payload: a payload of mass 0 kg with a nonzero inertia")
        return chain
    rot, shift = chain.tip_frame[:3, :3], chain.tip_frame[:3, 3]
    centre = rot @ np.array(values[1:4]) + shift          # in the last body's frame
    own = rot @ local @ rot.T
    total = chain.mass[-1] + mass
    com = (chain.mass[-1] * chain.com[-1] + mass * centre) / total
    inertia = np.zeros((3, 3))
    for m, c, at_c in ((chain.mass[-1], chain.com[-1], chain.inertia[-1]), (mass, centre, own)):
        d = c - com
        inertia += at_c + m * (d @ d * np.eye(3) - np.outer(d, d))
    masses, coms, inertias = chain.mass.copy(), chain.com.copy(), chain.inertia.copy()
    masses[-1], coms[-1], inertias[-1] = total, com, inertia
    return replace(chain, mass=masses, com=coms, inertia=inertias)


def _origin(joint) -> np.ndarray:
    """A joint's <origin> (xyz, rpy) as a 4x4 transform."""
    return np.eye(4) if joint.origin is None else np.asarray(joint.origin, dtype=float)


def _locked_value(joint) -> float:
    """Where an off-chain moving joint is locked: 0, or the limit nearest 0 (rad or m)."""
    if joint.type == "continuous" or joint.limit is None:
        return 0.0
    lower = _number(joint.limit.lower, -math.inf)
    upper = _number(joint.limit.upper, math.inf)
    return min(max(0.0, lower), upper)


def _axis(joint) -> np.ndarray:
    """A joint's unit axis (URDF's default x); ConfigError for an axis of zero length."""
    axis = np.asarray(joint.axis if joint.axis is not None else (1.0, 0.0, 0.0), float)
    length = float(np.linalg.norm(axis))
    if not length > 0.0:
        raise ConfigError(f"plant.urdf: joint {joint.name!r} has an axis of zero length")
    return axis / length


def _locked_motion(joint) -> np.ndarray:
    """The motion of an off-chain joint at its locked value (identity for a fixed joint)."""
    motion = np.eye(4)
    if joint.type not in MOVING:
        return motion
    if joint.type == "prismatic":
        motion[:3, 3] = _axis(joint) * _locked_value(joint)
    else:
        motion[:3, :3] = _rotation(_axis(joint), _locked_value(joint))
    return motion
