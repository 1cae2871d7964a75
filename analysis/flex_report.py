"""``hil analyze flex CONFIG [--out report.png] [--json]``: paper 002's figures for a
flex_rp config under controller.type = "flex_feedforward".

Runs the config offline (rt.sim) and the controller's algorithm (rigid references, rigid
and flexible feed-forward), then reports and draws: the tip's flexural displacement w_E
(m) and slope w'_E (rad) in link 2's frame (the paper's Figs. 15, 16), the joints of the
rigid references against the flexible run and their deviations (Figs. 7-10), the
rigid and flexible feed-forward force and torque and what the run applied (Figs. 11-14),
and the tip's path in XOY against the desired one.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hilrig.controllers import flex_feedforward as ff
from hilrig.errors import ConfigError
from hilrig.plant.flex_rp import robot as flex_rp
from hilrig.rt.sim import simulate
from hilrig.schema import Config


def report(cfg: Config) -> tuple[dict, dict]:
    """(figures, curves): the maxima the docs compare with the paper, and the time series."""
    if cfg.controller.type != "flex_feedforward":     # (its rules check the plant)
        raise ConfigError("hil analyze flex: needs controller.type = 'flex_feedforward' "
                          "(paper 002's flexible P-R robot)")
    algorithm = ff.compute(cfg)
    run = simulate(cfg).arrays
    t, q = run["t"], run["q"]
    tip = flex_rp.tip(cfg.plant, q)
    c = cfg.controller
    desired = ff.Path(tuple(c.path_centre), tuple(c.path_amplitude), c.path_rate).tip(t)[0]
    ref = algorithm.rigid[:, :len(t)]
    curves = {"t": t, "tip": tip, "desired": desired.T, "q": q[:, :2], "reference": ref[:2].T,
              "u": run["u"], "force_rigid": algorithm.force_rigid[:len(t)],
              "force_flexible": algorithm.force_flexible[:len(t)]}
    figures = {
        "tip_deflection_max_m": float(np.max(np.abs(tip[:, 2]))),
        "tip_slope_max_rad": float(np.max(np.abs(tip[:, 3]))),
        "joint_deviation_max": [float(np.max(np.abs(q[:, k] - ref[k]))) for k in range(2)],
        "force_max_N": float(np.max(np.abs(run["u"][:, 0]))),
        "torque_max_Nm": float(np.max(np.abs(run["u"][:, 1]))),
        "feedforward_rigid_max": np.max(np.abs(algorithm.force_rigid), axis=0).tolist(),
        "feedforward_flexible_max": np.max(np.abs(algorithm.force_flexible), axis=0).tolist(),
        "tip_path_error_max_m": float(np.max(np.hypot(tip[:, 0] - desired[0],
                                                      tip[:, 1] - desired[1]))),
    }
    return figures, curves


def draw(curves: dict, out: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = curves["t"]
    fig, ax = plt.subplots(2, 3, figsize=(15, 8), constrained_layout=True)
    ax[0, 0].plot(t, curves["tip"][:, 2] * 1e3)
    ax[0, 0].set_ylabel("tip flexural displacement w_E, mm")
    ax[0, 1].plot(t, curves["tip"][:, 3])
    ax[0, 1].set_ylabel("tip slope w'_E, rad")
    for k, (name, unit) in enumerate((("d", "m"), ("q", "rad"))):
        ax[1, k].plot(t, curves["reference"][:, k], "k--", label=f"{name} rigid reference")
        ax[1, k].plot(t, curves["q"][:, k], label=f"{name} flexible run")
        twin = ax[1, k].twinx()
        twin.plot(t, curves["q"][:, k] - curves["reference"][:, k], "r:", lw=1)
        twin.set_ylabel(f"deviation, {unit}", color="r")
        ax[1, k].set_ylabel(f"{name}, {unit}")
        ax[1, k].legend(loc="upper left", fontsize=8)
    for k, style in enumerate(("-", "-")):
        ax[0, 2].plot(t, curves["force_rigid"][:, k], "--", label=f"{'F, N' if k == 0 else 'tau, N m'} rigid")
        ax[0, 2].plot(t, curves["force_flexible"][:, k], ":", label=f"{'F' if k == 0 else 'tau'} flexible")
        ax[0, 2].plot(t, curves["u"][:, k], style, lw=0.8, label=f"{'F' if k == 0 else 'tau'} applied")
    ax[0, 2].set_ylabel("joint force (N) and torque (N m)")
    ax[0, 2].legend(fontsize=7)
    ax[1, 2].plot(curves["desired"][:, 0], curves["desired"][:, 1], "k--", label="desired")
    ax[1, 2].plot(curves["tip"][:, 0], curves["tip"][:, 1], label="tip, flexible run")
    ax[1, 2].set_aspect("equal")
    ax[1, 2].set_xlabel("x_E, m")
    ax[1, 2].set_ylabel("y_E, m")
    ax[1, 2].legend(fontsize=8)
    for a in ax.flat[:5]:
        a.set_xlabel("t, s")
    fig.suptitle(title)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def run(cfg: Config, out: Path | None, as_json: bool, name: str) -> str:
    figures, curves = report(cfg)
    path = Path(out) if out else Path("runs") / f"{name}_flex.png"
    draw(curves, path, f"{name}: {cfg.controller.feedforward} feed-forward, "
                       f"kp {list(cfg.controller.kp)}, kd {list(cfg.controller.kd)}")
    figures["png"] = str(path)
    if as_json:
        return json.dumps(figures)
    return "\n".join(f"{key}: {value}" for key, value in figures.items())
