"""The robot in 3D (plant.frames, plant.urdf.frames, telemetry.scene): its frames against
forward kinematics written here from each model's geometry (or Pinocchio's), in a log
(``hil run``: FrameTransforms and SceneUpdate, read back with the mcap protobuf reader,
doctor-clean) and live (a Foxglove client receives the frames at the rate it set).
"""
from __future__ import annotations

import asyncio
import math
import subprocess

import numpy as np
import pytest
from hilrig.plant.frames import BASE, WORLD

from rt_helpers import ROOT, SHARED_CPU, hil, read_complete
from test_live import FoxgloveClient, finish, free_port, start_run
from test_log_safety import _program


def rotation(quat) -> np.ndarray:
    """The rotation matrix of a unit quaternion (x, y, z, w)."""
    x, y, z, w = quat
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def rz(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def by_child(frames) -> dict:
    return {child: (parent, np.asarray(t), np.asarray(r)) for child, parent, t, r in frames}


def serial_arm_fk(length, q) -> list:
    """Paper 000's arm: joint i at p_i, link i at the absolute angle q_1 + .. + q_i from
    the downward x axis, in the plane z = 0: [(p_i, R_i)], the tip last."""
    out, p, phi = [], np.zeros(3), 0.0
    for i, l in enumerate(length):
        phi += q[i]
        out.append((p.copy(), rz(phi)))
        p = p + l * np.array([math.cos(phi), math.sin(phi), 0.0])
    out.append((p, rz(phi)))
    return out


# -- the models' frames -----------------------------------------------------------------

def test_the_serial_arm_frames_are_its_forward_kinematics_and_hang_down():
    from hilrig.plant.frames import serial_arm

    length = [0.8, 0.7, 0.6]
    skeleton = serial_arm(length)
    rng = np.random.default_rng(3)
    for q in rng.uniform(-math.pi, math.pi, (20, 3)):
        frames = by_child(skeleton.at(q))
        parent, t, r = frames[BASE]
        assert parent == WORLD
        assert np.allclose(rotation(r) @ [1.0, 0.0, 0.0], [0.0, 0.0, -1.0])   # x down
        for name, (p, rot) in zip(["link1", "link2", "link3", "tip"], serial_arm_fk(length, q)):
            parent, t, r = frames[name]
            assert parent == BASE
            assert np.abs(t - p).max() < 1e-12 and np.abs(rotation(r) - rot).max() < 1e-12


def test_the_3rrr_frames_close_every_leg_on_the_platform():
    """A pose of the platform, the base joints from it by inverse kinematics (written here):
    each leg's second link starts where its first ends and ends at its platform corner."""
    from hilrig.plant.frames import rrr3
    from hilrig.plant.rrr3 import Rrr3Params

    geo = Rrr3Params.paper()
    skeleton = rrr3(geo)
    c, phi = np.array([0.62, 0.33]), 0.3
    q = [0.0, 0.0, 0.0, c[0], c[1], phi]
    corners, elbows = [], []
    for i in range(3):
        b = c + geo.platform_radius * np.array([math.cos(phi + geo.alpha[i]),
                                                math.sin(phi + geo.alpha[i])])
        o = geo.base[i]
        d = np.linalg.norm(b - o)      # A: |A - O| = l1, |B - A| = l2 (one elbow)
        along = (geo.l1 ** 2 - geo.l2 ** 2 + d ** 2) / (2 * d)
        u = (b - o) / d
        a = o + along * u + math.sqrt(geo.l1 ** 2 - along ** 2) * np.array([-u[1], u[0]])
        q[i] = math.atan2(a[1] - o[1], a[0] - o[0])
        corners.append(b)
        elbows.append(a)
    frames = by_child(skeleton.at(np.array(q)))

    def point(name, local):
        _, t, r = frames[name]
        return t + rotation(r) @ np.asarray(local, dtype=float)

    for i in range(3):
        leg = f"leg{i + 1}"
        assert np.abs(point(f"{leg}_link1", [0, 0, 0])[:2] - geo.base[i]).max() < 1e-12
        assert np.abs(point(f"{leg}_link1", [geo.l1, 0, 0])[:2] - elbows[i]).max() < 1e-12
        assert np.abs(point(f"{leg}_link2", [0, 0, 0])[:2] - elbows[i]).max() < 1e-12
        assert np.abs(point(f"{leg}_link2", [geo.l2, 0, 0])[:2] - corners[i]).max() < 1e-12
        corner = geo.platform_radius * np.array([math.cos(geo.alpha[i]), math.sin(geo.alpha[i]), 0])
        assert np.abs(point("platform", corner)[:2] - corners[i]).max() < 1e-12


@pytest.mark.parametrize("robot, tip", [("panda", "panda_link8"), ("ur5", None),
                                        ("kinova", None)])
def test_the_urdf_frames_are_pinocchios_forward_kinematics(robot, tip):
    pin = pytest.importorskip("pinocchio")
    from hilrig.plant.urdf import parse
    from hilrig.plant.urdf.frames import skeleton

    chain = parse.load(robot, None, tip)
    frames_of = skeleton(chain).at
    model = pin.buildModelFromUrdf(chain.path)
    data = model.createData()

    def put(qp, name, value):
        joint = model.joints[model.getJointId(name)]
        if joint.nq == 2:              # continuous: (cos, sin)
            qp[joint.idx_q:joint.idx_q + 2] = [math.cos(value), math.sin(value)]
        else:
            qp[joint.idx_q] = value

    rng = np.random.default_rng(7)
    for q in rng.uniform(-math.pi, math.pi, (10, chain.n)):
        qp = pin.neutral(model)
        for name, value in chain.locked:
            put(qp, name, value)
        for name, value in zip(chain.joints, q):
            put(qp, name, value)
        pin.framesForwardKinematics(model, data, qp)
        base = data.oMf[model.getFrameId(chain.base_link)]
        frames = frames_of(q)
        assert len(frames) == chain.n + 1 and frames[0][:2] == (BASE, WORLD)
        for child, parent, t, r in frames[1:]:
            expected = base.actInv(data.oMf[model.getFrameId(child)])
            assert parent == BASE
            assert np.abs(t - expected.translation).max() < 1e-12, child
            assert np.abs(rotation(r) - expected.rotation).max() < 1e-12, child


def test_the_flexible_chain_marks_its_end_points_in_contact():
    """The nodes are the chain's end points; lowered until its lowest touches the ground,
    the scene goes again, the touching ones orange, the others grey."""
    from hilrig.plant.flex_chain.chain import end_points
    from hilrig.plant.flex_chain.model import paper_chain, paper_initial_state
    from hilrig.plant.frames import flex_chain
    from hilrig.telemetry.scene import FREE, SCENE_TOPIC, TOUCHING, SceneMessages

    chain = paper_chain()
    params = chain.block()
    skeleton = flex_chain(params, chain.n, 1.0, end_points)
    z, _ = paper_initial_state()
    frames = by_child(skeleton.at(z))
    points = end_points(params, z)
    for k in range(4):
        assert np.abs(frames[f"node{k + 1}"][1][:2] - points[k]).max() < 1e-12
    assert not skeleton.contacts(z[None, :]).any()
    lowest = points[:, 1] < points[:, 1].min() + 1e-9     # (the drop starts symmetric)
    assert 0 < lowest.sum() < 4
    low = z.copy()
    low[4] -= points[:, 1].min() + 1e-6         # the lowest end points 1 um into the ground
    assert skeleton.contacts(low[None, :])[0].tolist() == lowest.tolist()

    rows = np.vstack([z, z, low])
    messages = SceneMessages(skeleton, slice(0, len(z)))
    assert messages.rows(rows, np.array([1, 2, 3]), np.array([1, 2, 3]), 10) == []  # none due
    out = messages.rows(rows, np.array([0, 1, 2]), np.array([0, 1000, 2000]), 1)
    scenes = [stamp for topic, stamp, _ in out if topic == SCENE_TOPIC]
    assert scenes == [0, 2000]         # first, then when the contact began
    pytest.importorskip("google.protobuf")
    from foxglove.messages import SceneUpdate

    decoded = _decode(SceneUpdate, [d for topic, _, d in out if topic == SCENE_TOPIC][-1])
    colours = {e.id: (e.spheres[0].color.r, e.spheres[0].color.g) for e in decoded.entities
               if e.id.startswith("node")}
    assert colours == {f"node{k + 1}": (TOUCHING if lowest[k] else FREE)[:2]
                       for k in range(4)}


def _message_class(kind):
    """The protobuf class of a Foxglove SDK schema (its FileDescriptorSet), by
    google.protobuf."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    schema = kind.get_schema()
    files = descriptor_pb2.FileDescriptorSet.FromString(bytes(schema.data))
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(schema.name))


def _decode(kind, data: bytes):
    return _message_class(kind).FromString(data)


@pytest.mark.parametrize("seconds", [0, 3, 1_764_000_000])     # plant time, wall clock
def test_the_frames_encoder_writes_what_the_sdk_writes(seconds):
    """telemetry.scene's own protobuf writer against the SDK's FrameTransforms(...).encode():
    the same message once decoded (zeros included, e.g. the 3RRR's z and base pose)."""
    pytest.importorskip("google.protobuf")
    import foxglove.messages as fm
    from hilrig.plant.frames import rrr3
    from hilrig.plant.rrr3 import Rrr3Params
    from hilrig.telemetry.scene import TransformsEncoder

    skeleton = rrr3(Rrr3Params.paper())
    q = np.array([0.4, 0.8, 1.0, 0.6, 0.35, -0.1])
    t, r = skeleton.poses(q[None, :])
    for ns in (seconds * 10 ** 9, seconds * 10 ** 9 + 1, seconds * 10 ** 9 + 999_999_999):
        stamp = fm.Timestamp(sec=ns // 10 ** 9, nsec=ns % 10 ** 9)
        sdk = fm.FrameTransforms(transforms=[fm.FrameTransform(
            timestamp=stamp, parent_frame_id=parent, child_frame_id=child,
            translation=fm.Vector3(x=float(a[0]), y=float(a[1]), z=float(a[2])),
            rotation=fm.Quaternion(x=float(b[0]), y=float(b[1]), z=float(b[2]), w=float(b[3])))
            for (child, parent), a, b in zip(skeleton.frames, t[0], r[0])]).encode()
        ours = TransformsEncoder(skeleton.frames)(t[0], r[0], ns)
        kind = _message_class(fm.FrameTransforms)
        assert kind.FromString(ours) == kind.FromString(sdk)
        assert len(kind.FromString(ours).transforms) == 8


# -- in a log ---------------------------------------------------------------------------

@pytest.mark.system
@pytest.mark.parametrize("command", ["run", "sim"])
def test_a_log_carries_the_arm_in_3d_and_passes_the_doctor(tmp_path, command):
    """`hil run serial3_jam2 --log` and `hil sim serial3_jam2 --log` (joint 2 jams at
    0.5 s): /hil/frames at 100 Hz, each the arm's forward kinematics at its row's q to
    1e-12; the scene once, and again with joint 2 red from the jam on; the log, and a cut
    copy repaired (`hil log repair`), pass pymcap-cli doctor with no warning or error.
    `hil sim`'s log holds the rows of its .npz."""
    pytest.importorskip("mcap_protobuf")
    from mcap.reader import make_reader
    from mcap_protobuf.decoder import DecoderFactory
    from hilrig.telemetry.repair import repair
    from hilrig.telemetry.scene import JAMMED, JOINT

    log, npz = tmp_path / "arm.mcap", tmp_path / "arm.npz"
    options = ["--fast", "--no-plot"] if command == "run" else ["--out", str(npz)]
    done = subprocess.run(hil(command, "serial3_jam2", "--duration", "1.0", "--log", str(log),
                              *options), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    arrays, events, meta, summary = read_complete(log)
    if command == "sim":
        offline = np.load(npz)
        for name in ("t", "q", "qd", "u", "energy", "com"):
            assert np.array_equal(arrays[name], offline[name]), name
        assert summary["status"] == "ok" and np.isnan(arrays["lateness"]).all()
    jam = next(e for e in events if e["kind"] == "jam")
    rows = {int(round(t * 1e9)): k for k, t in enumerate(arrays["t"])}
    length = meta["plant"]["length"]
    frames, scenes = [], []
    with open(log, "rb") as stream:
        reader = make_reader(stream, decoder_factories=[DecoderFactory()])
        for _, channel, message, decoded in reader.iter_decoded_messages(
                topics=["/hil/frames", "/hil/scene"], log_time_order=False):
            (frames if channel.topic == "/hil/frames" else scenes).append(
                (message.log_time, decoded))
    ticks = [int(arrays["tick"][rows[stamp]]) for stamp, _ in frames]
    assert ticks == list(range(0, 1001, 10))                  # 100 Hz of a 1 kHz loop
    for stamp, decoded in frames:
        q = arrays["q"][rows[stamp]]
        got = {f.child_frame_id: f for f in decoded.transforms}
        assert got[BASE].parent_frame_id == WORLD
        for name, (p, rot) in zip(["link1", "link2", "link3", "tip"], serial_arm_fk(length, q)):
            f = got[name]
            t = np.array([f.translation.x, f.translation.y, f.translation.z])
            r = rotation([f.rotation.x, f.rotation.y, f.rotation.z, f.rotation.w])
            assert f.parent_frame_id == BASE
            assert np.abs(t - p).max() < 1e-12 and np.abs(r - rot).max() < 1e-12
            assert f.timestamp.seconds * 10 ** 9 + f.timestamp.nanos == stamp

    def joint_colours(scene):
        return {e.id: tuple(round(v, 3) for v in (e.spheres[0].color.r, e.spheres[0].color.g))
                for e in scene.entities if e.id.startswith("link")}

    assert [stamp for stamp, _ in scenes] == [0, int(math.ceil(jam["t1"] * 100)) * 10 ** 7]
    assert set(joint_colours(scenes[0][1]).values()) == {tuple(round(v, 3) for v in JOINT[:2])}
    assert joint_colours(scenes[1][1])["link2"] == tuple(round(v, 3) for v in JAMMED[:2])
    assert all(e.frame_locked for e in scenes[0][1].entities)

    # the log, and a copy cut at 60 % (a killed run) then repaired, pass the doctor
    cut, fixed = tmp_path / "cut.mcap", tmp_path / "fixed.mcap"
    cut.write_bytes(log.read_bytes()[:log.stat().st_size * 6 // 10])
    report = repair(cut, fixed)
    assert 0 < report.ticks < 1001
    for path in (log, fixed):
        doctor = subprocess.run([_program("pymcap-cli"), "doctor", str(path)],
                                capture_output=True, text=True, timeout=120)
        assert doctor.returncode == 0, doctor.stdout
        assert "passed MCAP doctor checks" in doctor.stdout
        assert "warning" not in doctor.stdout.lower() and \
            "error" not in doctor.stdout.lower(), doctor.stdout
    with open(fixed, "rb") as stream:
        summary = make_reader(stream).get_summary()
    counts = {c.topic: summary.statistics.channel_message_counts.get(c.id, 0)
              for c in summary.channels.values()}
    assert counts["/hil/frames"] == len([k for k in range(report.ticks) if k % 10 == 0])


# -- live -------------------------------------------------------------------------------

@pytest.mark.system
def test_a_live_client_receives_the_frames_at_the_rate_it_set(tmp_path):
    """`hil run rrr3_pd --live --live-rate /hil/frames=50`: a client subscribed to the
    frames gets every 20th tick's (50 Hz at 1 kHz) from its first to the run's end, none
    missing, each the platform's pose at that tick of the log; and the scene."""
    pytest.importorskip("google.protobuf")
    from foxglove.messages import FrameTransforms

    port = free_port()
    proc, log, _ = start_run(tmp_path, 4.0, "--live", f"127.0.0.1:{port}",
                             "--live-rate", "/hil/frames=50")

    async def watch():
        client = await FoxgloveClient.connect(port)
        async with client.ws:
            await client.pump(lambda: {"/hil/frames", "/hil/scene", "/hil/joint_state"}
                              <= set(client.channels))
            assert client.channels["/hil/frames"]["schemaName"] == "foxglove.FrameTransforms"
            assert client.channels["/hil/frames"]["encoding"] == "protobuf"
            await client.subscribe("/hil/frames", "/hil/scene", "/hil/joint_state")
            await client.pump(None, timeout=300.0)      # to the end of the run
        return client

    try:
        client = asyncio.run(watch())
    finally:
        finish(proc)
    arrays, _, _, _ = read_complete(log)
    origin = {log_time - round(m["t"] * 1e9) for log_time, m in
              client.messages["/hil/joint_state"]}
    assert len(origin) == 1
    origin = origin.pop()
    decode = _message_class(FrameTransforms).FromString
    ticks = []
    for log_time, data in client.messages["/hil/frames"]:
        tick = int(round((log_time - origin) * 1e-6))           # 1 ms ticks
        ticks.append(tick)
        got = {f.child_frame_id: f for f in decode(data).transforms}
        pose = arrays["q"][tick, 3:]
        platform = got["platform"]
        assert [platform.translation.x, platform.translation.y] == pose[:2].tolist()
        assert abs(2 * math.atan2(platform.rotation.z, platform.rotation.w) - pose[2]) < 1e-12
    assert ticks[0] < 2000 and ticks == list(range(ticks[0], 4001, 20))
    assert client.messages.get("/hil/scene")          # the shape (every second)


def test_frames_that_raise_stop_the_3d_channels_not_the_log(tmp_path):
    """A model's frames raising (a user's code) in the writer thread: the log keeps every
    row and says why in a scene_error event; no frames from there."""
    from hilrig.plant.frames import Skeleton
    from hilrig.telemetry.recorder import Telemetry, run_groups
    from hilrig.telemetry.scene import LogScene

    def poses(qs):
        raise ZeroDivisionError("a bug in my frames")

    groups = run_groups((("energy", 1), ("com", (2,))), 2, 2, "torque")
    tel = Telemetry(tmp_path / "x.mcap", groups, {"run": 1}, capacity=4096)
    tel.scene = LogScene(Skeleton(((BASE, WORLD),), poses, ()), tel.columns, 1e-3)
    rows = np.zeros((300, tel.width))
    rows[:, tel.columns["t"]] = np.arange(300) * 1e-3
    rows[:, tel.columns["tick"]] = np.arange(300)
    tel.ring[:300] = rows
    tel.head[0] = 300
    tel.close({"status": "ok"})
    arrays, events, _, summary = read_complete(tmp_path / "x.mcap")
    assert len(arrays["t"]) == 300 and summary["telemetry"]["lost_rows"] == 0
    assert [e["message"] for e in events if e["kind"] == "scene_error"] == \
        ["ZeroDivisionError: a bug in my frames"]


@pytest.mark.system
def test_a_live_client_sees_the_jammed_joint_turn_red(tmp_path):
    """`hil run serial3_jam2 --live` (joint 2 jams at 2 s): the scene a subscribed client
    gets shows joint 2 grey before the jam and red from its event on."""
    pytest.importorskip("google.protobuf")
    from foxglove.messages import SceneUpdate
    from hilrig.telemetry.scene import JAMMED, JOINT

    port = free_port()
    proc = subprocess.Popen(hil("run", "serial3_jam2", "--duration", "4", "--no-plot",
                                "--set", "faults.jam.t1=2.0",
                                "--log", str(tmp_path / "run.mcap"), "--set-endpoint", "",
                                "--live", f"127.0.0.1:{port}", *SHARED_CPU),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    async def watch():
        client = await FoxgloveClient.connect(port)
        async with client.ws:
            await client.pump(lambda: {"/hil/scene", "/hil/event"} <= set(client.channels))
            await client.subscribe("/hil/scene", "/hil/event")
            await client.pump(None, timeout=300.0)      # to the end of the run
        return client

    try:
        client = asyncio.run(watch())
    finally:
        finish(proc)
    decode = _message_class(SceneUpdate).FromString
    jam = next(m for _, m in client.messages["/hil/event"] if m["kind"] == "jam")
    origin = client.messages["/hil/event"][0][0] - round(client.messages["/hil/event"][0][1]["t"]
                                                         * 1e9)
    colours = []            # (plant time, colour of joint 2's sphere)
    for log_time, data in client.messages["/hil/scene"]:
        link2 = next(e for e in decode(data).entities if e.id == "link2")
        colours.append(((log_time - origin) * 1e-9, round(link2.spheres[0].color.r, 3)))
    assert any(t < jam["t1"] and c == round(JOINT[0], 3) for t, c in colours), colours
    assert any(t >= jam["t1"] and c == round(JAMMED[0], 3) for t, c in colours), colours
    assert all(c == round(JAMMED[0], 3) for t, c in colours if t >= jam["t1"] + 0.05), colours


def test_the_scene_draws_each_link_along_its_frame():
    """The serial arm's scene: link i's rod is a cylinder centred half-way along its
    frame's x axis, its own axis (the cylinder's z) turned onto x, as long as the link;
    its joint sphere at the frame's origin; every entity locked to its frame."""
    pytest.importorskip("google.protobuf")
    from foxglove.messages import SceneUpdate
    from hilrig.plant.frames import serial_arm
    from hilrig.telemetry.scene import SceneMessages

    length = [0.8, 0.7, 0.6]
    scene = _decode(SceneUpdate, SceneMessages(serial_arm(length), slice(0, 3)).scene(0))
    entities = {e.id: e for e in scene.entities}
    assert set(entities) == {"link1", "link2", "link3", "tip"}
    for i, l in enumerate(length):
        e = entities[f"link{i + 1}"]
        assert e.frame_id == e.id and e.frame_locked
        (rod,), (joint,) = e.cylinders, e.spheres
        p, o = rod.pose.position, rod.pose.orientation
        assert np.allclose([p.x, p.y, p.z], [l / 2, 0.0, 0.0], atol=1e-15)
        assert np.allclose(rotation([o.x, o.y, o.z, o.w]) @ [0, 0, 1], [1, 0, 0], atol=1e-15)
        assert rod.size.z == pytest.approx(l, abs=1e-15)
        assert [joint.pose.position.x, joint.pose.position.y] == [0.0, 0.0]


@pytest.mark.system
@pytest.mark.parametrize("command", ["run", "sim"])
def test_a_joint_with_an_active_fault_turns_magenta_until_it_ends(tmp_path, command):
    """`hil run --fast --log` and `hil sim --log` of the free 3-DOF arm with a loss of
    effectiveness on joint 3
    from 0.3 s for 0.4 s and a position bias on joint 1 from 0.5 s on: the scene goes again
    at each start and end, with joint 3 magenta only while its fault is active, joint 1
    magenta from its bias on, the others grey."""
    pytest.importorskip("mcap_protobuf")
    from mcap.reader import make_reader
    from mcap_protobuf.decoder import DecoderFactory
    from hilrig.telemetry.scene import FAULTED, JOINT

    config = tmp_path / "faulty.toml"
    config.write_text((ROOT / "configs" / "serial3_free.toml").read_text() + """
[[faults.effectiveness]]
joint = 3
t1 = 0.3
duration = 0.4
factor = 0.5

[[faults.sensor_bias]]
joint = 1
t1 = 0.5
bias = 0.05
""")
    log = tmp_path / "faulty.mcap"
    options = ["--fast", "--no-plot"] if command == "run" else ["--out", str(tmp_path / "a.npz")]
    done = subprocess.run(hil(command, str(config), *options, "--duration", "1.0",
                              "--log", str(log)), cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    events = read_complete(log)[1]
    starts = sorted(e["t"] for e in events if e["kind"] in ("fault", "fault_end"))
    assert len(starts) == 3, events
    scenes = []
    with open(log, "rb") as stream:
        reader = make_reader(stream, decoder_factories=[DecoderFactory()])
        for _, _, message, decoded in reader.iter_decoded_messages(topics=["/hil/scene"]):
            colours = {e.id: tuple(round(c, 3) for c in (e.spheres[0].color.r,
                                                          e.spheres[0].color.g))
                       for e in decoded.entities if e.id.startswith("link")}
            scenes.append((message.log_time * 1e-9, colours))
    grey, magenta = (tuple(round(v, 3) for v in JOINT[:2]),
                     tuple(round(v, 3) for v in FAULTED[:2]))
    # the scene at 0, then at the first frame (100 Hz) at or after each start and end
    assert [round(t, 2) for t, _ in scenes] == [0.0] + [math.ceil(t * 100 - 1e-6) / 100
                                                        for t in starts]
    expected = [{"link1": grey, "link2": grey, "link3": grey},
                {"link1": grey, "link2": grey, "link3": magenta},
                {"link1": magenta, "link2": grey, "link3": magenta},
                {"link1": magenta, "link2": grey, "link3": grey}]
    assert [colours for _, colours in scenes] == expected
