"""hil identify's fit time and accuracy (issue 27). Run: python bench/bench_identify.py

The 3-DOF arm of paper 000 with DC motors (voltage drive, PD with the motor model), joint
friction (viscous and Coulomb, exact stick-slip) and hidden parameters 5-50 % away from
the config's, driven by hil excite's trajectory (5 harmonics of 0.1 Hz) for 60 s at
1 kHz: 60001 rows. Its log is corrupted at noise levels of 0, 1 and 5 %: Gaussian noise
of that fraction of each measured signal's RMS (the positions' about their mean, the
currents'), no quantisation. For each level: the fit time (identify.fit.identify:
reading the log, filtering, the current fit, the linear fit, the fitted config; the
median of 3), and the largest error of the base parameters and of the motor constants
against the truth (and, among the base parameters, of the Coulomb levels), with the
largest |error| / stated standard deviation. Then the Stribeck fit (friction.static and
friction.stribeck_velocity): the same run with a hidden hump (static 2.4, 1.3, 1.0 N m,
v_s 0.06, 0.05, 0.04 rad/s), CONFIG guessing static 1.5 N m and v_s 0.03 rad/s, at
0 and 1 % noise: the fit time with the hump and without it (--fit without the two
names; median of 3) and each joint's static and v_s with their errors in standard
deviations. Timings on a shared 2-core VM vary between runs.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hilrig.identify.excite import excite  # noqa: E402
from hilrig.identify.fit import identify, raw_of, write_config  # noqa: E402
from hilrig.rt.sim import simulate  # noqa: E402
from hilrig.settings.config import load  # noqa: E402
from hilrig.telemetry.recorder import to_json  # noqa: E402

BASE = """\
[sim]
duration = 60.0
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

[friction]
viscous = 0.3
coulomb = 1.0
"""
TRUTH = {"plant.mass": [10.5, 6.2, 4.1], "plant.inertia": [1.2, 0.85, 0.5],
         "plant.com": [0.45, 0.3, 0.33], "plant.damping": [3.0, 1.5, 2.5],
         "plant.motor.rotor_inertia": [0.012, 0.009, 0.011],
         "plant.motor.resistance": [2.6, 3.3, 3.1],
         "plant.motor.back_emf_constant": [0.12, 0.09, 0.11],
         "friction.viscous": [0.4, 0.25, 0.15], "friction.coulomb": [1.5, 0.8, 0.6]}
LEVELS = (0.0, 0.01, 0.05)
HUMP = {"friction.static": [2.4, 1.3, 1.0], "friction.stribeck_velocity": [0.06, 0.05, 0.04]}
GUESS = ["friction.static=1.5", "friction.stribeck_velocity=0.03"]
LINEAR = ("plant.inertia,plant.com,plant.mass,plant.damping,motor.rotor_inertia,"
          "motor.viscous_friction,motor.resistance,motor.back_emf_constant,friction.viscous,"
          "friction.coulomb")


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench_identify_"))
    print(f"logs and configs in {folder}")
    (folder / "base.toml").write_text(BASE)
    base = load(folder / "base.toml")
    found = excite(base, raw_of(folder / "base.toml"), periods=6)
    write_config(found.raw, folder / "excite.toml", "bench_identify")
    truth = load(folder / "excite.toml", [f"{k}={v}" for k, v in TRUTH.items()])
    run = simulate(truth).arrays
    arrays = {k: run[k] for k in ("t", "q", "u", "i")}
    arrays["meta"] = np.array(to_json(truth.to_dict()))
    print(f"exciting trajectory: condition number {found.condition:.3g}; "
          f"{len(arrays['t'])} rows of {truth.sim.dt * 1e3:g} ms")
    print(f"{'noise':>6} {'fit time [s]':>13} {'base max |err| [%]':>19} "
          f"{'Coulomb max |err| [%]':>22} {'motor max |err| [%]':>20} {'max |err|/std':>14}")
    rng = np.random.default_rng(0)
    for level in LEVELS:
        noisy = _noisy(arrays, level, rng)
        log = folder / f"log_{level:g}.npz"
        np.savez(log, **noisy)
        times = []
        for _ in range(3):
            started = time.perf_counter()
            fit = identify([log], base, raw=raw_of(folder / "base.toml"))
            times.append(time.perf_counter() - started)
        true_beta = fit.base_of(truth)
        base_err = np.abs(fit.beta - true_beta) / np.abs(true_beta)
        coulomb = [k for k, label in enumerate(fit.labels)
                   if label.startswith("friction.coulomb")]
        z = list(np.abs(fit.beta - true_beta) / fit.std)
        motor_err = []
        for name, (value, std) in fit.electrical.items():
            key, j = name[:-3], int(name[-2]) - 1
            true = TRUTH[f"plant.{key}"][j]
            motor_err.append(abs(value - true) / true)
            z.append(abs(value - true) / std)
        print(f"{100 * level:>5g}% {statistics.median(times):>13.2f} "
              f"{100 * base_err.max():>19.3f} {100 * base_err[coulomb].max():>22.3f} "
              f"{100 * max(motor_err):>20.3f} {max(z):>14.2f}")
        worst = int(np.argmax(base_err))
        print(f"        worst base parameter: {fit.labels[worst]} "
              f"({100 * base_err[worst]:+.3f} %)")
    stribeck(folder)


def _noisy(arrays: dict, level: float, rng) -> dict:
    """The log's arrays with Gaussian noise of ``level`` times each signal's RMS (the
    positions' about their mean) on the positions and currents."""
    noisy = dict(arrays)
    for key in ("q", "i"):
        x = arrays[key]
        spread = np.sqrt(np.mean((x - x.mean(axis=0)) ** 2, axis=0)) if key == "q" \
            else np.sqrt(np.mean(x ** 2, axis=0))
        noisy[key] = x + level * spread * rng.standard_normal(x.shape)
    return noisy


def stribeck(folder: Path) -> None:
    """The Stribeck fit's time and accuracy (module docstring)."""
    hump = load(folder / "excite.toml", [f"{k}={v}" for k, v in {**TRUTH, **HUMP}.items()])
    run = simulate(hump).arrays
    arrays = {k: run[k] for k in ("t", "q", "u", "i")}
    arrays["meta"] = np.array(to_json(hump.to_dict()))
    guess = load(folder / "base.toml", GUESS)
    rng = np.random.default_rng(1)
    print("Stribeck fit (static [N m], v_s [rad/s]: value, error in standard deviations):")
    for level in (0.0, 0.01):
        log = folder / f"hump_{level:g}.npz"
        np.savez(log, **_noisy(arrays, level, rng))
        times = {}
        for label, names in (("with", LINEAR + ",friction.static"), ("without", LINEAR)):
            runs = []
            for _ in range(3):
                started = time.perf_counter()
                fit = identify([log], guess, names)
                runs.append(time.perf_counter() - started)
            times[label] = statistics.median(runs)
            if label == "with":
                found = fit.stribeck
        cells = []
        for j in range(3):
            for key in ("static", "stribeck_velocity"):
                value = found[f"friction.{key}[{j + 1}]"]
                true = HUMP[f"friction.{key}"][j]
                cells.append("not identifiable" if isinstance(value, str) else
                             f"{value[0]:.4g} ({100 * (value[0] - true) / true:+.1f} %, "
                             f"{(value[0] - true) / value[1]:+.1f} sd)")
        print(f"{100 * level:>5g}%  fit {times['with']:.2f} s (without the hump "
              f"{times['without']:.2f} s)")
        for j in range(3):
            print(f"        joint {j + 1}: static {cells[2 * j]}, v_s {cells[2 * j + 1]}")


if __name__ == "__main__":
    main()
