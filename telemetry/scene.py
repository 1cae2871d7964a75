"""The robot in 3D as Foxglove messages, for the logs and the live view alike: its frames
(``foxglove.FrameTransforms`` on FRAMES_TOPIC) and its shape (``foxglove.SceneUpdate`` on
SCENE_TOPIC), in the Foxglove SDK's built-in schemas (protobuf), so that Foxglove's 3D
panel shows the arm moving, in a log and live, with one layout.

The model gives its frames and shape (PlantModel.frames: a plant.frames.Skeleton). Each
shape is an entity locked to its frame (``frame_locked``), so the scene is sent once and
moves with the frames; it is sent again when a colour changes: a joint jammed (``jam``
event, red until its ``clear``), a joint with another active fault (``fault`` event of
any kind, an actuator's or a sensor's: magenta until its ``fault_end``) or a contact
point touching (orange). Frames go out for
the rows whose tick is a multiple of a step (the log: FRAME_RATE; the live view: its
``--live-rate``), each message stamped with its row's log time.

Off the critical path: the log's writer thread and the live view's publisher call it on
rows the loop has published, a block of rows at a time: the poses of all of them at once
(plant.frames, numpy), then one message each (``TransformsEncoder``: the 3RRR's eight
frames in about 10 us, against about 40 us through the SDK's message classes).
"""
from __future__ import annotations

import struct

import numpy as np
from hilrig.plant.factory import plant_model
from hilrig.schema import Config

FRAMES_TOPIC = "/hil/frames"
SCENE_TOPIC = "/hil/scene"
FRAME_RATE = 100.0      # Hz of the frames in a log (the live view's default rate too)
# colours (r, g, b, a)
LINK = (0.35, 0.55, 0.85, 1.0)
JOINT = (0.8, 0.8, 0.8, 1.0)
JAMMED = (0.9, 0.1, 0.1, 1.0)
FAULTED = (0.85, 0.15, 0.85, 1.0)   # a joint with an active fault other than a jam
FREE = (0.6, 0.6, 0.6, 1.0)         # a contact point in the air
TOUCHING = (1.0, 0.55, 0.0, 1.0)    # ... on the ground
OUTLINE = (0.5, 0.5, 0.5, 1.0)


def skeleton_of(cfg: Config, columns: dict):
    """The model's Skeleton where it has one and the rows carry all its coordinates
    (``columns["q"]`` as wide as plant.q0), else None (e.g. ``hil control``'s rows: the
    actuated joints only)."""
    model = plant_model(cfg.plant.model)
    q = columns.get("q")
    if model.frames is None or not isinstance(q, slice) or \
            q.stop - q.start != len(cfg.plant.q0):
        return None
    return model.frames(cfg)


def schemas() -> dict:
    """topic -> (schema name, schema encoding, schema data) of the two channels."""
    from foxglove.messages import FrameTransforms, SceneUpdate
    out = {}
    for topic, kind in ((FRAMES_TOPIC, FrameTransforms), (SCENE_TOPIC, SceneUpdate)):
        schema = kind.get_schema()
        out[topic] = (schema.name, schema.encoding, bytes(schema.data))
    return out


def _rod_pose(a: np.ndarray, b: np.ndarray):
    """Centre (3,) and quaternion (x, y, z, w) turning z onto a -> b, and its length."""
    d = b - a
    length = float(np.linalg.norm(d))
    u = d / length
    # the half-way vector between z and u gives the quaternion (u != -z)
    w, v = 1.0 + u[2], np.array([-u[1], u[0], 0.0])
    if w < 1e-12:                   # u = -z: half a turn about x
        return 0.5 * (a + b), np.array([1.0, 0.0, 0.0, 0.0]), length
    quat = np.array([v[0], v[1], v[2], w])
    return 0.5 * (a + b), quat / np.linalg.norm(quat), length


def _varint(value: int) -> bytes:
    """A non-negative integer as a protobuf varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field: a string or a message."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


# one FrameTransform's translation (field 4: Vector3 x, y, z) and rotation (field 5:
# Quaternion x, y, z, w), the doubles as fixed64 fields (tag, 8 bytes): always 27 and 36 bytes
_POSE = struct.Struct("<2sBdBdBd2sBdBdBdBd")


class TransformsEncoder:
    """``foxglove.FrameTransforms`` messages of one skeleton's frames, written in the
    protobuf wire format of the SDK's schema (FrameTransforms.transforms = 1;
    FrameTransform: timestamp = 1, parent_frame_id = 2, child_frame_id = 3,
    translation = 4, rotation = 5) with the frames' names encoded once: what
    ``FrameTransforms(...).encode()`` gives, every double written even where it is 0
    (which protobuf readers take as the same message), about four times as fast."""

    def __init__(self, frames):
        self.names = [_field(2, parent.encode()) + _field(3, child.encode())
                      for child, parent in frames]

    def __call__(self, t: np.ndarray, r: np.ndarray, ns: int) -> bytes:
        """The message of translations t (F, 3), m, and quaternions r (F, 4), stamped ns."""
        sec, nsec = divmod(int(ns), 1_000_000_000)
        stamp = _field(1, b"\x08" + _varint(sec) + b"\x10" + _varint(nsec))
        parts = []
        for names, (x, y, z), (qx, qy, qz, qw) in zip(self.names, t.tolist(), r.tolist()):
            body = stamp + names + _POSE.pack(b"\x22\x1b", 0x09, x, 0x11, y, 0x19, z,
                                              b"\x2a\x24", 0x09, qx, 0x11, qy, 0x19, qz, 0x21, qw)
            parts.append(b"\x0a" + _varint(len(body)) + body)
        return b"".join(parts)


class SceneMessages:
    """The messages of one run's robot (module docstring).

    ``skeleton``: plant.frames.Skeleton; ``q``: the q columns of a row (a slice).
    """

    def __init__(self, skeleton, q: slice):
        from foxglove import messages as fm
        self.fm = fm
        self.skeleton = skeleton
        self.encode = TransformsEncoder(skeleton.frames)
        self.q = q
        self.jammed: set = set()            # coordinates (0-based) jammed now
        self.faulted: dict = {}             # coordinate (0-based) -> its active faults
        self.touching: tuple = ()           # contact points touching at the last frames
        self.dirty = True                   # the scene must go (again) with the next frames

    def event(self, kind: str, fields: dict) -> None:
        """A run's event: ``jam`` and ``clear``, ``fault`` and ``fault_end`` of a joint
        (1-based ``joint``) recolour it (several faults on one joint: until the last ends)."""
        joint = fields.get("joint")
        if kind not in ("jam", "clear", "fault", "fault_end") \
                or not isinstance(joint, (int, float)):
            return
        joint = int(joint) - 1
        if kind in ("fault", "fault_end"):
            active = self.faulted.setdefault(joint, [])
            which = (fields.get("fault"), fields.get("channel"))
            if kind == "fault":
                active.append(which)
            elif which in active:
                active.remove(which)
            else:
                return
            self.dirty = True
        elif kind == "jam" and joint not in self.jammed:
            self.jammed.add(joint)
            self.dirty = True
        elif kind == "clear" and joint in self.jammed:
            self.jammed.discard(joint)
            self.dirty = True

    def _stamp(self, ns: int):
        return self.fm.Timestamp(sec=int(ns // 1_000_000_000), nsec=int(ns % 1_000_000_000))

    def scene(self, ns: int) -> bytes:
        """SceneUpdate of every shape, one entity per frame, coloured as things are now."""
        fm, stamp = self.fm, self._stamp(ns)
        entities: dict = {}
        for shape in self.skeleton.shapes:
            parts = entities.setdefault(shape.frame, {"spheres": [], "cylinders": [],
                                                      "lines": []})
            points = np.asarray(shape.points, dtype=float)
            if shape.kind == "rod":
                centre, quat, length = _rod_pose(points[0], points[1])
                parts["cylinders"].append(fm.CylinderPrimitive(
                    pose=self._pose(centre, quat), size=fm.Vector3(
                        x=shape.size, y=shape.size, z=length),
                    bottom_scale=1.0, top_scale=1.0, color=self._color(LINK)))
            elif shape.kind == "sphere":
                parts["spheres"].append(fm.SpherePrimitive(
                    pose=self._pose(points[0], (0.0, 0.0, 0.0, 1.0)),
                    size=fm.Vector3(x=shape.size, y=shape.size, z=shape.size),
                    color=self._color(self._sphere_colour(shape))))
            else:
                parts["lines"].append(fm.LinePrimitive(
                    type=fm.LinePrimitiveLineType.LineStrip,
                    pose=self._pose((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
                    thickness=shape.size, scale_invariant=False,
                    points=[fm.Point3(x=p[0], y=p[1], z=p[2]) for p in points.tolist()],
                    color=self._color(OUTLINE)))
        self.dirty = False
        return fm.SceneUpdate(entities=[
            fm.SceneEntity(timestamp=stamp, frame_id=frame, id=frame, frame_locked=True,
                           **parts) for frame, parts in entities.items()]).encode()

    def _sphere_colour(self, shape) -> tuple:
        if shape.joint >= 0 and shape.joint in self.jammed:
            return JAMMED
        if shape.joint >= 0 and self.faulted.get(shape.joint):
            return FAULTED
        if shape.contact >= 0:
            return TOUCHING if shape.contact in self.touching else FREE
        return JOINT

    def _pose(self, position, quat):
        fm = self.fm
        return fm.Pose(position=fm.Vector3(x=float(position[0]), y=float(position[1]),
                                           z=float(position[2])),
                       orientation=fm.Quaternion(x=float(quat[0]), y=float(quat[1]),
                                                 z=float(quat[2]), w=float(quat[3])))

    def _color(self, rgba):
        return self.fm.Color(r=rgba[0], g=rgba[1], b=rgba[2], a=rgba[3])

    def rows(self, rows: np.ndarray, ticks: np.ndarray, stamps: np.ndarray, step: int,
             events=()) -> list:
        """(topic, stamp ns, data) of the rows whose tick is a multiple of ``step``:
        their frames, and the scene before the first of them and again after a colour
        changed. ``events``: (stamp ns, kind, fields) of the same stretch, applied in
        time order (a row sees the events not later than itself)."""
        out = []
        events = sorted(events, key=lambda e: e[0])
        k = 0
        due = np.flatnonzero(ticks % step == 0)
        if not len(due):
            for _, kind, fields in events:
                self.event(kind, fields)
            return out
        qs = np.ascontiguousarray(rows[due][:, self.q])
        t, r = self.skeleton.poses(qs)
        touching = self.skeleton.contacts(qs) if self.skeleton.contacts is not None else None
        for m, stamp in enumerate(stamps[due].tolist()):
            while k < len(events) and events[k][0] <= stamp:
                self.event(events[k][1], events[k][2])
                k += 1
            if touching is not None:
                now = tuple(np.flatnonzero(touching[m]).tolist())
                if now != self.touching:
                    self.touching, self.dirty = now, True
            if self.dirty:
                out.append((SCENE_TOPIC, stamp, self.scene(stamp)))
            out.append((FRAMES_TOPIC, stamp, self.encode(t[m], r[m], stamp)))
        for _, kind, fields in events[k:]:
            self.event(kind, fields)
        return out


def log_step(dt: float) -> int:
    """Every how many ticks (of ``dt`` s) a log carries the frames: FRAME_RATE, at least
    every row."""
    return max(1, int(round(1.0 / (FRAME_RATE * dt))))


class LogScene:
    """The 3D channels of a log (telemetry.recorder.Telemetry.scene): the frames at
    FRAME_RATE and the scene, written by the writer thread into the chunks of their rows.
    Its channels are added to the file by the writer thread, before their first message."""

    def __init__(self, skeleton, columns: dict, dt: float):
        self.messages = SceneMessages(skeleton, columns["q"])
        self.tick, self.t = columns["tick"], columns["t"]
        self.step = log_step(dt)
        self.channels: dict = {}            # topic -> the McapWriter's channel id
        self.sequence = 0

    def chunk(self, mcap, rows: np.ndarray, stamps: np.ndarray, events) -> list:
        """The extra messages (channel, log time ns, sequence, data) of a chunk's rows
        (``stamps``: their log times, ns) and events ((stamp ns, kind, fields))."""
        if not self.channels:
            for topic, (name, encoding, data) in schemas().items():
                self.channels[topic] = mcap.add_channel(topic, encoding,
                                                        mcap.add_schema(name, encoding, data))
        out = []
        for topic, stamp, data in self.messages.rows(rows, rows[:, self.tick], stamps,
                                                     self.step, events):
            out.append((self.channels[topic], stamp, self.sequence & 0xFFFFFFFF, data))
            self.sequence += 1
        return out


def attach(telemetry, cfg: Config) -> None:
    """Have ``telemetry`` (telemetry.recorder.Telemetry) write the robot's frames and
    scene into its log, where the model has them (skeleton_of)."""
    skeleton = skeleton_of(cfg, telemetry.columns)
    if skeleton is not None:
        telemetry.scene = LogScene(skeleton, telemetry.columns, cfg.sim.dt)

