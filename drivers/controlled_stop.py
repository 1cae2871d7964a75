"""The controlled stop of emulated drives: IEC 60204-1 stop categories 1 and 2.

A drive in a controlled stop brings its joint to rest on a ramp and then (category 2)
holds it there; category 1 removes the power once at rest, which the device does itself
(``ControlledStop.done``). The emulated drives own the plant, so their stop servo is a
well-tuned one: each step it asks a twin of the plant (the same state, parameters and
jams) how the joints' accelerations over one step answer the inputs, a = a0 + B u (one
step with no input on the stopping joints, one more per stopping joint with a unit
input), and sets the inputs that give the wanted accelerations

    a_want = a_ref + w^2 (q_ref - q) + 2 w (qd_ref - qd),   w = 10 / stop_time,

with the reference decelerating uniformly from the joints' rates at the stop, qd0, to
rest at RAMP x stop_time = T_r: qd_ref = qd0 (1 - s / T_r), a_ref = -qd0 / T_r for
s < T_r, then qd_ref = a_ref = 0 (the hold), and q_ref its integral step by step as the
plant integrates a constant acceleration (the trapezoid), from q0. The rest of the stop
time lets the servo settle, so the joints are at rest when the stop time is over.
A joint given a deceleration d (rad/s^2: a CiA 402 drive's quick stop deceleration
0x6085) ramps down on it instead, T_r = |qd0| / d, and its stop takes T_r / RAMP (at
least MIN_STOP_STEPS steps: the servo's bandwidth w h stays below 0.15), w its own. Inputs
are clamped to the drives' range (``limit``): a drive too weak for the ramp stops later,
as a real one does. The plant's own physics (gravity, coupling, back-EMF, friction, the
motor model) is in a0 and B, so the joints stop and hold without droop; inputs are the
plant's (V or N m).

It runs on the emulator's tick only during a stop, at the cost of 1 + (stopping joints)
twin steps per tick (and a small linear solve); nothing of it runs otherwise.
"""
from __future__ import annotations

import numpy as np
from hilrig.plant.model import Plant
from hilrig.plant.packed import PackedStep

STIFFNESS = 15.0     # w = STIFFNESS / stop_time, rad/s: the servo's bandwidth
RAMP = 0.7           # the reference is at rest after this fraction of the stop time
PROBE = 1.0          # the unit input of a probe step (V or N m)
MIN_STOP_STEPS = 100  # the shortest stop of a joint given its deceleration, in steps


class ControlledStop:
    """The stop servo of the actuated joints of ``plant`` (module docstring).

    Args:
        plant: the plant the drives drive (read, never stepped here).
        h: the step the drives hold an input for, s.
        method, correction: the plant's integrator and constraint correction ids.
        limit: the drives' range, +-V or +-N m.
    """

    def __init__(self, plant: Plant, h: float, method: int, correction: int, limit: float):
        self.plant, self.h, self.limit = plant, float(h), float(limit)
        self.twin = plant.copy()
        self.stepper = PackedStep(self.twin, h, method, correction)
        n = self.n = plant.nact
        self.nq = plant.nq
        self.active = False
        self.category = 0
        self.stop_time = 0.0
        self.elapsed = 0.0           # s since the stop began
        self.joints = np.ones(n, dtype=bool)    # the stopping joints
        self.q_ref, self.qd0 = np.zeros(n), np.zeros(n)
        self.ramp, self.length = np.zeros(n), np.zeros(n)   # T_r and the stop's time, s
        self.a0, self.b = np.zeros(n), np.zeros((n, n))

    def start(self, category: int, stop_time: float, joints=None, deceleration=None) -> None:
        """Begin a controlled stop of ``category`` (1 or 2) over ``stop_time`` s, of
        ``joints`` (a boolean mask; all by default), from the plant's present state;
        ``deceleration``: per joint, rad/s^2, the ramp of a joint where it is > 0 (module
        docstring), the stop then lasting ``stop_time`` = the longest joint's."""
        if category not in (1, 2):
            raise ValueError(f"a controlled stop is category 1 or 2, got {category}")
        if not stop_time > 0.0:
            raise ValueError(f"stop_time must be > 0 s, got {stop_time}")
        self.category, self.stop_time, self.elapsed = category, float(stop_time), 0.0
        self.joints[:] = True if joints is None else joints
        x = self.plant.x
        self.q_ref[:], self.qd0[:] = x[:self.n], x[self.nq:self.nq + self.n]
        self.ramp[:], self.length[:] = RAMP * self.stop_time, self.stop_time
        if deceleration is not None:
            d = np.broadcast_to(np.asarray(deceleration, dtype=float), self.n)
            given = d > 0.0
            self.ramp[given] = np.abs(self.qd0[given]) / d[given]
            self.length[given] = np.maximum(self.ramp[given] / RAMP, MIN_STOP_STEPS * self.h)
            self.stop_time = float(self.length[self.joints].max(initial=0.0))
        self.active = True

    @property
    def done(self) -> bool:
        """Category 1: the ramp is over (the device removes the power now)."""
        return self.active and self.category == 1 and self.elapsed >= self.stop_time - 1e-9

    def stop(self) -> None:
        """End the stop (power removed, or the drives commanded anew)."""
        self.active = False

    def command(self, u: np.ndarray) -> None:
        """Set the stopping joints' inputs in ``u`` (the others stay as given) for the
        coming step, and advance the stop's clock by one step."""
        s, ramp = self.elapsed, np.maximum(self.ramp, 1e-300)
        w = STIFFNESS / self.length
        qd_ref = self.qd0 * np.maximum(0.0, 1.0 - s / ramp)
        qd_next = self.qd0 * np.maximum(0.0, 1.0 - (s + self.h) / ramp)
        a_ref = (qd_next - qd_ref) / self.h
        x = self.plant.x
        q, qd = x[:self.n], x[self.nq:self.nq + self.n]
        want = a_ref + w * w * (self.q_ref - q) + 2.0 * w * (qd_ref - qd)
        self.q_ref += 0.5 * self.h * (qd_ref + qd_next)
        mask = self.joints
        u[mask] = 0.0
        a0 = self._accel(u, qd)
        idx = np.flatnonzero(mask)
        for col, j in enumerate(idx):
            u[j] = PROBE
            self.b[:, col] = (self._accel(u, qd) - a0) / PROBE
            u[j] = 0.0
        b = self.b[np.ix_(idx, np.arange(len(idx)))]
        solved, *_ = np.linalg.lstsq(b, want[idx] - a0[idx], rcond=None)
        u[idx] = np.clip(solved, -self.limit, self.limit)
        self.elapsed += self.h

    def _accel(self, u: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """The actuated joints' mean acceleration over one step from the plant's state
        under ``u`` (a step of the twin)."""
        twin, plant = self.twin, self.plant
        twin.params[:] = plant.params
        twin.jams[:] = plant.jams
        twin.x[:] = plant.x
        twin.t = plant.t
        self.stepper.u[:] = u
        self.stepper.step()
        return (twin.x[self.nq:self.nq + self.n] - qd) / self.h
