"""What a loop compiles of the built-in law: a loop that takes a law's pointer (``hil run``)
compiles no built-in law (rt.tick.command chooses by the law's type), and the pointer of an
open-loop or PD controller is a law compiled without the feed-forward's model kernels
(controllers.builtin.builtin_law), with the same commands bit for bit."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hilrig.controllers.builtin import builtin_law
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.interface import call_law
from hilrig.drivers.registry import command_unit
from hilrig.settings.config import load

# in a process of its own on an empty cache: what builtin_law(False) and a loop over a
# law's pointer (rt.tick.control, as rt.realtime.run_loop calls it) compile
COMPILED = """
import numpy as np
from numba import types
from hilrig.jit import compilation
from hilrig.controllers.interface import LAW_SIGNATURE
import hilrig.controllers.builtin as builtin
import hilrig.rt.tick as tick
assert not compilation.progress.compiled, "importing the laws compiled something"
builtin.builtin_law(False)
array = types.float64[::1]
tick.control.compile((types.FunctionType(LAW_SIGNATURE), types.float64, array, array, array,
                      array, array, array, types.float64[:, ::1], types.float64, array, array,
                      types.float64[:, ::1], types.int64, array, types.boolean))
print("\\n".join(name for name, _ in compilation.progress.compiled))
"""


@pytest.mark.system
def test_a_pd_law_and_a_loop_over_a_pointer_compile_no_model_kernel(tmp_path):
    env = dict(os.environ, HILRIG_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", COMPILED], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    compiled = set(out.stdout.split())
    assert {"hilrig.controllers.law.command", "hilrig.rt.tick.control"} <= compiled
    assert not [name for name in compiled if "model_kernels" in name or ".urdf." in name
                or "serial_arm" in name], compiled


@pytest.mark.parametrize("config, feed_forward", [("rrr3_pd", False),
                                                  ("ur5_pd", False), ("rig_inprocess", True)])
def test_the_law_without_the_feed_forward_commands_as_the_whole_law(config, feed_forward):
    cfg = load(config)
    c = controller_from_config(cfg, command_unit(cfg.link.type, cfg.plant.drive))
    assert c.law is builtin_law(feed_forward)
    n = len(cfg.controller.kp)
    rng = np.random.default_rng(3)
    for t in (0.0, 0.37, 1.9):
        pos, vel, cur = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
        commands = []
        for law in (builtin_law(True), c.law):
            u, state = np.zeros(n), c.state.copy()
            call_law(law, t, pos, vel, cur, c.params, state, u)
            commands.append(u)
        assert np.any(commands[0] != 0.0)
        np.testing.assert_array_equal(commands[0], commands[1])
