"""Reference engines for the 3-link planar arm: MuJoCo and Pinocchio.

Builds the same arm (Hoang 2010, Table 1) in MuJoCo and in Pinocchio, checks
that both agree with the closed-form Lagrangian model, and times one RK4 step
of each as called from Python, so that our own numba step can be compared
side by side (another bench script can import this module and reuse
``time_per_call`` for that).

Run::

    pip install .[bench]        # installs the optional extras mujoco and pin
    python bench/engines.py

It first checks that MuJoCo, Pinocchio and the closed-form model give the
same joint accelerations (exit code 1 if not), then prints the timings.  If
mujoco or pin is missing it says so and exits 0.

What is timed (wall clock, ``time.perf_counter_ns``, garbage collector off):

* MuJoCo: one ``mujoco.mj_step`` call, model integrator "RK4", h = 1 ms
  (four forward-dynamics evaluations inside the C library).
* Pinocchio: one plain-Python RK4 step, h = 1 ms: four ``pin.aba`` calls plus
  the numpy state updates.

Every call is timed individually; median and 99th percentile are taken over
the individual calls and include the timer's own overhead (printed
separately, typically a few tens of ns).

Model conventions: joints rotate about z, gravity g = 9.81 m/s^2 along +x
(x points down), q1 is the absolute angle of link 1 from +x, q2 and q3 are
relative angles, viscous damping b on every joint (torque -b*qdot_i), joint
torques u as input.  Units are SI throughout: m, kg, kg m^2, rad, s, N m.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Callable, NamedTuple

import numpy as np

try:
    import mujoco
except ImportError:
    mujoco = None

try:
    import pinocchio as pin
except ImportError:
    pin = None

MASS = np.array([9.0, 7.0, 5.0])
"""Link masses m_i, kg."""
INERTIA_C = np.array([1.5, 1.0, 0.6])
"""Link inertias about the centre of mass and the z axis J_Ci, kg m^2."""
LENGTH = np.array([0.8, 0.7, 0.6])
"""Link lengths L_i (joint i to joint i+1), m."""
COM = np.array([0.4, 0.35, 0.3])
"""Distance a_i from joint i to the centre of mass of link i, along the link, m."""
GRAVITY = 9.81
"""Gravitational acceleration along +x, m/s^2."""
DAMPING = 15.0
"""Viscous joint damping b, N m s/rad."""
TIMESTEP = 1e-3
"""Integration step h, s."""

N_JOINTS = len(MASS)
_T = np.tril(np.ones((N_JOINTS, N_JOINTS)))  # phi = T q (absolute link angles)


def _principal_inertia(j_c: float) -> tuple[float, float, float]:
    """Principal inertias (Ixx, Iyy, Izz) in kg m^2 of a slender link along x.

    Izz is exactly ``j_c``; Iyy = Izz and Ixx = Izz/100 (about the link axis)
    satisfy MuJoCo's triangle inequality.  Only Izz affects planar motion
    about z: the angular velocity has no x/y component and the inertia tensor
    is diagonal, so the x/y entries drop out of the joint-space dynamics.
    """
    return (0.01 * j_c, j_c, j_c)


def _num(x) -> str:
    """Shortest round-tripping decimal text of x (numpy 2 repr would add "np.float64")."""
    return repr(float(x))


def _mjcf(damping: float) -> str:
    """MJCF text of the arm with joint damping ``damping`` in N m s/rad."""
    body_open = []
    for i in range(N_JOINTS):
        pos = 0.0 if i == 0 else LENGTH[i - 1]
        ixx, iyy, izz = map(_num, _principal_inertia(INERTIA_C[i]))
        body_open.append(
            f'<body name="link{i + 1}" pos="{_num(pos)} 0 0">'
            f'<joint name="q{i + 1}" type="hinge" axis="0 0 1" damping="{_num(damping)}"'
            ' armature="0" frictionloss="0" limited="false"/>'
            f'<inertial pos="{_num(COM[i])} 0 0" mass="{_num(MASS[i])}"'
            f' diaginertia="{ixx} {iyy} {izz}"/>'
            f'<geom type="capsule" fromto="0 0 0 {_num(LENGTH[i])} 0 0" size="0.02"'
            ' contype="0" conaffinity="0"/>'
        )
    motors = "".join(
        f'<motor joint="q{i + 1}" gear="1" ctrllimited="false"/>' for i in range(N_JOINTS)
    )
    return (
        '<mujoco model="hoang2010_3link">'
        '<compiler angle="radian" inertiafromgeom="false"/>'
        f'<option integrator="RK4" timestep="{_num(TIMESTEP)}" gravity="{_num(GRAVITY)} 0 0"/>'
        f"<worldbody>{''.join(body_open)}{'</body>' * N_JOINTS}</worldbody>"
        f"<actuator>{motors}</actuator>"
        "</mujoco>"
    )


def mujoco_arm(damping: float = DAMPING):
    """MuJoCo ``(MjModel, MjData)`` of the arm; ``ctrl`` is the joint torque in N m.

    ``damping`` is the viscous joint damping in N m s/rad.
    """
    model = mujoco.MjModel.from_xml_string(_mjcf(damping))
    return model, mujoco.MjData(model)


def pinocchio_arm():
    """Pinocchio ``(Model, Data)`` of the arm, gravity 9.81 m/s^2 along +x.

    The model carries no damping: pass it to ``pinocchio_accel`` instead.
    """
    model = pin.Model()
    model.gravity = pin.Motion(np.array([GRAVITY, 0.0, 0.0]), np.zeros(3))
    parent = 0
    placement = pin.SE3.Identity()
    for i in range(N_JOINTS):
        joint = model.addJoint(parent, pin.JointModelRZ(), placement, f"q{i + 1}")
        inertia = pin.Inertia(
            MASS[i], np.array([COM[i], 0.0, 0.0]), np.diag(_principal_inertia(INERTIA_C[i]))
        )
        model.appendBodyToJoint(joint, inertia, pin.SE3.Identity())
        parent = joint
        placement = pin.SE3(np.eye(3), np.array([LENGTH[i], 0.0, 0.0]))
    return model, model.createData()


def mujoco_accel(model, data, q, qd, u) -> np.ndarray:
    """Joint accelerations qdd in rad/s^2 from MuJoCo at q (rad), qd (rad/s), u (N m)."""
    data.qpos[:] = q
    data.qvel[:] = qd
    data.ctrl[:] = u
    mujoco.mj_forward(model, data)
    return data.qacc.copy()


def pinocchio_accel(model, data, q, qd, u, damping: float = DAMPING) -> np.ndarray:
    """Joint accelerations qdd in rad/s^2 from Pinocchio ABA with tau = u - damping*qd.

    q in rad, qd in rad/s, u in N m, damping in N m s/rad.
    """
    return pin.aba(model, data, q, qd, u - damping * qd)


def closed_form_accel(q, qd, u, damping: float = DAMPING) -> np.ndarray:
    """Joint accelerations qdd in rad/s^2 from the closed-form Lagrangian model.

    Solves M qdd + C qd + b qd + g = u with M = T^T Mt T and C qd + g =
    T^T (ct + gt), where phi = T q are the absolute link angles.
    """
    phi = _T @ q
    phid = _T @ qd
    outboard = np.append(np.cumsum(MASS[::-1])[::-1][1:], 0.0)  # sum_{i>j} m_i, kg
    first_moment = MASS * COM + LENGTH * outboard  # kg m
    mu = np.diag(INERTIA_C + MASS * COM**2 + LENGTH**2 * outboard)
    for j in range(N_JOINTS):
        for k in range(j + 1, N_JOINTS):
            mu[j, k] = mu[k, j] = LENGTH[j] * first_moment[k]
    dphi = phi[:, None] - phi[None, :]
    mass_matrix = _T.T @ (mu * np.cos(dphi)) @ _T
    centrifugal = (mu * np.sin(dphi)) @ phid**2
    gravity = GRAVITY * first_moment * np.sin(phi)
    bias = _T.T @ (centrifugal + gravity)
    return np.linalg.solve(mass_matrix, u - damping * qd - bias)


def pinocchio_rk4_step(model, data, q, qd, u, h: float = TIMESTEP, damping: float = DAMPING):
    """One classic RK4 step of length h (s) with Pinocchio ABA, u held constant.

    Returns the new ``(q, qd)`` in rad and rad/s.  The revolute RZ joints have
    nq = nv, so configurations are integrated by plain addition.  ``pin.aba``
    returns a new array each call, so the stage derivatives need no copy.
    """
    k1 = pin.aba(model, data, q, qd, u - damping * qd)
    v2 = qd + 0.5 * h * k1
    k2 = pin.aba(model, data, q + 0.5 * h * qd, v2, u - damping * v2)
    v3 = qd + 0.5 * h * k2
    k3 = pin.aba(model, data, q + 0.5 * h * v2, v3, u - damping * v3)
    v4 = qd + h * k3
    k4 = pin.aba(model, data, q + h * v3, v4, u - damping * v4)
    q_next = q + (h / 6.0) * (qd + 2.0 * v2 + 2.0 * v3 + v4)
    qd_next = qd + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return q_next, qd_next


class Timing(NamedTuple):
    """Per-call wall-clock statistics in ns over ``n`` individually timed calls."""

    median_ns: float
    p99_ns: float
    n: int


def time_per_call(fn: Callable, *args, n: int, warmup: int = 1000) -> Timing:
    """Time ``fn(*args)`` n times, one ``perf_counter_ns`` pair per call, GC off.

    The timer's own overhead is included (see ``timer_overhead_ns``).
    """
    for _ in range(warmup):
        fn(*args)
    samples = np.empty(n, dtype=np.int64)
    clock = time.perf_counter_ns
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(n):
            t0 = clock()
            fn(*args)
            samples[i] = clock() - t0
    finally:
        if gc_was_enabled:
            gc.enable()
    return Timing(float(np.median(samples)), float(np.percentile(samples, 99)), n)


def timer_overhead_ns(n: int = 100_000) -> float:
    """Median ns between two back-to-back ``perf_counter_ns`` calls."""
    clock = time.perf_counter_ns
    samples = np.empty(n, dtype=np.int64)
    for i in range(n):
        t0 = clock()
        samples[i] = clock() - t0
    return float(np.median(samples))


_TIMING_Q0 = np.array([0.5, -0.3, 0.2])  # rad
_TIMING_QD0 = np.array([0.1, 0.2, -0.1])  # rad/s
_TIMING_U = np.array([5.0, -2.0, 1.0])  # N m


def time_mujoco_step(n: int = 200_000) -> Timing:
    """Median and p99 ns per individual ``mujoco.mj_step`` call (RK4, h = 1 ms)."""
    model, data = mujoco_arm()
    data.qpos[:] = _TIMING_Q0
    data.qvel[:] = _TIMING_QD0
    data.ctrl[:] = _TIMING_U
    return time_per_call(mujoco.mj_step, model, data, n=n)


def time_pinocchio_rk4_step(n: int = 100_000) -> Timing:
    """Median and p99 ns per individual Python RK4 step (4 x ``pin.aba``, h = 1 ms)."""
    model, data = pinocchio_arm()
    state = [_TIMING_Q0, _TIMING_QD0]  # replaced, never mutated, by each step

    def step():
        state[0], state[1] = pinocchio_rk4_step(model, data, state[0], state[1], _TIMING_U)

    return time_per_call(step, n=n)


def _relative_error(x: np.ndarray, ref: np.ndarray) -> float:
    """Infinity-norm error of x relative to the infinity norm of ref (floor 1)."""
    return float(np.max(np.abs(x - ref)) / max(np.max(np.abs(ref)), 1.0))


def main() -> int:
    """Check agreement, print timings; returns the process exit code."""
    missing = [name for name, mod in (("mujoco", mujoco), ("pin", pin)) if mod is None]
    if missing:
        print(f"bench/engines.py: optional package(s) not installed: {', '.join(missing)}.")
        print("Install the bench extras with `pip install .[bench]`; skipping.")
        return 0

    rtol = 1e-9
    mj_model, mj_data = mujoco_arm()
    pin_model, pin_data = pinocchio_arm()
    rng = np.random.default_rng(2010)
    err_mj_pin = err_mj_cf = err_pin_cf = err_step = 0.0
    for _ in range(20):
        q = rng.uniform(-np.pi, np.pi, N_JOINTS)
        qd = rng.uniform(-3.0, 3.0, N_JOINTS)
        u = rng.uniform(-20.0, 20.0, N_JOINTS)
        a_mj = mujoco_accel(mj_model, mj_data, q, qd, u)
        a_pin = pinocchio_accel(pin_model, pin_data, q, qd, u, DAMPING)
        a_cf = closed_form_accel(q, qd, u)
        err_mj_pin = max(err_mj_pin, _relative_error(a_mj, a_pin))
        err_mj_cf = max(err_mj_cf, _relative_error(a_mj, a_cf))
        err_pin_cf = max(err_pin_cf, _relative_error(a_pin, a_cf))
        mujoco.mj_step(mj_model, mj_data)  # state and ctrl were set by mujoco_accel
        q1, qd1 = pinocchio_rk4_step(pin_model, pin_data, q, qd, u)
        mj_state = np.concatenate([mj_data.qpos, mj_data.qvel])
        err_step = max(err_step, _relative_error(mj_state, np.concatenate([q1, qd1])))

    print(f"mujoco {mujoco.__version__}, pin {pin.__version__}, numpy {np.__version__}")
    print("qdd agreement at 20 random states, max |a - b|_inf / max(|b|_inf, 1):")
    print(f"  mujoco    vs pinocchio   {err_mj_pin:.2e}")
    print(f"  mujoco    vs closed form {err_mj_cf:.2e}")
    print(f"  pinocchio vs closed form {err_pin_cf:.2e}")
    print(f"one RK4 step (q, qd), mj_step vs Python/pinocchio: {err_step:.2e}")
    ok = max(err_mj_pin, err_mj_cf, err_pin_cf, err_step) < rtol
    print(f"agreement within {rtol:g}: {'OK' if ok else 'FAILED'}")

    print(f"timer overhead (included below): {timer_overhead_ns():.0f} ns")
    for label, timing in (
        ("mujoco mj_step (RK4)", time_mujoco_step()),
        ("pinocchio Python RK4 step", time_pinocchio_rk4_step()),
    ):
        print(
            f"{label:27s} median {timing.median_ns:8.0f} ns   p99 {timing.p99_ns:8.0f} ns"
            f"   (per call, n = {timing.n})"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
