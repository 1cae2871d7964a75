"""Plots of a run: ``plot_run`` for the arrays of ``hil sim``, ``plot_log`` for a
real-time run's telemetry (telemetry.logfile.run_arrays). What a user checks first."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from hilrig.drivers.registry import command_unit  # noqa: E402
from hilrig.errors import ConfigError  # noqa: E402
from hilrig.plant.factory import plant_model  # noqa: E402

# the groups plot_log draws
LOG_GROUPS = ("t", "q", "u", "lateness", "compute_tick")


def plot_run(arrays: dict, path: str) -> None:
    """Draw coordinates (jam instants marked), inputs and the model's diagnostics
    (PlantModel.diagnostics: the first, then the others) to ``path``."""
    if "points" in arrays:   # a chain on the ground (plant.flex_chain.offline): its own plot
        from hilrig.analysis.contact_plot import plot_contact_run
        plot_contact_run(arrays, path)
        return
    meta = json.loads(str(arrays["meta"]))
    t = arrays["t"]
    model = _model_of(meta)
    names = model.diagnostic_names() if model is not None else ()
    fig, axes = plt.subplots(4, 1, figsize=(9, 12), sharex=True)
    _coordinates(axes[0], t, arrays["q"], model)
    axes[0].set_title(_title(meta))
    _mark_jams(axes, arrays.get("jam_events", np.zeros((0, 3))))
    _inputs(axes[1], t, arrays["u"], meta)
    for ax, group in zip(axes[2:], (names[:1], names[1:])):
        _diagnostics(ax, t, arrays, group)
    axes[3].set_xlabel("t [s]")
    _save(fig, path)


def plot_log(arrays: dict, events: list, path: str) -> None:
    """Draw a real-time run: coordinates, commands, compute time per tick over t, and
    the lateness histogram (log count); jams shaded, every other event a vertical line.

    ``arrays`` as telemetry.logfile.run_arrays returns them (LOG_GROUPS, meta, jam_events);
    lateness and compute times in s, drawn in us.
    """
    meta = json.loads(str(arrays["meta"]))
    t = arrays["t"]
    fig = plt.figure(figsize=(9, 12))
    axes = fig.subplots(4, 1)
    for ax in axes[1:3]:
        ax.sharex(axes[0])
    _coordinates(axes[0], t, arrays["q"], _model_of(meta))
    axes[0].set_title(_title(meta))
    _inputs(axes[1], t, arrays["u"], meta)
    ax = axes[2]
    ax.plot(t, arrays["compute_tick"] * 1e6, lw=0.6, label="compute per tick")
    ax.plot(t, arrays["lateness"] * 1e6, lw=0.6, label="lateness")
    ax.set_ylabel("µs")
    ax.set_xlabel("t [s]")
    ax.legend(fontsize=8)
    _mark_jams(axes[:3], arrays["jam_events"])
    _mark_events(axes[:3], [e for e in events if e["kind"] != "jam"])
    ax = axes[3]
    lateness = arrays["lateness"][np.isfinite(arrays["lateness"])] * 1e6
    ax.hist(lateness, bins=100, log=True)
    ax.set_xlabel("lateness [µs]")
    ax.set_ylabel("ticks")
    if len(lateness):
        ax.set_title(f"{len(lateness)} ticks: median {np.median(lateness):.1f} µs, "
                     f"p99 {np.percentile(lateness, 99):.1f} µs, max {lateness.max():.1f} µs",
                     fontsize=9)
    _save(fig, path)


def _model_of(meta: dict):
    """The PlantModel a run's resolved config names, or None where it cannot be loaded
    here (a user's model not on this machine's path): the plots then use plain labels."""
    try:
        return plant_model(meta["plant"]["model"])
    except ConfigError:
        return None


def _coordinates(ax, t, q, model) -> None:
    nq = q.shape[1]
    labels = model.coordinate_labels(nq) if model is not None else \
        tuple((f"q{i + 1}", "rad") for i in range(nq))
    for i, (name, unit) in enumerate(labels):
        ax.plot(t, q[:, i], label=f"{name} [{unit}]")
    ax.set_ylabel("coordinates")
    ax.legend(ncol=3, fontsize=8)


def _diagnostics(ax, t, arrays: dict, names) -> None:
    """The diagnostics ``names`` of a run (a group of width n: n lines), all-NaN ones left out."""
    drawn = False
    for name in names:
        values = np.asarray(arrays.get(name, np.zeros(0)))
        columns = values.reshape(len(t), -1) if values.size else values.reshape(0, 0)
        for k in range(columns.shape[1]):
            if np.isfinite(columns[:, k]).any():
                label = name if columns.shape[1] == 1 else f"{name}[{k}]"
                ax.plot(t, columns[:, k], label=label)
                drawn = True
    if drawn:
        ax.set_ylabel("diagnostics")
        ax.legend(fontsize=8)


def _inputs(ax, t, u, meta: dict) -> None:
    unit = command_unit(meta.get("link", {}).get("type", "inprocess"), meta["plant"]["drive"])
    for j in range(u.shape[1]):
        ax.plot(t, u[:, j], label=f"u{j + 1} [{unit}]")
    ax.set_ylabel("inputs")
    ax.legend(fontsize=8)


def _mark_jams(axes, jam_events) -> None:
    for joint, t1, t2 in jam_events:
        for a in axes:
            a.axvspan(t1, t2, color="tab:red", alpha=0.25)
            a.axvline(t1, color="tab:red", lw=0.8)
        axes[0].annotate(f"joint {int(joint)} jams", (t1, axes[0].get_ylim()[1]),
                         color="tab:red", fontsize=8, va="top")


def _mark_events(axes, events: list) -> None:
    """One vertical line per event, one colour (and one legend entry) per kind."""
    kinds = sorted({e["kind"] for e in events})
    colours = plt.get_cmap("tab10")
    for n, kind in enumerate(kinds):
        times = [e["t"] for e in events if e["kind"] == kind]
        for a in axes:
            for t in times:
                a.axvline(t, color=colours(n % 10), lw=0.7, ls="--")
        axes[0].plot([], [], color=colours(n % 10), ls="--", label=f"{kind} ({len(times)})")
    if kinds:
        axes[0].legend(ncol=3, fontsize=8)


def _save(fig, path) -> None:
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _title(meta: dict) -> str:
    plant, ctrl = meta["plant"], meta["controller"]
    law = "open loop" if ctrl["type"] == "open_loop" else \
        f"PD (kp={ctrl['kp'][0]:g}, kd={ctrl['kd'][0]:g}, output={ctrl['output']})"
    extra = f", {plant['correction']}" if "correction" in plant else ""
    return f"{plant['model']} ({plant['drive']}-driven), {law}, {meta['sim']['integrator']}" \
           f" dt={meta['sim']['dt']:g}s{extra}"
