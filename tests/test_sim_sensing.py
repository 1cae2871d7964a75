"""Measurement noise and command latency of the offline runs (sim.position_noise,
sim.velocity_noise, sim.noise_seed, sim.command_latency): the law sees the noisy state,
its command acts d steps later; the real-time commands refuse them."""
from __future__ import annotations

import numpy as np
import pytest
from hilrig.cli import main as cli
from hilrig.settings.config import ConfigError, load
from hilrig.rt.sim import measurement_noise, simulate

# Paper 000's arm, torque-driven, under PD holding a target: the command is
# u = Kp (target - pos) + Kd (0 - vel) of what the law sees.
KP, KD = np.array([300.0, 200.0, 100.0]), np.array([30.0, 20.0, 10.0])
TARGET = np.array([0.3, -0.2, 0.4])
PD = ["controller.type=pd", f"controller.kp={KP.tolist()}", f"controller.kd={KD.tolist()}",
      f"controller.target={TARGET.tolist()}", "sim.duration=0.5"]


def pd_command(pos, vel):
    return KP * (TARGET - pos) + KD * (0.0 - vel)


def test_a_command_acts_latency_steps_after_its_measurement():
    run = simulate(load("serial3_free", PD + ["sim.command_latency=0.005"])).arrays
    q, qd, u = run["q"], run["qd"], run["u"]
    assert np.all(u[:5] == 0.0)                          # nothing has arrived yet
    assert np.array_equal(u[5:], pd_command(q[:-5], qd[:-5]))
    prompt = simulate(load("serial3_free", PD)).arrays
    assert np.array_equal(prompt["u"], pd_command(prompt["q"], prompt["qd"]))
    assert not np.array_equal(prompt["q"], q)           # the delay changes the motion


def test_the_law_sees_the_state_plus_the_seeded_noise():
    noisy = PD + ["sim.position_noise=0.002", "sim.velocity_noise=0.05", "sim.noise_seed=11"]
    cfg = load("serial3_free", noisy)
    run = simulate(cfg).arrays
    noise = measurement_noise(cfg.sim, len(run["t"]) - 1, 3)
    assert np.array_equal(run["u"], pd_command(run["q"] + noise[:, :3],
                                               run["qd"] + noise[:, 3:]))
    assert np.std(noise[:, :3]) == pytest.approx(0.002, rel=0.05)
    assert np.std(noise[:, 3:]) == pytest.approx(0.05, rel=0.05)
    again = simulate(load("serial3_free", noisy)).arrays
    other = simulate(load("serial3_free", noisy[:-1] + ["sim.noise_seed=12"])).arrays
    assert np.array_equal(again["q"], run["q"]) and not np.array_equal(other["q"], run["q"])


@pytest.mark.parametrize("overrides, message", [
    (["sim.command_latency=0.0015"],
     "sim.command_latency: 0.0015 s is not a whole number of steps of sim.dt = 0.001 s"),
    (["sim.integrator=accurate", "sim.position_noise=0.01"],
     "sim.position_noise: modelled by the fixed-step runs only (sim.integrator = 'rk4' or "
     "'euler'), not 'accurate'"),
    (["sim.velocity_noise=-1.0"], "sim.velocity_noise: must be >= 0.0, got -1.0"),
])
def test_bad_noise_or_latency_is_one_line(overrides, message):
    with pytest.raises(ConfigError) as caught:
        load("serial3_free", overrides)
    assert str(caught.value) == message


def test_hil_run_refuses_what_only_the_offline_runs_model(tmp_path, capsys):
    assert cli.main(["run", "serial3_free", "--fast", "--log", str(tmp_path / "x.mcap"),
                     "--set", "sim.command_latency=0.002"]) == 2
    assert capsys.readouterr().err == (
        "hil: config error: sim.command_latency: modelled by the offline runs only (hil sim, "
        "hil campaign); `hil run` measures through its link, whose emulator has its own noise "
        "and latency keys\n")
    assert not (tmp_path / "x.mcap").exists()
