"""Build a controller's ``gains`` array from a resolved config."""
import numpy as np

from controllers.law import OPEN_LOOP, PD, make_gains
from plant.factory import motor_params


def gains_from_config(cfg: dict) -> np.ndarray:
    plant, ctrl, inp = cfg["plant"], cfg["controller"], cfg["input"]
    nact = 3 if plant["model"] == "rrr3" else len(plant["mass"])
    voltage_driven = plant["drive"] != "torque"
    if ctrl["type"] == "pd":
        scale = np.ones(nact)
        if voltage_driven and ctrl["output"] == "torque":
            scale = 1.0 / motor_params(cfg).torque_per_volt()
        return make_gains(PD, nact, kp=np.array(ctrl["kp"]), kd=np.array(ctrl["kd"]),
                          target=np.array(ctrl["target"]), scale=scale)
    constant = inp["voltage"] if voltage_driven else inp["torque"]
    return make_gains(OPEN_LOOP, nact, u_const=0.0 if constant is None else np.array(constant))
