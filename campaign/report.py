"""A campaign's summary: printed (counts, criteria, metrics, worst cases, how to rerun a
failing scenario alone) and drawn (pass/fail over two axes, metric histograms, the worst
cases). The printed lines fit a terminal of WIDTH columns, but for the one ``hil sim``
line of the worst failing scenario; every failing scenario's line is in failing.txt."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
from hilrig.drivers.registry import command_unit
from hilrig.campaign.metrics import METRICS
from hilrig.campaign.spec import CampaignSpec, Scenario
from hilrig.settings.config import resolve

WORST = 5                  # worst cases listed per criterion
WIDTH = 100                # columns of the printed summary


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
    """The summary text (to print) and every failing scenario's ``hil sim`` line (for
    failing.txt), by id."""
    n = len(table)
    passed = int(np.count_nonzero(table["passed"].to_numpy(zero_copy_only=False)))
    lines = [f"{spec.name}: {n} scenarios, {passed} passed, {n - passed} failed "
             f"({100.0 * passed / max(n, 1):.1f} % pass)"]
    statuses = table["status"].to_pylist()
    for status in sorted(set(statuses) - {"ok"}):
        lines += _wrapped(f"  {statuses.count(status)} {status}, e.g.: "
                          f"{table['error'][statuses.index(status)].as_py()}")
    failed = [item for text in table["failed"].to_pylist() for item in text.split(",") if item]
    for name, bound in spec.criteria.items():
        lines.append(f"  {name} <= {bound:g} {_unit(name, spec)}: failed by {failed.count(name)}")
    lines.append("metric                          min        median     max")
    for name in METRICS:
        values = table[name].to_numpy(zero_copy_only=False)
        finite = values[np.isfinite(values)]
        if len(finite):
            lines.append((f"  {name:<28}{finite.min():<11.4g}{np.median(finite):<11.4g}"
                          f"{finite.max():<11.4g}" + ("" if len(finite) == n else
                                                       f" ({n - len(finite)} not finite)"))
                         .rstrip())
    lines += _detection(table)
    lines += _pass_map(table, spec)
    worst = worst_cases(table, spec)
    if worst:
        lines.append("worst cases (metric / bound):")
        for name, row, ratio in worst:
            values = ", ".join(f"{axis.key}={_short(row[axis.key])}" for axis in spec.axes)
            lines += _wrapped(f"  {name} {_times(ratio)}: scenario {row['id']} ({values})")
    failing = [row for row in table.to_pylist() if not row["passed"]]
    if failing:
        example = worst[0][1] if worst else failing[0]
        lines += _wrapped(f"the {len(failing)} failing scenarios, each alone by its `hil sim` "
                          f"line (its row equals that run bit for bit): {out / 'failing.txt'};"
                          f" {'the worst' if worst else 'the first'}, scenario {example['id']}:")
        lines.append(f"  {sim_line(spec, example, out)}")
    return "\n".join(lines), [sim_line(spec, row, out) for row in failing]


def _detection(table) -> list[str]:
    """The detection rates of a campaign whose law reports faults (controller.
    detection_slot: its detection metrics are finite), as one line; none otherwise."""
    missed = table["missed_detection"].to_numpy(zero_copy_only=False)
    alarms = table["false_alarm"].to_numpy(zero_copy_only=False)
    delays = table["detection_delay"].to_numpy(zero_copy_only=False)
    watched = np.isfinite(alarms)
    if not watched.any():
        return []
    delays = delays[np.isfinite(delays)]
    faulty = int(np.count_nonzero(missed == 1.0)) + len(delays)
    n = int(np.count_nonzero(watched))
    line = (f"detection: {len(delays)} of {faulty} faulty scenarios detected "
            f"({100.0 * (faulty - len(delays)) / max(faulty, 1):.1f} % missed), "
            f"{int(np.count_nonzero(alarms == 1.0))} false alarms in {n} scenarios "
            f"({100.0 * np.count_nonzero(alarms == 1.0) / n:.1f} %)")
    if len(delays):
        line += f", delay median {np.median(delays):.4g} s, max {delays.max():.4g} s"
    return _wrapped(line)


def _wrapped(text: str) -> list[str]:
    """``text`` in lines of at most WIDTH columns, the later ones indented further."""
    return textwrap.wrap(text, WIDTH, subsequent_indent="      ", break_long_words=False,
                         break_on_hyphens=False)


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
    """Pass rate (%) per value pair of the two plot axes, when it fits in WIDTH columns
    (the axis of more values across, or else down)."""
    if len(spec.plot) != 2:
        return []
    values = {key: table[key].to_pylist() for key in spec.plot}
    passed = table["passed"].to_pylist()
    for across, down in (spec.plot, spec.plot[::-1]):
        xs, ys = _levels(values[across]), _levels(values[down])
        label = max(map(len, ys))
        column = max(5, *(len(x) + 1 for x in xs))
        if len(ys) <= 40 and 2 + label + column * len(xs) <= WIDTH:
            break
    else:
        return [f"pass rate over {spec.plot[0]} and {spec.plot[1]}: too many values to print "
                "(summary.png draws them)"]
    cells = {}
    for p, a, b in zip(passed, values[across], values[down]):
        cells.setdefault((_short(a), _short(b)), []).append(p)
    lines = [f"pass rate (%), {down} (rows) x {across} (columns):",
             " " * (label + 2) + "".join(f"{x:>{column}}" for x in xs)]
    for y in ys:
        row = [cells.get((x, y)) for x in xs]
        lines.append(f"  {y:>{label}}" + "".join(
            f"{100.0 * sum(hits) / len(hits):>{column}.0f}" if hits else " " * column
            for hits in row))
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
