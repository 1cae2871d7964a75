"""``hil analyze``: natural frequencies, mode shapes and stiffness of a config's plant.

    hil analyze modes CONFIG [--set key=value ...] [--json]
    hil analyze stiffness CONFIG [--set ...] [--json] [--map] [--out maps.png]

**modes** of a chain (plant.flex_rp.robot, a serial arm, a user's chain) linearise it at the
configured coordinates q0 at rest (qd = 0): M(q0) and K = -dG/dq (G = drive force - bias,
central differences), then K v = w^2 M v, twice:

- *as mounted*: every coordinate free (the joints torque-controlled with zero torque; a
  flexible link then has its rigid-body modes at 0 and its elastic ones on top);
- *clamped*: the nact actuated coordinates held (a stiff position loop): what is left is
  the structure, for the flexible link the cantilever with its payload.

Shapes are the eigenvectors scaled so that their largest component is +1.

**modes** and **stiffness** of the 3RRR (plant.stiffness, paper 001's method): each
actuator an angular spring of analyze.actuator_stiffness (N m/rad) about q0's angles, the
platform under analyze.wrench (F_x, F_y in N, M_z in N m) in static equilibrium; the
Cartesian stiffness K_x with the loaded-mode term, the compliance, the task-space mass
M_x (rotor inertias included when motor-driven), natural frequencies and mode directions.
``--map`` adds the workspace maps over an analyze.grid x analyze.grid grid of platform
positions at q0's orientation and elbow branches (unloaded): the lowest natural frequency
and the translational stiffness (smallest eigenvalue of K_x's x, y block), drawn to a PNG.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hilrig.errors import ConfigError
from hilrig.plant.factory import plant_from_config, plant_model
from hilrig.plant.rosenbrock import generalised_force
from hilrig.schema import Config
from scipy.linalg import eigh


def linearised(plant, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """M(q) and K = -dG/dq at q, qd = 0, zero input (a chain or a serial arm)."""
    nq, nact = plant.nq, plant.nact
    x = np.zeros(2 * nq)
    x[:nq] = q
    u = np.zeros(nact)
    g_plus, g_minus = np.zeros(nq), np.zeros(nq)
    work = plant.work.copy()
    generalised_force(plant.params, plant.jams, x, u, work, g_plus, plant.mechanism)
    mass = work[:nq, :nq].copy()
    k = np.zeros((nq, nq))
    for j in range(nq):
        step = 1e-6 * max(1.0, abs(q[j]))
        x[j] = q[j] + step
        generalised_force(plant.params, plant.jams, x, u, work, g_plus, plant.mechanism)
        x[j] = q[j] - step
        generalised_force(plant.params, plant.jams, x, u, work, g_minus, plant.mechanism)
        x[j] = q[j]
        k[:, j] = -(g_plus - g_minus) / (2.0 * step)
    return mass, k


def _modes(mass: np.ndarray, k: np.ndarray) -> dict:
    """w^2 M v = K v (K symmetrised): omega (rad/s; negative w^2, an unstable equilibrium,
    reported as -sqrt|w^2|), Hz, and the shapes (columns, largest component +1)."""
    w2, vec = eigh(0.5 * (k + k.T), 0.5 * (mass + mass.T))
    scale = 1e-9 * max(1.0, np.max(np.abs(w2)))
    w2 = np.where(np.abs(w2) < scale, 0.0, w2)
    omega = np.sign(w2) * np.sqrt(np.abs(w2))
    big = np.argmax(np.abs(vec), axis=0)
    vec = vec / vec[big, np.arange(vec.shape[1])]
    return {"omega": omega.tolist(), "hz": (omega / (2 * np.pi)).tolist(),
            "shapes": vec.T.tolist()}


def chain_modes(cfg: Config) -> dict:
    """The 'as mounted' and 'clamped' modes of a chain at q0 (module docstring)."""
    plant = plant_from_config(cfg)
    q = plant.q.copy()
    mass, k = linearised(plant, q)
    nact = plant.nact
    out = {"model": cfg.plant.model, "q": q.tolist(), "mounted": _modes(mass, k)}
    if plant.nq > nact:
        out["clamped"] = _modes(mass[nact:, nact:], k[nact:, nact:])
    return out


def modes(cfg: Config) -> dict:
    """``hil analyze modes``: the model's own stiffness analysis where it has one
    (PlantModel.analyses["stiffness"]), else a chain's mounted and clamped modes."""
    own = plant_model(cfg.plant.model).analyses.get("stiffness")
    return own(cfg) if own is not None else chain_modes(cfg)


def draw_map(result: dict, out: Path, title: str) -> None:
    """The two maps side by side (lowest natural frequency in Hz, stiffness in N/m, log)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), constrained_layout=True)
    panels = [(result["omega"] / (2 * np.pi), "lowest natural frequency, Hz", None),
              (result["stiffness"], "translational stiffness (min eigenvalue), N/m", LogNorm())]
    for ax, (data, label, norm) in zip(axes, panels):
        image = ax.pcolormesh(result["x"], result["y"], np.ma.masked_invalid(data),
                              shading="auto", norm=norm)
        fig.colorbar(image, ax=ax, label=label)
        base = np.vstack([result["base"], result["base"][:1]])
        ax.plot(base[:, 0], base[:, 1], "k-", lw=0.8)
        ax.plot(*result["pose"], "r+", ms=10, label="q0")
        ax.set_aspect("equal")
        ax.set_xlabel("x_C, m")
        ax.set_ylabel("y_C, m")
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"{title}: phi = {result['phi']:.3f} rad, elbows "
                 f"{result['elbows'].astype(int).tolist()}, unreachable or singular blank")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def format_modes(result: dict) -> str:
    """The text report of ``modes`` (JSON with --json)."""
    lines = [f"{result['model']} at q = {np.round(result['q'], 6).tolist()}"]
    if "stiffness" in result:     # a model's own stiffness analysis
        lines.append(f"wrench {result['wrench']} (N, N, N m), actuator stiffness "
                     f"{result['actuator_stiffness']} N m/rad")
        for name, unit in (("stiffness", "K_x (x_C, y_C, phi)"),
                           ("task_mass", "M_x"), ("compliance", "C = K_x^-1")):
            lines.append(f"{unit}:")
            lines += ["  " + "  ".join(f"{v:12.5g}" for v in row) for row in result[name]]
        lines.append("natural frequencies and mode directions (dx_C, dy_C, dphi):")
        for w, hz, d in zip(result["omega"], result["hz"], result["directions"]):
            lines.append(f"  {w:12.5g} rad/s  {hz:10.5g} Hz   {np.round(d, 4).tolist()}")
        return "\n".join(lines)
    for case, what in (("mounted", "as mounted (joints free)"),
                       ("clamped", "clamped (actuated joints held)")):
        if case not in result:
            continue
        lines.append(f"{what}:")
        for w, hz, shape in zip(result[case]["omega"], result[case]["hz"],
                                result[case]["shapes"]):
            lines.append(f"  {w:14.6g} rad/s  {hz:12.6g} Hz   shape "
                         f"{np.round(shape, 4).tolist()}")
    return "\n".join(lines)


def run_modes(cfg: Config, as_json: bool) -> str:
    result = modes(cfg)
    return json.dumps(result) if as_json else format_modes(result)


def run_stiffness(cfg: Config, as_json: bool, draw: bool, out: Path | None,
                  name: str) -> str:
    """``hil analyze stiffness``: the pose's figures, and with ``draw`` the maps."""
    analyses = plant_model(cfg.plant.model).analyses
    if "stiffness" not in analyses:
        raise ConfigError(f"hil analyze stiffness: plant.model = {cfg.plant.model!r} has no "
                          "Cartesian stiffness analysis of its own; use hil analyze modes")
    result = analyses["stiffness"](cfg)
    text = format_modes(result)
    if draw:
        maps = analyses["stiffness_map"](cfg)
        path = Path(out) if out else Path("runs") / f"{name}_stiffness_map.png"
        draw_map(maps, path, name)
        lowest = np.nanmin(maps["omega"]) / (2 * np.pi)
        result["map"] = {"png": str(path), "grid": len(maps["x"]), "seconds": maps["seconds"],
                         "lowest_hz": float(lowest),
                         "reachable": int(np.isfinite(maps["omega"]).sum())}
        text += (f"\nmap {len(maps['x'])}x{len(maps['y'])} in {maps['seconds'] * 1e3:.1f} ms "
                 f"({result['map']['reachable']} reachable points, lowest frequency "
                 f"{lowest:.4g} Hz): wrote {path}")
    return json.dumps(result) if as_json else text
