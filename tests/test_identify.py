"""hil excite and hil identify (hilrig.identify, docs/IDENTIFY.md): the regressor against
the plant's own dynamics, the Fourier reference, and the round trip: an emulated run of
paper 000's arm with DC motors and hidden parameters, its log corrupted as a rig's sensors
would (encoder quantisation, position and current noise), fitted, and the fitted plant
validated on another trajectory."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hilrig.controllers.layout import make_ctrl
from hilrig.controllers.reference import FOURIER, reference
from hilrig.identify import regressor
from hilrig.identify.excite import trajectory
from hilrig.plant import serial_arm
from hilrig.plant.factory import plant_from_config
from hilrig.settings.config import load, resolve

ROOT = Path(__file__).resolve().parent.parent

BASE = """\
[sim]
duration = 20.0
dt = 0.001

[plant]
model = "serial_arm"
drive = "voltage"
damping = [2.0, 2.0, 2.0]

[controller]
type = "pd"
kp = [300.0, 200.0, 100.0]
kd = [30.0, 20.0, 10.0]
target = [0.0, 0.0, 0.0]
output = "torque"
torque_to_voltage = "motor_model"
"""
# The rig's true parameters, hidden from the fit (BASE holds paper 000's and the default
# motors'): 5-20 % away from them.
TRUTH = {"plant.mass": [10.5, 6.2, 4.1], "plant.inertia": [1.2, 0.85, 0.5],
         "plant.com": [0.45, 0.3, 0.33], "plant.damping": [3.0, 1.5, 2.5],
         "plant.motor.rotor_inertia": [0.012, 0.009, 0.011],
         "plant.motor.resistance": [2.6, 3.3, 3.1],
         "plant.motor.back_emf_constant": [0.12, 0.09, 0.11]}
SETS = [f"{k}={v}" for k, v in TRUTH.items()]
COUNTS = 40960          # encoder counts per joint revolution: 0.15 mrad steps
POSITION_NOISE = 1e-4   # rad
CURRENT_NOISE = 0.01    # of each current's RMS


def hil(*argv, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (env.get("PYTHONPATH"), str(ROOT.parent)) if p)
    env["MPLBACKEND"] = "Agg"
    return subprocess.run([sys.executable, "-m", "hilrig.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


def ok(*argv, cwd: Path) -> str:
    done = hil(*argv, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def measured(src: Path, dst: Path, seed: int) -> None:
    """A rig's log of the emulated run ``src``: positions through a quantising encoder with
    Gaussian noise, currents with noise (the command is the controller's own: exact)."""
    data = dict(np.load(src, allow_pickle=False))
    rng = np.random.default_rng(seed)
    step = 2.0 * np.pi / COUNTS
    data["q"] = np.round((data["q"] + POSITION_NOISE * rng.standard_normal(data["q"].shape))
                         / step) * step
    if "i" in data:
        rms = np.sqrt(np.mean(data["i"] ** 2, axis=0))
        data["i"] = data["i"] + CURRENT_NOISE * rms * rng.standard_normal(data["i"].shape)
    np.savez(dst, **data)


def truth_config(folder: Path) -> Path:
    """BASE with TRUTH written in: the plant the logs come from."""
    text = BASE.replace("damping = [2.0, 2.0, 2.0]\n", "".join(
        f"{k.split('.')[-1]} = {v}\n" for k, v in TRUTH.items() if k.count(".") == 1))
    text += "\n[plant.motor]\n" + "".join(
        f"{k.split('.')[-1]} = {v}\n" for k, v in TRUTH.items() if k.count(".") == 2)
    path = folder / "truth.toml"
    path.write_text(text)
    return path


# -- without a run -----------------------------------------------------------------------

def test_regressor_gives_the_arms_own_torques():
    """Y pi = M(q) qdd + C qd + D qd + g(q) of plant.serial_arm at random states, and the
    base parameters reproduce every column they fold in."""
    raw = tomllib.loads(BASE)
    raw["plant"]["drive"] = "torque"
    for key, value in TRUTH.items():
        if key.count(".") == 1:
            raw["plant"][key.split(".")[1]] = value
    cfg = resolve(raw)
    plant = plant_from_config(cfg)
    arm = regressor.Arm(np.array(cfg.plant.length), cfg.plant.gravity)
    names = ["plant.inertia", "plant.com", "plant.mass", "plant.damping"]
    values = regressor.standard_values(cfg.plant)
    pi = np.concatenate([values[n] for n in names])
    rng = np.random.default_rng(3)
    q, qd, qdd = (rng.uniform(-2, 2, (20, 3)) for _ in range(3))
    tau = (regressor.columns(arm, names, q, qd, qdd) @ pi).reshape(3, -1).T
    mass, bias, scratch = np.zeros((3, 3)), np.zeros(3), np.zeros((4, 3))
    for k in range(len(q)):
        serial_arm.mass_and_bias(plant.params, q[k], qd[k], mass, bias, scratch)
        np.testing.assert_allclose(tau[k], mass @ qdd[k] + bias, rtol=1e-12, atol=1e-10)
    bp = regressor.base_parameters(arm, names)
    cols = regressor.column_names(names, 3)
    # 6 rigid base parameters of a planar 3R arm under gravity + 3 dampings; the masses
    # act only through the outer links' sums, m_1 not at all
    assert [cols[d] for d in bp.dependent] == ["plant.mass[1]", "plant.mass[2]",
                                               "plant.mass[3]"]
    Y = regressor.columns(arm, names, q, qd, qdd)
    np.testing.assert_allclose(Y[:, bp.dependent], Y[:, bp.base] @ bp.K, atol=1e-9)
    np.testing.assert_allclose(Y[:, bp.base] @ bp.beta(pi), Y @ pi, rtol=1e-10, atol=1e-9)


def test_fourier_reference_kernel_matches_the_series():
    """controllers.reference's FOURIER gives the series of hil excite (its rates and
    accelerations the derivatives of its positions), held before t_start."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    offset, f, t_start = np.array([0.1, -0.2, 0.3]), 0.25, 0.5
    ctrl = make_ctrl(1, 3, FOURIER, frequency=f, t_start=t_start, target=offset,
                     fourier=(a, b))
    work = np.zeros((3, 3))
    times = np.linspace(t_start, t_start + 4.0, 17)
    want = trajectory(a, b, f, offset, times - t_start)
    for k, t in enumerate(times):
        reference(FOURIER, t, ctrl, work)
        for row in range(3):
            np.testing.assert_allclose(work[row], want[row][k], rtol=1e-12, atol=1e-12)
    h = 1e-5
    q = trajectory(a, b, f, offset, np.array([1.0 - h, 1.0, 1.0 + h]))[0]
    np.testing.assert_allclose((q[2] - q[0]) / (2 * h),
                               trajectory(a, b, f, offset, np.array([1.0]))[1][0], rtol=1e-6)
    reference(FOURIER, 0.2, ctrl, work)
    np.testing.assert_allclose(work[0], want[0][0], rtol=1e-12)
    assert not work[1:].any()


# -- the round trip ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """Logs of the hidden plant: an exciting run (hil excite's trajectory), a second,
    different trajectory for validation, one with joint 3 held still; each measured as a
    rig's sensors would."""
    folder = tmp_path_factory.mktemp("identify")
    (folder / "base.toml").write_text(BASE)
    out = ok("excite", "base.toml", "--out", "excite.toml", cwd=folder)
    condition = float(re.search(r"condition number .*: ([\d.]+)", out).group(1))
    ok("excite", "base.toml", "--out", "other.toml", "--seed", "1", "--harmonics", "3",
       "--frequency", "0.15", "--periods", "1", cwd=folder)
    sets = [a for s in SETS for a in ("--set", s)]
    ok("sim", "excite.toml", *sets, "--out", "excite_true.npz", cwd=folder)
    ok("sim", "other.toml", *sets, "--out", "other_true.npz", cwd=folder)
    cfg = load(folder / "excite.toml")
    still = [a for name in ("fourier_a", "fourier_b")
             for a in ("--set", f"controller.{name}="
                       f"{list(getattr(cfg.controller, name)[:10]) + [0.0] * 5}")]
    ok("sim", "excite.toml", *sets, *still, "--out", "still_true.npz", cwd=folder)
    for seed, name in enumerate(("excite", "other", "still")):
        measured(folder / f"{name}_true.npz", folder / f"{name}.npz", seed)
    return folder, condition


@pytest.mark.system
@pytest.mark.slow
def test_fit_recovers_the_hidden_parameters(rig):
    """Every well-excited base parameter and motor constant within 2 % of the truth, the
    stated standard deviation covering the error (within 3 sigma); the fitted config
    loads and holds the fitted values."""
    folder, condition = rig
    assert condition < 10.0
    out = ok("identify", "excite.npz", "--config", "base.toml", "--out", "fitted.toml",
             cwd=folder)
    from hilrig.identify.fit import identify, raw_of
    fit = identify([folder / "excite.npz"], load(folder / "base.toml"),
                   raw=raw_of(folder / "base.toml"))
    truth = load(truth_config(folder))
    true_beta = fit.base_of(truth)
    assert fit.identifiable.all()
    errors = fit.beta - true_beta
    assert np.all(np.abs(errors) < 0.02 * np.abs(true_beta)), (fit.labels, errors / true_beta)
    assert np.all(np.abs(errors) < 3 * fit.std), errors / fit.std
    for name, (value, std) in fit.electrical.items():
        key, j = re.match(r"motor\.(\w+)\[(\d)\]", name).groups()
        true = TRUTH[f"plant.motor.{key}"][int(j) - 1]
        assert abs(value - true) < 0.02 * true and abs(value - true) < 3 * std, name
    # what hil identify printed is this fit: each base parameter with value +- std
    for label, value, std in zip(fit.labels, fit.beta, fit.std):
        line = next(x for x in out.splitlines() if x.strip().startswith(label))
        shown, shown_std = map(float, re.search(r"([-\d.e+]+) \+- ([-\d.e+]+)", line).groups())
        assert shown == pytest.approx(value, rel=1e-5) and shown_std == pytest.approx(std, rel=0.05)
    assert re.search(r"residual RMS per joint: .* N m, .* N m, .* N m", out)
    fitted = load(folder / "fitted.toml")
    np.testing.assert_allclose(fit.base_of(fitted), fit.beta, rtol=1e-9)
    assert list(fitted.plant.motor.resistance) == pytest.approx(
        [fit.electrical[f"motor.resistance[{j}]"][0] for j in (1, 2, 3)])


@pytest.mark.system
@pytest.mark.slow
def test_validation_on_another_trajectory(rig):
    """On a trajectory the fit has not seen, the fitted plant predicts the positions within
    1 mrad RMS per joint; the config before the fit misses by more than 10x that."""
    folder, _ = rig
    if not (folder / "fitted.toml").exists():
        ok("identify", "excite.npz", "--config", "base.toml", "--out", "fitted.toml",
           cwd=folder)
    out = ok("identify", "--validate", "other.npz", "--config", "fitted.toml",
             "--plot", "validate.png", cwd=folder)
    rows = {(m.group(1), int(m.group(2))): float(m.group(3))
            for m in re.finditer(r"^\s+(fitted|unfitted)\s+(\d)\s+([\d.e+-]+)", out, re.M)}
    assert len(rows) == 6, out
    for j in (1, 2, 3):
        assert rows["fitted", j] < 1.0, out                      # mrad
        assert rows["unfitted", j] > 10 * rows["fitted", j], out
    assert max(rows["unfitted", j] for j in (1, 2, 3)) > 10.0, out
    assert (folder / "validate.png").stat().st_size > 10_000


@pytest.mark.system
@pytest.mark.slow
def test_unexcited_parameter_is_not_identifiable(rig):
    """With joint 3 held still its damping has no column to speak of: reported as not
    identifiable, without a number; the excited parameters still fit."""
    folder, _ = rig
    out = ok("identify", "still.npz", "--config", "base.toml", cwd=folder)
    line = next(x for x in out.splitlines() if x.strip().startswith("plant.damping[3]"))
    assert "not identifiable" in line and "+-" not in line, line
    line = next(x for x in out.splitlines() if x.strip().startswith("plant.damping[1]"))
    assert "+-" in line


@pytest.mark.system
@pytest.mark.slow
def test_torque_drive_fit(tmp_path):
    """A torque-driven arm: the torque is the logged command; the link parameters fit
    within 2 % from a log with the same sensor noise."""
    (tmp_path / "base.toml").write_text(BASE.replace('"voltage"', '"torque"'))
    ok("excite", "base.toml", "--out", "excite.toml", "--periods", "1", cwd=tmp_path)
    sets = [a for s in SETS if "motor" not in s for a in ("--set", s)]
    ok("sim", "excite.toml", *sets, "--out", "true.npz", cwd=tmp_path)
    measured(tmp_path / "true.npz", tmp_path / "log.npz", 7)
    from hilrig.identify.fit import identify
    fit = identify([tmp_path / "log.npz"], load(tmp_path / "base.toml"))
    raw = load(tmp_path / "base.toml", [f"{k}={v}" for k, v in TRUTH.items()
                                        if "motor" not in k])
    true_beta = fit.base_of(raw)
    assert fit.identifiable.all() and not fit.electrical
    assert np.all(np.abs(fit.beta - true_beta) < 0.02 * np.abs(true_beta))


# -- bad input: one line each --------------------------------------------------------------

def _one_line(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hil: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.system
def test_bad_input_one_line_each(tmp_path):
    (tmp_path / "base.toml").write_text(BASE.replace("duration = 20.0", "duration = 2.0"))
    ok("sim", "base.toml", "--out", "log.npz", cwd=tmp_path)
    ok("sim", "base.toml", "--set", "plant.length=[0.9, 0.7, 0.6]", "--out", "long.npz",
       cwd=tmp_path)
    data = dict(np.load(tmp_path / "log.npz", allow_pickle=False))
    data["q"] = data["q"][:0]
    np.savez(tmp_path / "empty.npz", **data)
    _one_line(hil("identify", "empty.npz", "--config", "base.toml", cwd=tmp_path),
              "empty.npz", "no measurements")
    _one_line(hil("identify", "log.npz", "--config", "base.toml", "--fit",
                  "plant.inertia,motor.kt", cwd=tmp_path),
              "--fit motor.kt", "not a parameter")
    _one_line(hil("identify", "log.npz", "long.npz", "--config", "base.toml", cwd=tmp_path),
              "long.npz", "logs of different plants", "plant.length")
    _one_line(hil("identify", "log.npz", "--config", "base.toml", "--fit",
                  "friction.coulomb", cwd=tmp_path), "no [friction] table")
    _one_line(hil("excite", "rrr3_pd", "--out", "x.toml", cwd=tmp_path), "serial_arm")
    _one_line(hil("sim", "base.toml", "--set", "controller.reference='fourier'", "--set",
                  "controller.frequency=0.1", "--set", "controller.harmonics=2", "--set",
                  "controller.fourier_a=[0.1, 0.2]", "--out", "x.npz", cwd=tmp_path),
              "controller.fourier_a: 2 values",
              "needs 6")
