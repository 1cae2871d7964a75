"""The joints' safety limits (controllers.limits): leaving a position limit (or exceeding a
rate limit) stops every loop safely with one line naming the joint, its position and the
limit; a URDF's <limit effort velocity lower upper> are the defaults of the unset keys."""
import re
import subprocess

import numpy as np
import pytest
from hilrig.controllers.limits import L_MAX, L_POS_MAX, L_POS_MIN, L_RATE, config_limits
from hilrig.plant.urdf import parse
from hilrig.rt.sim import SimulationError, simulate
from hilrig.settings.config import load, resolve

from rt_helpers import hil

# rig_inprocess moves joint 1 from 0 to 0.6 rad: a bound at 0.3 rad stops it halfway
BOUND = "safety.position_max=[0.3, inf, inf]"
LINE = (r"joint 1 at 0\.30\d* \(rad or m\) left its position limits \[-inf, 0\.3\] "
        r"\(safety\.position_max = 0\.3\): run stopped")


@pytest.mark.parametrize("command", [("sim", "--out", "{tmp}/run.npz"),
                                     ("run", "--fast", "--no-plot", "--log", "{tmp}/run.mcap"),
                                     ("run", "--no-plot", "--log", "{tmp}/run.mcap"),
                                     ("control", "--log", "{tmp}/run.mcap")],
                         ids=["sim", "run-fast", "run-paced", "control"])
@pytest.mark.system
def test_leaving_a_position_limit_stops_every_loop_with_one_line(command, tmp_path):
    """hil sim, hil run (--fast and paced) and hil control (the measured position, over the
    in-process link) stop on the first tick whose measured q1 is past 0.3 rad, exit 1,
    and say so in one line naming joint 1, its position and the bound."""
    args = [a.format(tmp=tmp_path) for a in command]
    proc = subprocess.run(hil(args[0], "rig_inprocess", *args[1:], "--set", BOUND),
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert re.search(LINE, out), out
    position = float(re.search(r"joint 1 at ([0-9.]+)", out).group(1))
    assert 0.3 < position < 0.3 + 2e-3        # stopped within the tick that crossed


def test_a_rate_limit_stops_the_run_and_says_so():
    cfg = load("rig_inprocess", ["safety.max_rate=[0.2, inf, inf]"])
    with pytest.raises(SimulationError, match=r"joint 1 at 0\.20\d* \(rad/s or m/s\) exceeded "
                                              r"its rate limit \+-0\.2 \(safety\.max_rate\)"):
        simulate(cfg)


def test_a_urdf_gives_the_default_command_rate_and_position_limits():
    """Torque drive: max |u| is the URDF's effort (below emulator.max_torque); voltage
    drive: the supply's range (a voltage clamp from the effort would cap the speed too);
    the rates and positions are the URDF's; a key set (inf: none) wins."""
    ur5 = parse.load("ur5")
    torque = resolve({"plant": {"model": "urdf", "urdf": "ur5"},
                      "emulator": {"max_torque": 1000.0}})
    limits = config_limits(torque, 6, "N m")
    assert np.array_equal(limits[L_MAX], ur5.effort)
    assert np.array_equal(limits[L_RATE], ur5.velocity)
    assert np.array_equal(limits[L_POS_MIN], ur5.lower)
    assert np.array_equal(limits[L_POS_MAX], ur5.upper)
    panda = load("panda_pd")
    volts = config_limits(panda, 7, "V")
    assert np.all(volts[L_MAX] == panda.emulator.supply_voltage)
    assert np.array_equal(volts[L_POS_MAX], parse.load("panda", None, "panda_hand").upper)
    off = config_limits(load("panda_pd", ["safety.position_max=inf", "safety.max_command=20"]),
                        7, "V")
    assert np.all(off[L_POS_MAX] == np.inf) and np.all(off[L_MAX] == 20.0)


def test_a_falling_urdf_arm_stops_at_its_urdf_position_limit():
    """The Panda, torque-driven with no input, falls under gravity until a joint passes the
    URDF's <limit>: the run stops there, the line names the joint and the URDF's bound."""
    panda = parse.load("panda", None, "panda_hand")
    cfg = load("panda_pd", ["plant.drive=torque", "controller.type=open_loop",
                            "input.torque=0", "sim.duration=5", "safety.max_rate=inf"])
    with pytest.raises(SimulationError) as caught:
        simulate(cfg)
    text = str(caught.value)
    found = re.fullmatch(r"joint (\d) at (-?[0-9.]+) \(rad or m\) left its position limits "
                         r"\[(-?[0-9.]+), (-?[0-9.]+)\] \(safety\.position_(min|max) = "
                         r"(-?[0-9.]+)\): run stopped", text)
    assert found, text
    k = int(found.group(1)) - 1
    assert float(found.group(3)) == pytest.approx(panda.lower[k], abs=1e-5)
    assert float(found.group(4)) == pytest.approx(panda.upper[k], abs=1e-5)
    q = float(found.group(2))
    assert q < panda.lower[k] or q > panda.upper[k]
