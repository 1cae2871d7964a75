"""A campaign's summary: printed (counts, criteria, metrics, worst cases, the ``hil sim``
line of every failing scenario) and drawn (pass/fail over two axes, metric histograms,
the worst cases)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from hilrig.drivers.registry import command_unit
from hilrig.campaign.metrics import METRICS
from hilrig.campaign.spec import CampaignSpec, Scenario
from hilrig.settings.config import resolve

WORST = 5                  # worst cases listed per criterion
PRINTED_LINES = 20         # failing scenarios' hil sim lines printed (all go to the file)


def sim_line(spec: CampaignSpec, row: dict, out: Path) -> str:
    """The ``hil sim`` line that reruns the scenario of a table row alone (its npz beside
    the campaign's results)."""
    scenario = Scenario(row["id"], {}, tuple(row["overrides"]))
    return spec.sim_line(scenario, str(out / "scenarios" / f"scenario-{row['id']}.npz"))


def worst_cases(table, spec: CampaignSpec) -> list[tuple[str, dict, float]]:
    """Per criterion, the rows that exceed its bound most (metric / bound, largest first):
    (criterion, row, ratio)."""
    rows = table.to_pylist()
    worst = []
    for name, bound in spec.criteria.items():
        ranked = sorted(((row, _ratio(row[name], bound)) for row in rows
                         if name in row["failed"].split(",")),
                        key=lambda item: item[1], reverse=True)
        worst += [(name, row, ratio) for row, ratio in ranked[:WORST]]
    return worst


def _ratio(value: float, bound: float) -> float:
    """How far a metric is past its bound (NaN: infinitely)."""
    if value is None or math.isnan(value):
        return math.inf
    if bound == 0.0:
        return math.inf if value > 0.0 else 0.0
    return value / bound


def summary(table, spec: CampaignSpec, out: Path) -> tuple[str, list[str]]:
    """The summary text (to print) and every failing scenario's ``hil sim`` line."""
    n = len(table)
    passed = int(np.count_nonzero(table["passed"].to_numpy(zero_copy_only=False)))
    lines = [f"{spec.name}: {n} scenarios, {passed} passed, {n - passed} failed "
             f"({100.0 * passed / max(n, 1):.1f} % pass)"]
    statuses = table["status"].to_pylist()
    for status in sorted(set(statuses) - {"ok"}):
        lines.append(f"  {statuses.count(status)} {status}: "
                     f"{table['error'][statuses.index(status)].as_py()}")
    failed = [item for text in table["failed"].to_pylist() for item in text.split(",") if item]
    for name, bound in spec.criteria.items():
        lines.append(f"  {name} <= {bound:g} {_unit(name, spec)}: failed by {failed.count(name)}")
    lines.append("metric                          min        median     max")
    for name in METRICS:
        values = table[name].to_numpy(zero_copy_only=False)
        finite = values[np.isfinite(values)]
        if len(finite):
            lines.append(f"  {name:<28}{finite.min():<11.4g}{np.median(finite):<11.4g}"
                         f"{finite.max():<11.4g}" + ("" if len(finite) == n else
                                                      f" ({n - len(finite)} not finite)"))
    lines += _pass_map(table, spec)
    worst = worst_cases(table, spec)
    if worst:
        lines.append("worst cases (metric / bound):")
        for name, row, ratio in worst:
            values = ", ".join(f"{axis.key}={_short(row[axis.key])}" for axis in spec.axes)
            lines.append(f"  {name} {_times(ratio)}: scenario {row['id']} ({values})")
    failing = [sim_line(spec, row, out) for row in table.to_pylist() if not row["passed"]]
    if failing:
        lines.append("failing scenarios, each alone (its row equals this run bit for bit):")
        lines += [f"  {line}" for line in failing[:PRINTED_LINES]]
        if len(failing) > PRINTED_LINES:
            lines.append(f"  ... and {len(failing) - PRINTED_LINES} more in "
                         f"{out / 'failing.txt'}")
    return "\n".join(lines), failing


def _times(ratio: float) -> str:
    return f"{ratio:.3f}x" if math.isfinite(ratio) else "not reached or NaN"


def _unit(name: str, spec: CampaignSpec) -> str:
    """A metric's unit; a command's is the base config's link's (V or N m)."""
    if name == "peak_command":
        base = resolve(spec.base_raw)
        return command_unit(base.link.type, base.plant.drive)
    return METRICS[name].unit


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)


def _pass_map(table, spec: CampaignSpec) -> list[str]:
    """Pass rate per value pair of the two plot axes, when both take few values."""
    if len(spec.plot) != 2:
        return []
    x, y = (table[key].to_pylist() for key in spec.plot)
    xs, ys = _levels(x), _levels(y)
    if len(xs) > 12 or len(ys) > 12:
        return []
    passed = table["passed"].to_pylist()
    width = max(map(len, ys))
    lines = [f"pass rate, {spec.plot[1]} (rows) x {spec.plot[0]} (columns):",
             " " * (width + 2) + "".join(f"{v:>10}" for v in xs)]
    for yv in ys:
        cells = []
        for xv in xs:
            hits = [p for p, a, b in zip(passed, x, y) if _short(a) == xv and _short(b) == yv]
            cells.append(f"{100.0 * sum(hits) / len(hits):9.0f}%" if hits else " " * 10)
        lines.append(f"  {yv:>{width}}" + "".join(cells))
    return lines


def _levels(values: list) -> list[str]:
    """The distinct values, shortened, in order (numbers by size, others as they come)."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        values = sorted(values)
    return list(dict.fromkeys(map(_short, values)))


def draw(table, spec: CampaignSpec, png: Path) -> None:
    """Pass/fail over the two plot axes, a histogram per criterion's metric (with its
    bound), and the worst cases, in one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(spec.criteria) or ["peak_command", "peak_joint_rate"]
    fig, axes = plt.subplots(1, 2 + len(names), figsize=(5 * (2 + len(names)), 4.5))
    passed = np.array(table["passed"].to_pylist(), dtype=bool)
    _scatter(axes[0], table, spec, passed)
    for ax, name in zip(axes[1:], names):
        values = table[name].to_numpy(zero_copy_only=False)
        finite = values[np.isfinite(values)]
        ax.hist(finite, bins=min(50, max(5, int(math.sqrt(len(finite))))), color="0.5")
        if name in spec.criteria:
            ax.axvline(spec.criteria[name], color="tab:red", label="bound")
            ax.legend()
        ax.set_xlabel(f"{name} ({_unit(name, spec)})" if _unit(name, spec) else name)
        ax.set_ylabel("scenarios")
    text = ["worst cases (metric / bound)"] + [
        f"{name} {_times(ratio)}: #{row['id']}" for name, row, ratio in worst_cases(table, spec)]
    axes[-1].axis("off")
    axes[-1].text(0.0, 1.0, "\n".join(text[:25]), va="top", family="monospace", fontsize=8)
    fig.suptitle(f"{spec.name}: {int(passed.sum())} of {len(passed)} passed")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def _scatter(ax, table, spec: CampaignSpec, passed: np.ndarray) -> None:
    coords = []
    random = {axis.key for axis in spec.axes if axis.kind in ("uniform", "relative")}
    for key in spec.plot:
        values = table[key].to_pylist()
        if key in random and all(isinstance(v, float) for v in values):
            coords.append((np.array(values, dtype=float), None))
        else:           # a grid's or choice's values, lists: one column each
            labels = _levels(values)
            coords.append((np.array([labels.index(_short(v)) for v in values], dtype=float),
                           labels))
    if len(coords) == 1:
        coords.append((np.zeros(len(passed)), None))
    rng = np.random.default_rng(0)
    for (values, labels), setter in zip(coords, (ax.set_xticks, ax.set_yticks)):
        if labels is not None:
            values += rng.uniform(-0.2, 0.2, len(values))    # jitter within a category
            setter(range(len(labels)), labels)
    (x, _), (y, _) = coords
    ax.scatter(x[passed], y[passed], s=12, color="tab:green", label="pass")
    ax.scatter(x[~passed], y[~passed], s=12, color="tab:red", marker="x", label="fail")
    ax.set_xlabel(spec.plot[0])
    ax.set_ylabel(spec.plot[1] if len(spec.plot) > 1 else "")
    ax.legend()
