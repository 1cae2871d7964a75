"""hilrig's own control laws (open loop, PD, computed-torque feed-forward) as one
compiled law of the public interface (controllers.interface), and their builder.

They enter the loops exactly as a user's law does: ``builtin_law`` has the signature
``law(t, pos, vel, cur, params, state, u)``; its ``params`` are the ``ctrl`` array of
controllers.layout followed by the feed-forward model's plant params, its ``state``
is the scratch of controllers.law.command. ``build`` is registered under the names
``open_loop``, ``pd`` and ``feedforward`` (entry-point group ``hilrig.controllers``,
pyproject.toml), as a third-party package registers its own builders.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from hilrig.controllers.interface import LAW_SIGNATURE, Controller
from hilrig.controllers.law import (
    FEEDFORWARD,
    OPEN_LOOP,
    OUT_DIRECT,
    OUT_GAIN,
    OUT_MOTOR_MODEL,
    PD,
    WORK_MODEL,
    command,
)
from hilrig.controllers.layout import C_MODEL, C_WORK_COLS, make_ctrl
from hilrig.controllers.reference import HOLD, QUINTIC, SINUSOID, STEP
from hilrig.plant.factory import actuated_joints, motor_params, plant_from_config
from hilrig.plant.layout import work_shape
from hilrig.plant.packed import matrix_view
from hilrig.schema import Config
from numba import cfunc

KINDS = {"open_loop": OPEN_LOOP, "pd": PD, "feedforward": FEEDFORWARD}
REFERENCES = {"hold": HOLD, "step": STEP, "quintic": QUINTIC, "sinusoid": SINUSOID}


@cfunc(LAW_SIGNATURE, cache=True, error_model="numpy")
def builtin_law(t, pos, vel, cur, params, state, u):
    """controllers.law.command on the ctrl, model and work packed in params and state."""
    start = int(params[C_MODEL])
    cols = int(params[C_WORK_COLS])
    work = matrix_view(state, 0, state.shape[0] // cols, cols)
    command(params[:start], params[start:], work, t, pos, vel, u)


def build(cfg: Config, unit: str) -> Controller:
    """The built-in controller of ``cfg.controller`` for a link that takes ``unit``
    ("V" or "N m"). A law that computes torques (controller.output = "torque") on a
    link that takes volts goes through controller.torque_to_voltage."""
    plant, c, inp = cfg.plant, cfg.controller, cfg.input
    nact = actuated_joints(cfg)
    voltage_driven = unit == "V"
    if not voltage_driven and c.type != "open_loop" and c.output == "voltage":
        raise ValueError("controller.output: 'voltage', but the link takes joint torques "
                         "(N m); set controller.output = 'torque'")
    model = np.zeros(0)
    rows, cols = 3, nact
    if c.type == "open_loop":
        constant = inp.voltage if voltage_driven else inp.torque
        ctrl = make_ctrl(OPEN_LOOP, nact, u_const=0.0 if constant is None else np.array(constant))
        return _controller(ctrl, model, rows, cols, "open_loop", feedback=False)
    if c.type == "feedforward":
        mechanical = cfg.replace(plant=dataclasses.replace(plant, drive="torque"))
        model = plant_from_config(mechanical).params
        shape = work_shape(nact)
        rows, cols = WORK_MODEL + shape[0], max(cols, shape[1])
    output, blocks = OUT_DIRECT, {}
    if voltage_driven and c.output == "torque":
        m = motor_params(cfg)
        if c.torque_to_voltage == "gain":
            output, blocks = OUT_GAIN, {"scale": 1.0 / m.torque_per_volt()}
        else:
            ratio = m.gear_ratio
            output = OUT_MOTOR_MODEL
            blocks = {"motor_resistance": m.resistance / (ratio * m.torque_constant),
                      "motor_emf": m.back_emf_constant * ratio,
                      "motor_inertia": ratio ** 2 * m.rotor_inertia,
                      "motor_friction": ratio ** 2 * m.viscous_friction}
    start = c.start if c.start is not None else plant.q0[:nact]
    ctrl = make_ctrl(KINDS[c.type], nact, REFERENCES[c.reference], output,
                     t_start=c.t_start, duration=c.duration, frequency=c.frequency,
                     kp=np.array(c.kp), kd=np.array(c.kd), target=np.array(c.target),
                     start=np.array(start), amplitude=np.array(c.amplitude),
                     phase=np.array(c.phase), **blocks)
    return _controller(ctrl, model, rows, cols, c.type)


def _controller(ctrl: np.ndarray, model: np.ndarray, rows: int, cols: int, name: str,
                feedback: bool = True) -> Controller:
    ctrl[C_MODEL] = len(ctrl)
    ctrl[C_WORK_COLS] = cols
    return Controller(builtin_law, np.concatenate([ctrl, model]), np.zeros(rows * cols),
                      feedback=feedback, name=name)
