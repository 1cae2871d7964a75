"""Fixed-step numba runs against the accurate path: agreement and order of convergence."""
import numpy as np
import pytest
from conftest import config
from hilrig.rt.sim import simulate

SCENARIOS = ["serial3_free", "serial3_jam1", "serial3_jam2", "rrr3_forward", "rrr3_pd"]


def state_at_end(name, integrator, *overrides):
    a = simulate(config(name, f"sim.integrator={integrator}", *overrides)).arrays
    return np.concatenate([a["q"][-1], a["qd"][-1]])


# RK4 truncation error bound at 1 ms (max over q and qd). The open-loop 3RRR moves
# fast (qdd up to ~3e3 rad/s^2 near its singular passes): its error is genuine step
# error, shrinking 16-fold per halving (test_rrr3_converges_at_fourth_order).
RK4_BOUND = {"serial3_free": 1e-9, "serial3_jam1": 1e-9, "serial3_jam2": 1e-9,
             "rrr3_forward": 2e-3, "rrr3_pd": 2e-5}


@pytest.mark.parametrize("name", SCENARIOS)
def test_rk4_at_1ms_agrees_with_accurate_path(name):
    """State error at the end of a run that includes the scenario's events (jam at 2 s
    for joint 1, so that run lasts 2.5 s; 1 s otherwise)."""
    duration = "sim.duration=2.5" if name == "serial3_jam1" else "sim.duration=1"
    exact = state_at_end(name, "accurate", duration)
    rk4 = state_at_end(name, "rk4", duration)
    euler = state_at_end(name, "euler", duration)
    rk4_error = np.abs(rk4 - exact).max()
    euler_error = np.abs(euler - exact).max()
    print(f"\n{name}: max state error at end, 1 ms: RK4 {rk4_error:.2e}, "
          f"semi-implicit Euler {euler_error:.2e}")
    assert rk4_error < RK4_BOUND[name]
    assert euler_error > 10 * rk4_error


def test_convergence_orders():
    """Halving the step divides the error by ~16 with RK4 and ~2 with Euler (free arm)."""
    exact = state_at_end("serial3_free", "accurate", "sim.duration=1", "sim.dt=0.008")
    errors = {}
    for method in ("rk4", "euler"):
        errors[method] = [np.abs(state_at_end("serial3_free", method, "sim.duration=1",
                                              f"sim.dt={dt}") - exact).max()
                          for dt in (0.008, 0.004)]
    rk4_ratio = errors["rk4"][0] / errors["rk4"][1]
    euler_ratio = errors["euler"][0] / errors["euler"][1]
    assert 12 < rk4_ratio < 20
    assert 1.6 < euler_ratio < 2.5


def test_rrr3_converges_at_fourth_order():
    exact = state_at_end("rrr3_forward", "accurate", "sim.duration=1")
    errors = [np.abs(state_at_end("rrr3_forward", "rk4", "sim.duration=1", f"sim.dt={dt}")
                     - exact).max() for dt in (0.001, 0.0005)]
    assert 10 < errors[0] / errors[1] < 25
