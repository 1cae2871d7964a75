"""plant.family: a loop compiles the code of its plant's family and no other."""
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import arm_config, config
from hilrig.plant.factory import correction_id, plant_from_config
from hilrig.plant.family import CONTACT, RRR3, SERIAL_ARM, Family, for_plant
from hilrig.plant.flex_chain.tick import METHOD_CONTACT
from hilrig.plant.integrators import METHOD_RK4
from hilrig.plant.stepping import advance
from numba import typeof, types
from rt_helpers import ROOT

# Run in a fresh process (its kernels are those of its own runs, loaded from the cache
# or compiled): `hil sim` of a 3RRR, then which of the other families' kernels this
# process compiled or loaded.
OTHER_FAMILIES = """
from hilrig.settings.config import load
from hilrig.rt.sim import simulate
from hilrig.plant import rk4_arm3, rosenbrock, serial_arm
from hilrig.plant.flex_chain import tick, integrators
simulate(load({config!r}, ["sim.duration=0.01"]))
for kernel in (rk4_arm3.rk4_arm3, serial_arm.accel3, rosenbrock.ros2, tick.contact_step,
               integrators.advance_fixed):
    print(kernel.__name__, len(kernel.overloads))
"""


@pytest.mark.system
def test_a_3rrr_run_holds_no_kernel_of_another_family():
    code = OTHER_FAMILIES.format(config=str(ROOT / "configs" / "rrr3_pd.toml"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    counts = dict(line.split() for line in proc.stdout.splitlines())
    assert counts == {"rk4_arm3": "0", "accel3": "0", "ros2": "0", "contact_step": "0",
                      "advance_fixed": "0"}


# the same for a serial arm: which of the 3RRR's kernels the process compiled or loaded
NO_3RRR = """
from hilrig.settings.config import load
from hilrig.rt.sim import simulate
from hilrig.plant import rrr3, rrr3_scalar, stepping
simulate(load("serial3_free", ["sim.duration=0.01"]))
for kernel in (stepping.correct, rrr3.post_adjust, rrr3_scalar.project, rrr3_scalar.rk4):
    print(kernel.__name__, len(kernel.overloads))
"""


@pytest.mark.system
def test_a_serial_arm_run_holds_no_kernel_of_the_3rrr_not_even_its_correction():
    """The initial state's correction (plant.stepping.correct_initial_state) is the 3RRR's
    only: a serial arm's run does not compile it (from Python, ``correct`` compiles the
    3RRR's projection and post-adjustment whatever the plant)."""
    proc = subprocess.run([sys.executable, "-c", NO_3RRR], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    counts = dict(line.split() for line in proc.stdout.splitlines())
    assert counts == {"correct": "0", "post_adjust": "0", "project": "0", "rk4": "0"}


def test_the_family_of_a_plant():
    assert for_plant(plant_from_config(config("rrr3_pd"))) == RRR3
    assert for_plant(plant_from_config(arm_config())) == SERIAL_ARM
    chain = plant_from_config(config("flex_rp"))
    assert for_plant(chain) is chain.mechanism is not None
    assert for_plant(chain, METHOD_CONTACT) == CONTACT
    assert typeof(RRR3) == types.IntegerLiteral(int(RRR3))   # one compilation per family
    assert isinstance(for_plant(plant_from_config(arm_config())), Family)


@pytest.mark.slow
def test_a_step_compiled_for_another_family_is_invalid_not_silent():
    """A 3RRR stepped by the serial arm's kernel meets the family's ``otherwise``: the step
    reports an invalid state; the same step compiled for the 3RRR takes it."""
    cfg = config("rrr3_pd")
    plant = plant_from_config(cfg)
    u = np.array([1.0, -1.0, 0.5])
    args = (plant.params, plant.jams, 0.0, plant.x.copy(), u, 1e-3, METHOD_RK4,
            correction_id(cfg), plant.work, plant.stages)
    assert not advance(*args, SERIAL_ARM)
    assert advance(*args[:3], plant.x.copy(), *args[4:], RRR3)
