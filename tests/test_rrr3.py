"""3RRR parallel robot with DC motors (paper 003 §3-5)."""
import numpy as np
import pytest
from conftest import config
from hilrig.plant import rrr3
from hilrig.plant.factory import plant_from_config
from hilrig.plant.linalg import spd_solve_robust
from hilrig.rt.sim import simulate

PAPER_Q0 = np.array([-0.1259, 1.3727, 3.2675, 0.59363, 0.60145, 0.020707])
SCRATCH = np.zeros((24, 18))


def paper_plant(*overrides):
    return plant_from_config(config("rrr3_forward", *overrides))


def jac(plant, q):
    out = np.zeros((3, 6))
    rrr3.jacobian(plant.params, q, out)
    return out


def f_of(plant, q):
    out = np.zeros(3)
    rrr3.constraints(plant.params, q, out)
    return out


def test_paper_initial_state_satisfies_constraints_to_printed_digits():
    """|f_i(q0)| is within what rounding q0 to its printed digits can cause."""
    plant = paper_plant()
    half_digit = np.array([5e-5, 5e-5, 5e-5, 5e-6, 5e-6, 5e-7])
    bound = np.abs(jac(plant, PAPER_Q0)) @ half_digit
    residual = np.abs(f_of(plant, PAPER_Q0))
    assert np.all(residual <= bound)
    assert residual.max() > 1e-7  # and the printed state is indeed not exact


def test_jacobian_and_convective_term_match_finite_differences(rng):
    plant = paper_plant()
    for _ in range(10):
        q = PAPER_Q0 + rng.normal(0, 0.3, 6)
        qd = rng.normal(0, 2.0, 6)
        numeric = np.column_stack([(f_of(plant, q + e) - f_of(plant, q - e)) / 2e-6
                                   for e in np.eye(6) * 1e-6])
        assert np.allclose(jac(plant, q), numeric, atol=1e-8)
        conv = np.zeros(3)
        rrr3.kinematics(plant.params, q, qd, np.zeros((3, 6)), np.zeros(3), conv)
        dt = 1e-6  # Phidot qd = d/dt(Phi(q + t qd)) qd
        numeric = (jac(plant, q + dt * qd) @ qd - jac(plant, q - dt * qd) @ qd) / (2 * dt)
        assert np.allclose(conv, numeric, rtol=1e-6, atol=1e-6)


def svd_accel(plant, x, u):
    """Paper eqs. (21)-(23) literally: R = I - pinv(Phi) Phi, qdd = pinv([R^T M; Phi]) h."""
    q, qd = x[:6], x[6:12]
    m_diag = np.zeros(6)
    rrr3.coupled_mass_diag(plant.params, m_diag)
    k, c = 10.0, 10.0
    force = np.concatenate([k * u, np.zeros(3)])
    damping = np.concatenate([c * qd[:3], np.zeros(3)])
    phi = jac(plant, q)
    conv = np.zeros(3)
    rrr3.kinematics(plant.params, q, qd, np.zeros((3, 6)), np.zeros(3), conv)
    w0 = 100 * np.sqrt(2.0)
    gamma = -conv - 2 * w0 * phi @ qd - w0 ** 2 * f_of(plant, q)
    R = np.eye(6) - np.linalg.pinv(phi) @ phi
    H = np.vstack([R.T @ np.diag(m_diag), phi])
    h = np.concatenate([R.T @ (force - damping), gamma])
    return np.linalg.pinv(H) @ h


def test_multiplier_form_equals_svd_pseudo_inverse_along_both_runs():
    """Along the paper's runs, through every singular pass, the fast solve = eq. (23)."""
    for name in ("rrr3_forward", "rrr3_pd"):
        a = simulate(config(name, "sim.duration=1.5")).arrays
        plant = plant_from_config(config(name))
        worst = 0.0
        for k in range(0, len(a["t"]), 7):
            x = np.concatenate([a["q"][k], a["qd"][k]])
            fast = plant.derivative(x, a["u"][k])[6:]
            worst = max(worst, np.abs(fast - svd_accel(plant, x, a["u"][k])).max()
                        / max(1.0, np.abs(fast).max()))
        assert worst < 1e-10, name


def test_robust_solve_handles_rank_loss_like_a_pseudo_inverse(rng):
    """Where Phi M^-1 Phi^T is singular (Phi_q loses rank) the solve returns the
    minimum-norm least-squares answer, as numpy's pinv does."""
    for rank in (0, 1, 2, 3):
        basis = rng.normal(size=(3, rank))
        a = basis @ basis.T
        b = rng.normal(size=3)
        expected = np.linalg.pinv(a, rcond=1e-12) @ b
        got = b.copy()
        used = spd_solve_robust(a.copy(), got, 3, np.zeros((8, 3)), 1e-12)
        assert used == rank
        assert np.allclose(got, expected, atol=1e-9)


def sign_changes(values, t, until):
    v = values[t <= until]
    return int(np.count_nonzero(np.diff(np.sign(v)) != 0))


@pytest.mark.parametrize("name", ["rrr3_forward", "rrr3_pd"])
def test_projection_keeps_residual_below_1e_12_through_singular_passes(name):
    a = simulate(config(name)).arrays
    assert np.all(np.isfinite(a["q"]))
    assert sign_changes(a["det_phi_x"], a["t"], 3.0) >= 6   # it does pass singularities
    assert a["residual"].max() < 1e-12


def test_paper_method_residual_peaks():
    """Baumgarte + post-adjustment of the dependent coordinates (the paper's method):
    the residual rises only at the singular passes, to about the paper's level."""
    for name in ("rrr3_forward", "rrr3_pd"):
        a = simulate(config(name, "plant.correction=post_adjust")).arrays
        after_start = a["t"] > 0.1
        peak = a["residual"][after_start].max()
        typical = np.median(a["residual"][after_start])
        print(f"\n{name}: paper's method residual peak {peak:.2e} m^2, median {typical:.2e}")
        assert np.all(np.isfinite(a["q"]))
        assert peak < 1e-5 and typical < 1e-8


def test_pd_scenario_reproduces_paper_figure_3():
    """Torque reading of the PD law: one sign change of det Phi_theta and six of
    det Phi_x in the first second, none later; target reached after about 2.5 s."""
    a = simulate(config("rrr3_pd")).arrays
    t = a["t"]
    assert sign_changes(a["det_phi_theta"], t, 1.0) == 1
    assert sign_changes(a["det_phi_x"], t, 1.0) == 6
    assert sign_changes(a["det_phi_x"], t, 3.0) == 6
    error = np.abs(a["q"][:, :3] - [0.4, 0.8, 1.0]).max(axis=1)
    settled = t[np.nonzero(error >= 0.01)[0][-1] + 1]
    assert 1.8 < settled < 2.6
    assert error[-1] < 2e-3


def test_voltage_reading_of_pd_is_the_other_law():
    """MODELS.md: gains on the voltage give a visibly different run (17 passes of det Phi_x)."""
    a = simulate(config("rrr3_pd", "controller.output=voltage")).arrays
    assert sign_changes(a["det_phi_x"], a["t"], 1.0) == 17
    assert np.abs(a["u"][0]).max() > 300.0   # and an implausible 340 V at t = 0


REFERENCE_1S = {  # independent numpy study: DOP853, rtol 1e-12, printed q0, Baumgarte on,
    # PD evaluated continuously
    "rrr3_forward": [0.49547774567789166, -1.1982756796390228, 5.8875692381483455,
                     1.1453328393904103, 0.08541559365244182, 0.29742093512611784],
    "rrr3_pd": [0.4171220125823294, 0.9249198293657563, 1.1799353730801547,
                0.9258879540103727, 0.8484596842918976, 0.16963474582542656],
}


@pytest.mark.parametrize("name", sorted(REFERENCE_1S))
def test_accurate_path_matches_independent_reference(name):
    a = simulate(config(name, "sim.integrator=accurate", "sim.duration=1",
                        "plant.correction=none", "sim.control=continuous")).arrays
    assert np.abs(a["q"][-1] - REFERENCE_1S[name]).max() < 1e-8
