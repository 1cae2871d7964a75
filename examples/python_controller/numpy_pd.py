"""A user's controller in plain Python (numpy here; a neural network or a call into
another library works the same way), run by ``hil control`` with hilrig's links,
limits, watchdog and telemetry. See rig_zmq_python.toml beside this file.

A class named by ``controller.law`` is instantiated once with ``controller.params``
(a float64 array); the instance is called every tick with
(t, pos, vel, cur, params, state, u) and writes u in place (V or N m per axis).
"""
import numpy as np


class NumpyPD:
    """Joint-space PD in volts: u = kp (target - pos) - kd vel.

    params = [kp (V/rad), kd (V s/rad), target_1 .. target_n (rad)].
    """

    def __init__(self, params: np.ndarray):
        self.kp, self.kd = float(params[0]), float(params[1])
        self.target = np.array(params[2:])

    def __call__(self, t, pos, vel, cur, params, state, u):
        u[:] = self.kp * (self.target - pos) - self.kd * vel
