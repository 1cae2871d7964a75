"""Build a controller (its ``ctrl`` array, model and scratch) from a resolved config."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hilrig.controllers.law import (
    FEEDFORWARD,
    OPEN_LOOP,
    OUT_DIRECT,
    OUT_GAIN,
    OUT_MOTOR_MODEL,
    PD,
    WORK_MODEL,
)
from hilrig.controllers.layout import make_ctrl
from hilrig.controllers.reference import HOLD, QUINTIC, SINUSOID, STEP
from hilrig.plant.factory import actuated_joints, motor_params, plant_from_config
from hilrig.plant.layout import work_shape

KINDS = {"open_loop": OPEN_LOOP, "pd": PD, "feedforward": FEEDFORWARD}
REFERENCES = {"hold": HOLD, "step": STEP, "quintic": QUINTIC, "sinusoid": SINUSOID}


@dataclass
class Controller:
    """Arguments of ``controllers.law.command`` besides time and measurement.

    ctrl: the law's flat array; model: params of the controller's own plant
    model (feed-forward only; empty otherwise); work: its 2-D scratch.
    """

    ctrl: np.ndarray
    model: np.ndarray
    work: np.ndarray


def command_unit(cfg: dict) -> str:
    """What the configured link takes: "N m" for torque plants and CANopen drives
    (cyclic synchronous torque), else "V"."""
    torque_link = cfg["plant"]["drive"] == "torque" or cfg["link"]["type"] == "canopen"
    return "N m" if torque_link else "V"


def controller_from_config(cfg: dict, unit: str | None = None) -> Controller:
    """The controller of ``cfg['controller']`` for a link that takes ``unit`` ("V" or "N m").

    Default unit: ``command_unit(cfg)``. A law that computes torques (controller.output
    = "torque") on a link that takes volts goes through controller.torque_to_voltage.
    """
    plant, c, inp = cfg["plant"], cfg["controller"], cfg["input"]
    nact = actuated_joints(cfg)
    unit = command_unit(cfg) if unit is None else unit
    voltage_driven = unit == "V"
    if not voltage_driven and c["type"] != "open_loop" and c["output"] == "voltage":
        raise ValueError("controller.output: 'voltage', but the link takes joint torques "
                         "(N m); set controller.output = 'torque'")
    model = np.zeros(0)
    rows, cols = 3, nact
    if c["type"] == "open_loop":
        constant = inp["voltage"] if voltage_driven else inp["torque"]
        ctrl = make_ctrl(OPEN_LOOP, nact, u_const=0.0 if constant is None else np.array(constant))
        return Controller(ctrl, model, np.zeros((rows, cols)))
    if c["type"] == "feedforward":
        mechanical = dict(cfg, plant=dict(plant, drive="torque"))
        model = plant_from_config(mechanical).params
        shape = work_shape(nact)
        rows, cols = WORK_MODEL + shape[0], max(cols, shape[1])
    output, blocks = OUT_DIRECT, {}
    if voltage_driven and c["output"] == "torque":
        m = motor_params(cfg)
        if c["torque_to_voltage"] == "gain":
            output, blocks = OUT_GAIN, {"scale": 1.0 / m.torque_per_volt()}
        else:
            ratio = m.gear_ratio
            output = OUT_MOTOR_MODEL
            blocks = {"motor_resistance": m.resistance / (ratio * m.torque_constant),
                      "motor_emf": m.back_emf_constant * ratio,
                      "motor_inertia": ratio ** 2 * m.rotor_inertia,
                      "motor_friction": ratio ** 2 * m.viscous_friction}
    start = c["start"] if c["start"] is not None else plant["q0"][:nact]
    ctrl = make_ctrl(KINDS[c["type"]], nact, REFERENCES[c["reference"]], output,
                     t_start=c["t_start"], duration=c["duration"], frequency=c["frequency"],
                     kp=np.array(c["kp"]), kd=np.array(c["kd"]), target=np.array(c["target"]),
                     start=np.array(start), amplitude=np.array(c["amplitude"]),
                     phase=np.array(c["phase"]), **blocks)
    return Controller(ctrl, model, np.zeros((rows, cols)))
