"""``hil identify --validate LOG --config fitted.toml``: how well a plant predicts a log.

The log's run is simulated again offline (rt.sim.simulate) with its own config (the
controller, its reference, gains and command limits, the step and the measurement noise
that ran) and the plant of each config compared (the fitted one and the one before the
fit), starting from the log's first measured position at rest. The controller closes the
loop as it did on the rig, so the prediction stays bounded where an open-loop replay of
the logged commands through an arm under gravity would drift away with any error in its
start; what differs between the plants is how far each follows the same reference under
the same law, which is what an emulator is used for. Errors per joint: positions (rad),
RMS and max over the log; currents (A) where the log and the plant have them, the
predicted ones taken ``current_lag`` rows later where the log's currents were measured
under an earlier row's command (identify.data: a controller's log over a link).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from hilrig.identify.data import LINK_DELAY, later, read
from hilrig.identify.fit import check_same_plant, regressor_of
from hilrig.schema import Config


@dataclass
class Prediction:
    """A plant's prediction of a log: its label, t (s), q (rad) and i (A or None), and
    the errors per joint: position RMS and max (rad), current RMS and max (A, or None)."""

    label: str
    t: np.ndarray
    q: np.ndarray
    i: np.ndarray | None
    q_rms: np.ndarray
    q_max: np.ndarray
    i_rms: np.ndarray | None = None
    i_max: np.ndarray | None = None


def predict(log_path: str, plants: dict[str, Config]) -> tuple[object, list[Prediction]]:
    """The log (identify.data.Log) and each labelled plant config's Prediction of it.
    ConfigError (one line) when a plant is not the log's."""
    from hilrig.rt.sim import simulate
    log = read(log_path)
    out = []
    for label, cfg in plants.items():
        check_same_plant([log], cfg, regressor_of(cfg))
        nq = len(cfg.plant.q0)
        q0 = tuple(float(v) for v in log.q[0]) + tuple(cfg.plant.q0[log.q.shape[1]:])
        plant_cfg = cfg.replace(plant=dataclasses.replace(cfg.plant, q0=q0, qd0=(0.0,) * nq))
        run_cfg = log.cfg.replace(sim=dataclasses.replace(
            log.cfg.sim, duration=float(log.t[-1] - log.t[0])))
        if log.unit == "N m" and cfg.plant.drive != "torque":
            run_cfg = _torque_mode(run_cfg, cfg)
        arrays = simulate(run_cfg, plant_cfg=plant_cfg).arrays
        rows = min(len(arrays["q"]), len(log.q))
        err = arrays["q"][:rows, :log.q.shape[1]] - log.q[:rows]
        p = Prediction(label, arrays["t"][:rows], arrays["q"][:rows], arrays.get("i"),
                       np.sqrt(np.mean(err ** 2, axis=0)), np.abs(err).max(axis=0))
        if log.i is not None and p.i is not None:
            p.i = later(p.i[:rows], log.current_lag)
            ierr = p.i - log.i[:rows]
            p.i_rms, p.i_max = np.sqrt(np.mean(ierr ** 2, axis=0)), np.abs(ierr).max(axis=0)
        out.append(p)
    return log, out


def _torque_mode(run_cfg: Config, plant_cfg: Config) -> Config:
    """The log's run offline where its drives took joint torques (CiA 402 cyclic
    synchronous torque) on a voltage-driven plant: a drive's current loop puts out the
    torque commanded, V = R_a tau / (r K_m) + K_e r qd with the plant's own constants, so
    the controller runs in process with controller.torque_to_voltage = "motor_model" on
    ``plant_cfg``'s motor without the rotor inertia and friction terms (the drive does not
    compensate them), each command acting LINK_DELAY ticks later (sim.command_latency)."""
    motor = plant_cfg.plant.motor
    zero = {k: tuple(0.0 for _ in v) if isinstance(v, (tuple, list)) else 0.0
            for k, v in (("rotor_inertia", motor.rotor_inertia),
                         ("viscous_friction", motor.viscous_friction))}
    delay = LINK_DELAY.get(run_cfg.link.type, 0) * run_cfg.sim.dt
    return run_cfg.replace(
        link=dataclasses.replace(run_cfg.link, type="inprocess"),
        controller=dataclasses.replace(run_cfg.controller, torque_to_voltage="motor_model"),
        plant=dataclasses.replace(run_cfg.plant, motor=dataclasses.replace(motor, **zero)),
        sim=dataclasses.replace(run_cfg.sim, command_latency=delay))


def report(predictions: list[Prediction]) -> str:
    """The table ``hil identify --validate`` prints: one row per plant and joint."""
    lines = ["prediction error per joint (the log's controller closing the loop on each plant):",
             f"  {'plant':<10} {'joint':>5} {'q RMS [mrad]':>13} {'q max [mrad]':>13}"
             f" {'i RMS [A]':>10} {'i max [A]':>10}"]
    for p in predictions:
        for j in range(len(p.q_rms)):
            cur = (f" {p.i_rms[j]:>10.4g} {p.i_max[j]:>10.4g}" if p.i_rms is not None else "")
            lines.append(f"  {p.label:<10} {j + 1:>5} {1e3 * p.q_rms[j]:>13.4g} "
                         f"{1e3 * p.q_max[j]:>13.4g}{cur}")
    return "\n".join(lines)


def plot(log, predictions: list[Prediction], path: str) -> None:
    """Measured against predicted, per joint: positions, then currents where present."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = log.q.shape[1]
    rows = 2 if log.i is not None else 1
    fig, axes = plt.subplots(rows, n, figsize=(4.5 * n, 3.2 * rows), sharex=True,
                             squeeze=False)
    for j in range(n):
        ax = axes[0, j]
        ax.plot(log.t, log.q[:, j], "k", lw=1.2, label="measured")
        for p in predictions:
            ax.plot(log.t[0] + p.t, p.q[:, j], lw=0.9, label=f"{p.label} "
                    f"(RMS {1e3 * p.q_rms[j]:.3g} mrad)")
        ax.set_title(f"joint {j + 1}")
        ax.set_ylabel("q [rad]")
        ax.legend(fontsize=7)
        if rows == 2:
            ax = axes[1, j]
            ax.plot(log.t, log.i[:, j], "k", lw=1.2, label="measured")
            for p in predictions:
                if p.i is not None:
                    ax.plot(log.t[0] + p.t, p.i[:, j], lw=0.9, label=p.label)
            ax.set_ylabel("i [A]")
            ax.legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("t [s]")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
