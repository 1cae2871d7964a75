"""Build a controller's ``gains`` array from a resolved config."""
import numpy as np

from controllers.law import OPEN_LOOP, PD, make_gains
from plant.factory import motor_params


def gains_from_config(cfg: dict, command_unit: str | None = None) -> np.ndarray:
    """The gains of ``cfg['controller']`` for a link that takes ``command_unit``.

    Args:
        cfg: a resolved config.
        command_unit: "V" or "N m", what the link's ``write`` takes (``Link.command_unit``).
            Default: what the plant takes, except "N m" for CANopen drives (cyclic
            synchronous torque). Torque gains on a link that takes volts are scaled by
            1/k = R_a / (r K_m).
    """
    plant, ctrl, inp = cfg["plant"], cfg["controller"], cfg["input"]
    nact = 3 if plant["model"] == "rrr3" else len(plant["mass"])
    if command_unit is None:
        torque_link = plant["drive"] == "torque" or cfg["link"]["type"] == "canopen"
        command_unit = "N m" if torque_link else "V"
    takes_volts = command_unit == "V"
    if ctrl["type"] == "pd":
        scale = np.ones(nact)
        if takes_volts and ctrl["output"] == "torque":
            scale = 1.0 / motor_params(cfg).torque_per_volt()
        return make_gains(PD, nact, kp=np.array(ctrl["kp"]), kd=np.array(ctrl["kd"]),
                          target=np.array(ctrl["target"]), scale=scale)
    constant = inp["voltage"] if takes_volts else inp["torque"]
    return make_gains(OPEN_LOOP, nact, u_const=0.0 if constant is None else np.array(constant))
