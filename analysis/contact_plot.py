"""The plot of a flexible-chain drop (plant.flex_chain.offline's arrays): the contact points'
heights with the onsets marked, the contact forces, the energy books, and a frame strip
of the fall."""
from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

FRAMES = 8


def plot_contact_run(arrays: dict, path: str) -> None:
    """Draw the drop to ``path`` (PNG)."""
    meta = json.loads(str(arrays["meta"]))
    t, points, events = arrays["t"], arrays["points"], arrays["events"]
    force = arrays["contact_force"]
    n_points = points.shape[1]
    fig = plt.figure(figsize=(10, 12))
    grid = fig.add_gridspec(4, FRAMES, height_ratios=[3, 2, 2, 1.4])
    heights = fig.add_subplot(grid[0, :])
    for k in range(n_points):
        heights.plot(t, points[:, k, 1], label=f"O{k + 1}")
    onsets = events[events[:, 2] == 1] if len(events) else events
    for time_ in onsets[:, 0] if len(onsets) else ():
        heights.axvline(time_, color="k", lw=0.3, alpha=0.4)
    heights.axhline(0.0, color="k", lw=0.8)
    heights.set_ylabel("height X2 [m]")
    heights.set_title(f"{meta['plant']['model']} {meta['plant'].get('modes', '')}: "
                      f"{len(onsets)} impacts (onsets, grey lines)")
    heights.legend(fontsize=8, ncol=n_points)
    forces = fig.add_subplot(grid[1, :], sharex=heights)
    for k in range(n_points):
        forces.plot(t, force[:, k, 1], label=f"F_N O{k + 1}")
        forces.plot(t, force[:, k, 0], ls=":", label=f"F_T O{k + 1}")
    forces.set_ylabel("contact force [N]")
    forces.legend(fontsize=7, ncol=n_points)
    books = fig.add_subplot(grid[2, :], sharex=heights)
    energy = arrays["energy"]
    books.plot(t, energy - energy[0], label="E - E(0)")
    books.plot(t, arrays["work_contact"], label="work of contact and friction")
    books.plot(t, -arrays["dissipated"], label="- dissipated")
    books.plot(t, energy - energy[0] - arrays["work_contact"] + arrays["dissipated"],
               label="books' error")
    books.set_ylabel("energy [J]")
    books.set_xlabel("t [s]")
    books.legend(fontsize=8)
    rows = np.linspace(0, len(t) - 1, FRAMES).astype(int)
    low, high = points[..., 0].min(), points[..., 0].max()
    top = max(points[..., 1].max(), 0.1)
    for column, row in enumerate(rows):
        ax = fig.add_subplot(grid[3, column])
        ax.plot(points[row, :, 0], points[row, :, 1], "-o", ms=2, lw=1)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xlim(low - 0.1, high + 0.1)
        ax.set_ylim(-0.05, top + 0.05)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"{t[row]:.2f} s", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
