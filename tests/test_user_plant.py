"""A user's plant from outside the package (examples/user_plant: a cart-pole chain) in
every loop: its equations derived again, energy kept, `hil sim` = `hil run --fast`, jams,
DC-motor drives, and registration through the hilrig.plants entry-point group."""
import json
import math
import subprocess

import numpy as np
import pytest
import sympy as sp
from hilrig.plant.factory import plant_from_config
from hilrig.settings.config import load
from hilrig.rt.sim import simulate
from rt_helpers import ROOT, hil, read_complete

EXAMPLE = ROOT / "examples" / "user_plant"
CONFIG = EXAMPLE / "cart_pole.toml"


@pytest.fixture(autouse=True)
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def run(*args, cwd=EXAMPLE, env=None):
    return subprocess.run(hil(*[str(a) for a in args]), cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


def test_mechanism_matches_the_lagrangian_derived_with_sympy(rng):
    """M(q), bias and V of cart_pole.py against Lagrange's equations of the cart-pole."""
    import cart_pole
    x, th, xd, thd, cart, pole, length, g = sp.symbols("x theta xd thd M m L g", real=True)
    l = length / 2
    px, py = x + l * sp.sin(th), -l * sp.cos(th)          # the rod's centre of mass
    vx, vy = sp.diff(px, x) * xd + sp.diff(px, th) * thd, sp.diff(py, th) * thd
    kinetic = cart * xd ** 2 / 2 + pole * (vx ** 2 + vy ** 2) / 2 \
        + pole * length ** 2 / 12 * thd ** 2 / 2
    potential = pole * g * py
    q, qd = [x, th], [xd, thd]
    mass = sp.hessian(kinetic, qd).applyfunc(sp.simplify)
    # bias = dM/dt qd - dT/dq + dV/dq (Lagrange's equations with qdd terms removed)
    bias = [sum(sp.diff(mass[i, j], q[k]) * qd[k] * qd[j] for j in range(2) for k in range(2))
            - sp.diff(kinetic, q[i]) + sp.diff(potential, q[i]) for i in range(2)]
    symbols = (x, th, xd, thd, cart, pole, length, g)
    mass_f, bias_f = sp.lambdify(symbols, mass), sp.lambdify(symbols, bias)
    potential_f = sp.lambdify(symbols, potential)
    for _ in range(20):
        state = rng.uniform(-3.0, 3.0, 4)
        values = (*state, *rng.uniform(0.2, 2.0, 3), 9.81)
        params = np.array([*values[4:], 0.0, 0.0])
        m_out, b_out = np.zeros((2, 2)), np.zeros(2)
        v_out = cart_pole.mechanism(state[:2], state[2:], params, m_out, b_out)
        assert np.allclose(m_out, np.array(mass_f(*values), dtype=float), rtol=1e-13, atol=1e-13)
        assert np.allclose(b_out, np.array(bias_f(*values), dtype=float), rtol=1e-12, atol=1e-12)
        assert math.isclose(v_out, float(potential_f(*values)), rel_tol=1e-13, abs_tol=1e-13)


def test_free_swing_keeps_its_energy():
    """No input, no damping: the mechanical energy from the user's mechanism stays put."""
    cfg = load(CONFIG, ["controller.type=open_loop", "plant.pole_damping=0", "sim.duration=3"])
    arrays = simulate(cfg).arrays
    energy = arrays["energy"]
    assert np.all(np.isnan(arrays["com"]))         # a chain reports no centre of mass
    scale = 0.2 * 9.81 * 0.3                        # m g l, J
    assert abs(energy[-1] - energy[0]) < 1e-9 * scale
    assert np.ptp(energy) < 1e-8 * scale
    # the cart recoils against the pole: total momentum along x is conserved (no force)
    q, qd = arrays["q"], arrays["qd"]
    momentum = 1.2 * qd[:, 0] + 0.2 * 0.3 * np.cos(q[:, 1]) * qd[:, 1]
    assert np.ptp(momentum) < 1e-10


@pytest.mark.system
def test_hil_run_fast_runs_the_users_plant_as_hil_sim(tmp_path):
    """The compiled real-time loop steps the user's chain as `hil sim` does, bit for bit."""
    log, out = tmp_path / "run.mcap", tmp_path / "sim.npz"
    proc = run("run", CONFIG, "--fast", "--duration", "1", "--log", log, "--no-plot")
    assert proc.returncode == 0, proc.stderr
    proc = run("sim", CONFIG, "--duration", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    arrays, _, meta, summary = read_complete(log)
    sim = np.load(out)
    assert summary["reason"] == "done"
    assert np.array_equal(arrays["q"], sim["q"][:len(arrays["q"])])
    assert np.array_equal(arrays["u"], sim["u"][:len(arrays["u"])])
    assert np.allclose(arrays["energy"], sim["energy"][:len(arrays["energy"])], rtol=1e-12)
    assert abs(sim["q"][-1, 0] - 0.2) < 0.05       # the PD holds the cart near 0.2 m


def test_a_jammed_cart_stops_and_the_pole_swings_on():
    """faults.jam works on a user's chain: E_k restructuring, as for the paper's arm."""
    cfg = load(CONFIG, ["controller.type=open_loop", "plant.pole_damping=0",
                        "plant.q0=[0.0, 1.0]", "plant.qd0=[0.5, 0.0]", "sim.duration=2",
                        "faults.jam.joint=1", "faults.jam.t1=0.5", "faults.jam.duration=0.1"])
    arrays = simulate(cfg).arrays
    t, q, qd = arrays["t"], arrays["q"], arrays["qd"]
    after = t >= 0.6 + 1e-9
    assert np.all(qd[after, 0] == 0.0) and np.ptp(q[after, 0]) == 0.0
    assert np.ptp(q[after, 1]) > 0.5                # the pole keeps swinging
    assert arrays["jam_events"].tolist() == [[1.0, 0.5, 0.6]]
    # with the cart blocked the pole is a compound pendulum: its energy stays put
    energy_pole = 0.5 * 0.2 * 0.6 ** 2 / 3 * qd[after, 1] ** 2 \
        - 0.2 * 9.81 * 0.3 * np.cos(q[after, 1])
    assert np.ptp(energy_pole) < 1e-8


def test_the_users_chain_takes_dc_motor_drives():
    """plant.drive = "voltage": hilrig's motor and gear model drives the user's cart."""
    cfg = load(CONFIG, ["plant.drive=voltage", "controller.type=open_loop",
                        "input.voltage=[6.0]", "sim.duration=0.5", "plant.motor.gear_ratio=20"])
    plant = plant_from_config(cfg)
    assert plant.nq == 2 and plant.nact == 1 and plant.mechanism is not None
    arrays = simulate(cfg).arrays
    assert arrays["i"].shape == (501, 1) and np.all(arrays["i"][1:, 0] > 0.0)
    assert arrays["q"][-1, 0] > 0.01                # 6 V push the cart forward
    # the back EMF lowers the current as the cart speeds up
    assert arrays["i"][-1, 0] < arrays["i"][1, 0]


@pytest.mark.system
def test_a_registered_plant_is_found_by_name(tmp_path):
    """An installed package's entry point (group hilrig.plants) makes `plant.model =
    "cart_pole"` work and puts the name among the known ones in errors."""
    dist = tmp_path / "site" / "hilrig_cart_pole-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hilrig-cart-pole\n"
                                   "Version: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[hilrig.plants]\ncart_pole = cart_pole:CART_POLE\n")
    environ = __import__("os").environ     # keeps a PYTHONPATH that names the hilrig under test
    path = ":".join(filter(None, [str(tmp_path / "site"), str(EXAMPLE), environ.get("PYTHONPATH")]))
    env = {**environ, "PYTHONPATH": path, "PATH": "/usr/bin:/bin"}
    config = tmp_path / "named.toml"
    config.write_text(CONFIG.read_text().replace('"cart_pole:CART_POLE"', '"cart_pole"'))
    proc = run("sim", config, "--duration", "0.2", "--out", tmp_path / "x.npz", cwd=tmp_path,
               env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(str(np.load(tmp_path / "x.npz")["meta"]))["plant"]["model"] == "cart_pole"
    proc = run("sim", config, "--set", "plant.model=cart_pol", "--out", tmp_path / "y.npz",
               cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "did you mean 'cart_pole'" in proc.stderr and "serial_arm" in proc.stderr


@pytest.mark.parametrize("override, message", [
    ("plant.cart_mas=2", "unknown key 'plant.cart_mas' (did you mean 'plant.cart_mass'?)"),
    ("plant.pole_length=-1", "plant.pole_length: must be > 0"),
    ("plant.q0=[0.1]", "plant.q0: expected 2 values (one per coordinate), got 1"),
])
def test_the_users_keys_are_checked_like_ours(override, message):
    with pytest.raises(Exception) as caught:
        load(CONFIG, [override])
    assert message in str(caught.value)
