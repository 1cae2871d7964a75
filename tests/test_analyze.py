"""`hil analyze` (analysis.modal, plant.stiffness): the 3RRR's Cartesian stiffness against the
static equilibrium under small wrenches, natural frequencies against an eigen-solve of the
linearised plant, the maps, and the flexible link's modes."""
import json
import subprocess

import numpy as np
import pytest
from conftest import CONFIGS, config
from hilrig.plant import stiffness
from hilrig.plant.builtin_models import rrr3_params
from hilrig.plant.factory import plant_from_config
from hilrig.analysis import modal as analyze
from rt_helpers import hil
from scipy.linalg import eigh

K_ACT = np.array([1.2e4, 0.8e4, 1.0e4])     # N m/rad


def rrr3():
    cfg = config("rrr3_pd")
    return cfg, rrr3_params(cfg), np.array(cfg.plant.q0)


@pytest.mark.parametrize("wrench", [[0.0, 0.0, 0.0], [40.0, -25.0, 3.0]])
def test_cartesian_stiffness_equals_differences_of_the_static_equilibrium(wrench):
    """C = K_x^-1 against central differences of the equilibrium pose under W +- dW e_j
    (1e-6 relative); under load, dropping the loaded-mode term misses by far more."""
    _, geo, q0 = rrr3()
    w = np.array(wrench)
    q, lam = stiffness.equilibrium(geo, K_ACT, q0[:3], w, q0)
    s = stiffness.pose_stiffness(geo, K_ACT, np.ones(6), q, lam)
    step = np.array([1e-2, 1e-2, 1e-3])
    numeric = np.zeros((3, 3))
    for j in range(3):
        dw = np.zeros(3)
        dw[j] = step[j]
        plus, _ = stiffness.equilibrium(geo, K_ACT, q0[:3], w + dw, q)
        minus, _ = stiffness.equilibrium(geo, K_ACT, q0[:3], w - dw, q)
        numeric[:, j] = (plus[3:] - minus[3:]) / (2 * step[j])
    scale = np.max(np.abs(numeric))
    assert np.max(np.abs(s.compliance - numeric)) < 1e-6 * scale
    np.testing.assert_allclose(s.stiffness @ s.compliance, np.eye(3), atol=1e-9)
    unloaded = stiffness.pose_stiffness(geo, K_ACT, np.ones(6), q, lam, loaded=False)
    if any(wrench):
        assert np.max(np.abs(unloaded.compliance - numeric)) > 1e-3 * scale
    else:   # paper 001's eq. 21: K_x = J^-T K J^-1
        j_inv = np.linalg.inv(s.jacobian)
        np.testing.assert_allclose(s.stiffness, j_inv.T @ np.diag(K_ACT) @ j_inv, rtol=1e-10)


def test_constraint_jacobian_and_hessians_against_the_plant_and_differences():
    from hilrig.plant import rrr3 as plant_rrr3
    cfg, geo, q0 = rrr3()
    plant = plant_from_config(cfg)
    jac = np.zeros((3, 6))
    plant_rrr3.jacobian(plant.params, q0, jac)
    np.testing.assert_allclose(stiffness.constraint_jacobian(geo, q0), jac, rtol=1e-12,
                               atol=1e-12)
    hess = stiffness.constraint_hessians(geo, q0)
    for j in range(6):
        e = np.zeros(6)
        e[j] = 1e-6
        diff = (stiffness.constraint_jacobian(geo, q0 + e)
                - stiffness.constraint_jacobian(geo, q0 - e)) / 2e-6
        np.testing.assert_allclose(hess[:, :, j], diff, atol=1e-8)


def test_natural_frequencies_equal_an_eigen_solve_of_the_linearised_plant():
    """The 3RRR plant itself (its constrained dynamics, no stabilisation) with the actuators
    as springs about q0: its state Jacobian's eigenvalues are +-i w at the frequencies."""
    cfg, geo, q0 = rrr3()
    cfg = config("rrr3_pd", 'plant.drive="torque"', "plant.baumgarte=false",
                 'plant.correction="none"', 'controller.type="open_loop"')
    plant = plant_from_config(cfg)
    mass = rrr3_params(cfg).mass_diag
    s = stiffness.pose_stiffness(geo, K_ACT, mass, q0)

    def f(x):
        return plant.derivative(x, u=-K_ACT * (x[:3] - q0[:3]))
    x0 = np.concatenate([q0, np.zeros(6)])
    jac = np.zeros((12, 12))
    for j in range(12):
        e = np.zeros(12)
        e[j] = 1e-7
        jac[:, j] = (f(x0 + e) - f(x0 - e)) / 2e-7
    eig = np.linalg.eigvals(jac)
    oscillating = np.sort(eig.imag[eig.imag > 1.0])
    np.testing.assert_allclose(oscillating, np.sort(s.omega), rtol=1e-6)


@pytest.mark.system
def test_map_equals_the_pose_figures_and_runs_in_the_cli(tmp_path):
    cfg, geo, q0 = rrr3()
    elbows = stiffness.elbow_signs(geo, q0)
    theta = stiffness.inverse_kinematics(geo, q0[3:], elbows)
    wrapped = np.angle(np.exp(1j * (theta - q0[:3])))
    np.testing.assert_allclose(wrapped, 0.0, atol=1e-4)     # q0 is printed to 5 digits
    mass = rrr3_params(cfg).mass_diag
    xs, ys = np.array([0.45, 0.6, 0.7]), np.array([0.5, 0.65])
    omega, trans = stiffness.grid(geo, K_ACT, mass, xs, ys, q0[5], elbows)
    for iy, y in enumerate(ys):
        for ix, x in enumerate(xs):
            theta = stiffness.inverse_kinematics(geo, np.array([x, y, q0[5]]), elbows)
            s = stiffness.pose_stiffness(geo, K_ACT, mass, np.concatenate([theta, [x, y, q0[5]]]))
            assert omega[iy, ix] == pytest.approx(s.omega[0], rel=1e-9)
            assert trans[iy, ix] == pytest.approx(np.linalg.eigvalsh(s.stiffness[:2, :2])[0],
                                                  rel=1e-9)
    out = tmp_path / "map.png"
    proc = subprocess.run(hil("analyze", "stiffness", str(CONFIGS / "rrr3_pd.toml"), "--map",
                              "--out", str(out), "--json"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["map"]["grid"] == 50 and out.stat().st_size > 10000
    assert result["omega"][0] > 10.0
    proc = subprocess.run(hil("analyze", "stiffness", str(CONFIGS / "flex_rp.toml")),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "has no Cartesian stiffness analysis of its own" in proc.stderr


def test_flexible_link_modes_mounted_and_clamped():
    """Clamped: the FEM cantilever (13.19 rad/s first); mounted (joints free): two rigid
    modes at 0, then the first elastic one near 64 rad/s; both equal the eigenvalues of
    the undamped plant's state Jacobian."""
    cfg = config("flex_rp", "plant.rayleigh_alpha=0.0", "plant.rayleigh_beta=0.0")
    result = analyze.modes(cfg)
    clamped = np.array(result["clamped"]["omega"])
    mounted = np.array(result["mounted"]["omega"])
    beam = __import__("hilrig.plant.flex_rp.robot", fromlist=["beam"]).beam(cfg.plant)
    np.testing.assert_allclose(clamped, np.sqrt(eigh(beam.stiffness, beam.mass,
                                                     eigvals_only=True)), rtol=1e-7)
    assert mounted[:2] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert mounted[2] == pytest.approx(63.7, abs=0.1)
    plant = plant_from_config(cfg)
    nx = 2 * plant.nq
    jac = np.zeros((nx, nx))
    for j in range(nx):
        e = np.zeros(nx)
        e[j] = 1e-7
        jac[:, j] = (plant.derivative(e) - plant.derivative(-e)) / 2e-7
    eig = np.linalg.eigvals(jac)
    oscillating = np.sort(eig.imag[eig.imag > 1.0])
    np.testing.assert_allclose(oscillating, mounted[2:], rtol=1e-6)
    first = np.array(result["clamped"]["shapes"][0])
    assert np.all(np.diff(first[0::2]) > 0) and first[-2] > 0     # the cantilever's bow
