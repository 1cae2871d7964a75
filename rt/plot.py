"""Plots of a run (the arrays of ``hil sim``): what a user checks first."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_run(arrays: dict, path: str) -> None:
    """Draw joint angles (jam instants marked), inputs, and the model's diagnostics to ``path``."""
    meta = json.loads(str(arrays["meta"]))
    model = meta["plant"]["model"]
    t = arrays["t"]
    rrr3 = model == "rrr3"
    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    ax = axes[0]
    names = ["θ1", "θ2", "θ3", "x_C", "y_C", "φ"] if rrr3 else \
        [f"q{i + 1}" for i in range(arrays["q"].shape[1])]
    for i, name in enumerate(names):
        ax.plot(t, arrays["q"][:, i], label=name + (" [m]" if name in ("x_C", "y_C") else " [rad]"))
    ax.set_ylabel("coordinates")
    ax.legend(ncol=3, fontsize=8)
    ax.set_title(_title(meta))
    for joint, t1, t2 in arrays.get("jam_events", np.zeros((0, 3))):
        for a in axes:
            a.axvspan(t1, t2, color="tab:red", alpha=0.25)
            a.axvline(t1, color="tab:red", lw=0.8)
        axes[0].annotate(f"joint {int(joint)} jams", (t1, axes[0].get_ylim()[1]),
                         color="tab:red", fontsize=8, va="top")
    ax = axes[1]
    if rrr3:
        ax.plot(t, arrays["det_phi_theta"], label="det Φθ")
        ax.plot(t, arrays["det_phi_x"], label="det Φx")
        ax.axhline(0.0, color="k", lw=0.5)
        ax.set_ylabel("determinants")
    else:
        ax.plot(t, arrays["com"][:, 0], label="x_C (down) [m]")
        ax.plot(t, arrays["com"][:, 1], label="y_C [m]")
        ax.set_ylabel("centre of mass")
    ax.legend(fontsize=8)
    ax = axes[2]
    if rrr3:
        ax.semilogy(t, np.maximum(arrays["residual"], 1e-18), label="max |f_i| [m²]")
        ax.set_ylabel("constraint residual")
    else:
        unit = "V" if meta["plant"]["drive"] != "torque" else "N m"
        for j in range(arrays["u"].shape[1]):
            ax.plot(t, arrays["u"][:, j], label=f"u{j + 1} [{unit}]")
        ax.set_ylabel("inputs")
    ax.legend(fontsize=8)
    ax.set_xlabel("t [s]")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _title(meta: dict) -> str:
    plant, ctrl = meta["plant"], meta["controller"]
    law = "open loop" if ctrl["type"] == "open_loop" else \
        f"PD (kp={ctrl['kp'][0]:g}, kd={ctrl['kd'][0]:g}, output={ctrl['output']})"
    extra = f", {plant['correction']}" if plant["model"] == "rrr3" else ""
    return f"{plant['model']} ({plant['drive']}-driven), {law}, {meta['sim']['integrator']}" \
           f" dt={meta['sim']['dt']:g}s{extra}"
