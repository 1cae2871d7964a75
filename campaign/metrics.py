"""What a campaign measures of one run, and its pass/fail criteria.

``measure(arrays, cfg, settings)`` turns the arrays of an offline run (rt.sim.simulate,
or the .npz that ``hil sim`` writes) into the metrics of one campaign row; a campaign
and a single ``hil sim`` of the same scenario give the same arrays, hence the same
metrics, bit for bit. ``judge`` applies the criteria: each is an upper bound on one
metric, and a scenario passes when its run completed and every bound holds.

Joints are the actuated ones (the first nact coordinates: a serial arm's joints, the
3RRR's motor angles); the target is the config's ``controller.target`` (the final
target: for a moving reference, not the reference itself).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hilrig.errors import ConfigError
from hilrig.jit.kernel import kernel
from hilrig.plant.factory import GROUP as PLANT_MODELS
from hilrig.plant.factory import plant_model
from hilrig.plant.faults import K_CLEAR
from hilrig.plant.interface import PlantModel
from hilrig.plant.linalg import nan_max
from hilrig.plant.stepping import ROW_METRICS, ROW_SCRATCH, row_metrics
from hilrig.plugins import registered
from hilrig.schema import Config


@dataclass(frozen=True)
class Metric:
    """One metric: its unit, what it is, and what a run needs for it."""

    unit: str
    doc: str
    needs_target: bool = False      # controller.target
    diagnostic: str | None = None   # a model's row metric (PlantModel.metrics) of this column
    reduce: str | None = None       # and its reduction ("peak", "sign_changes")


JOINT_METRICS = {
    "tracking_error": Metric(
        "rad", "max over t >= settle_time and the joints of |target - q|", needs_target=True),
    "healthy_tracking_error": Metric(
        "rad", "tracking_error over the joints that no jam hit (0 if every joint jammed)",
        needs_target=True),
    "final_error": Metric("rad", "max over the joints of |target - q| at the end",
                          needs_target=True),
    "reach_time": Metric(
        "s", "first time from which every joint stays within reach_tolerance of its target "
             "to the end (inf: not reached by the end); the criterion is 'reached by T'",
        needs_target=True),
    "peak_command": Metric("V or N m", "max over the run and the joints of |u|"),
    "peak_joint_rate": Metric("rad/s", "max over the run and the joints of |qd|"),
}


def _row_metrics() -> dict:
    """The row metrics the registered plant models declare (PlantModel.metrics), so that a
    campaign's table has the same columns whatever its model (NaN where one does not
    apply); a model that cannot be loaded declares none here."""
    found = {}
    for name in registered(PLANT_MODELS):
        try:
            model = plant_model(name)
        except ConfigError:
            continue
        for m in model.metrics:
            found.setdefault(m.name, Metric(m.unit, m.doc, diagnostic=m.diagnostic,
                                            reduce=m.reduce))
    return found


DETECTION_METRICS = {
    "detection_delay": Metric(
        "s", "from the first fault's start to the law's first detected fault "
             "(controller.detection_slot); NaN: no fault, or none detected at or after it "
             "(the three: NaN for a law that reports none)"),
    "missed_detection": Metric(
        "0/1", "1: a fault started and the law detected none at or after its start"),
    "false_alarm": Metric(
        "0/1", "1: the law detected a fault before any fault started, or in a run without "
               "one"),
}

METRICS = {**JOINT_METRICS, **DETECTION_METRICS, **_row_metrics()}


@dataclass(frozen=True)
class MetricSettings:
    """The spec's [metrics] table: settle_time (s) from which tracking_error counts,
    reach_tolerance (rad) of reach_time."""

    settle_time: float = 0.0
    reach_tolerance: float = 0.01


def unavailable(name: str, cfg: Config) -> str | None:
    """Why metric ``name`` cannot be measured on runs of ``cfg`` (None: it can)."""
    metric = METRICS[name]
    if metric.needs_target and target_of(cfg) is None:
        return "needs controller.target (a pd or feedforward controller)"
    if name in DETECTION_METRICS and cfg.controller.detection_slot is None:
        return "needs controller.detection_slot (a law that reports the faults it detects)"
    if metric.diagnostic is not None and \
            name not in [m.name for m in plant_model(cfg.plant.model).metrics]:
        return f"is not a row metric of plant.model = {cfg.plant.model!r}"
    return None


def target_of(cfg: Config) -> np.ndarray | None:
    """The config's joint targets (controller.target), or None if its controller has none."""
    target = getattr(cfg.controller, "target", None)
    return None if target is None else np.asarray(target, dtype=float)


# what measure_rows finds in a run's rows: entries of its output
F_TRACKING = 0         # max |target - q| over rows from the settle row, rad
F_HEALTHY = 1          # the same over the joints no jam hit, rad
F_FINAL = 2            # max |target - q| in the last row, rad
F_LAST_OUTSIDE = 3     # the last row where some |target - q| > tolerance (-1: none)
F_PEAK_COMMAND = 4     # max |u|
F_PEAK_RATE = 5        # max |qd| of the joints
F_ROW = 6              # the model's row metrics (plant.stepping.row_metrics), ROW_METRICS
F_SETTLE = F_ROW + ROW_METRICS    # the settle row: the first with t >= settle_time (rows: none)
F_REACH_TIME = F_SETTLE + 1       # t of the row after F_LAST_OUTSIDE (inf: none), s
FOUND = F_REACH_TIME + 1


def measure(arrays: dict, cfg: Config, settings: MetricSettings, plant=None) -> dict:
    """The metrics (METRICS; NaN where a metric does not apply) and ``q_end`` (the last
    row's coordinates) of one run's arrays. A run cut short by an invalid state is
    measured on the rows it has. The model's row metrics (PlantModel.metrics) come from
    the arrays' diagnostics (a full run, or its .npz) or, for a minimal run
    (rt.sim.simulate(minimal=True)), from its rows and the ``plant`` that ran
    (plant.stepping.row_metrics): the same values, bit for bit."""
    t, q, qd, u = arrays["t"], arrays["q"], arrays["qd"], arrays["u"]
    nact = u.shape[1]
    target = target_of(cfg)
    healthy = np.ones(nact)
    healthy[arrays["jam_events"][:, 0].astype(int) - 1] = 0.0
    model = plant_model(cfg.plant.model)
    from_rows = plant is not None and any(m.diagnostic not in arrays for m in model.metrics)
    found = np.zeros(FOUND)
    measure_rows(t, q, qd, u, np.zeros(nact) if target is None else target, healthy,
                 settings.settle_time - 1e-9 * cfg.sim.dt, settings.reach_tolerance,
                 plant.params if from_rows else t, np.zeros(ROW_SCRATCH), from_rows, found)
    out = metrics_of(found, len(t), target is not None, model if from_rows else None)
    out.update(arrays_detection(arrays, cfg))
    if not from_rows:
        for m in model.metrics:
            if m.diagnostic in arrays:
                out[m.name] = float(REDUCTIONS[m.reduce](arrays[m.diagnostic]))
    out["q_end"] = [float(v) for v in q[-1]]
    return out


def detection_metrics(detected: float, onset: float, watched: bool = True) -> dict:
    """DETECTION_METRICS of a run whose law first reported a fault at plant time
    ``detected`` (s; NaN: never) and whose first fault started at ``onset`` (s; NaN: none
    started). A detection before the onset is a false alarm, and the fault after it then
    counts as missed (only the first detection is kept). ``watched`` False (the law
    reports none: no controller.detection_slot): all NaN."""
    if not watched:
        return dict.fromkeys(DETECTION_METRICS, np.nan)
    detected, onset = float(detected), float(onset)
    faulty, found = not np.isnan(onset), not np.isnan(detected)
    in_time = faulty and found and detected >= onset - 1e-12
    return {"detection_delay": detected - onset if in_time else np.nan,
            "missed_detection": float(faulty and not in_time),
            "false_alarm": float(found and not in_time)}


def arrays_detection(arrays: dict, cfg: Config) -> dict:
    """detection_metrics of an offline run's arrays (rt.sim.simulate: ``fault_events``,
    ``fault_detected``) under ``cfg``'s law (a model's own offline run, plant.offline, has
    no fault table: no fault started)."""
    if cfg.controller.detection_slot is None:
        return dict.fromkeys(DETECTION_METRICS, np.nan)
    events = arrays.get("fault_events")
    starts = np.zeros(0) if events is None else \
        events[events[:, 0] != K_CLEAR, 3]               # a live clear starts no fault
    detected = arrays.get("fault_detected", np.zeros((0, 3)))
    return detection_metrics(detected[0, 1] if len(detected) else np.nan,
                             starts.min() if len(starts) else np.nan,
                             cfg.controller.detection_slot is not None)


def metrics_of(found: np.ndarray, rows: int, has_target: bool,
               row_model: PlantModel | None) -> dict:
    """The METRICS of what measure_rows found in ``rows`` rows (NaN where a metric does not
    apply: no controller.target, no row from the settle time on; ``row_model``: the model
    whose row metrics measure_rows took, None if it took none)."""
    out = dict.fromkeys(METRICS, np.nan)
    out["peak_command"], out["peak_joint_rate"] = found[F_PEAK_COMMAND], found[F_PEAK_RATE]
    if has_target:
        if found[F_SETTLE] < rows:      # else the run ended before settle_time: NaN
            out["tracking_error"], out["healthy_tracking_error"] = \
                found[F_TRACKING], found[F_HEALTHY]
        out["final_error"] = found[F_FINAL]
        out["reach_time"] = found[F_REACH_TIME]
    if row_model is not None:
        for k, m in enumerate(row_model.metrics):
            out[m.name] = found[F_ROW + k]
    return {name: float(value) for name, value in out.items()}


@kernel
def measure_rows(t, q, qd, u, target, healthy, settle_time, tolerance, p, scratch, with_rows,
                 found):
    """What the metrics need of a run's rows (t, and q, qd, u per row), into ``found``
    (F_* entries): joint_metrics from the first row at or after ``settle_time`` (s), and
    with ``with_rows`` the row metrics of the plant of params ``p``
    (plant.stepping.row_metrics; ``scratch`` of plant.stepping.ROW_SCRATCH)."""
    rows = t.shape[0]
    settle = 0
    while settle < rows and t[settle] < settle_time:   # np.searchsorted(t, settle_time)
        settle += 1
    joint_metrics(q, qd, u, target, healthy, settle, tolerance, found)
    found[F_SETTLE] = settle
    after = int(found[F_LAST_OUTSIDE]) + 1
    found[F_REACH_TIME] = t[after] if after < rows else np.inf
    if with_rows:
        row_metrics(p, q, scratch, found[F_ROW:F_ROW + ROW_METRICS])


@kernel
def joint_metrics(q, qd, u, target, healthy, settle, tolerance, out):
    """One pass over the rows of a run (its first u.shape[1] coordinates are the joints):
    out[0] max |target - q| over rows >= settle, out[1] the same over the joints where
    ``healthy`` is nonzero (0 if none), out[2] max |target - q| in the last row, out[3]
    the last row where some |target - q| > tolerance (-1: none), out[4] max |u|,
    out[5] max |qd| of the joints. A NaN in a maximum makes it NaN."""
    rows, nact = u.shape[0], u.shape[1]
    tracking, healthy_error, last_outside, peak_u, peak_rate = 0.0, 0.0, -1.0, 0.0, 0.0
    worst = 0.0
    for k in range(rows):
        worst = 0.0
        settled = k >= settle
        for j in range(nact):
            error = abs(target[j] - q[k, j])
            worst = nan_max(worst, error)
            if settled and healthy[j] != 0.0:
                healthy_error = nan_max(healthy_error, error)
            peak_rate = nan_max(peak_rate, abs(qd[k, j]))
            peak_u = nan_max(peak_u, abs(u[k, j]))
        if not worst <= tolerance:
            last_outside = k
        if settled:
            tracking = nan_max(tracking, worst)
    out[0], out[1], out[2], out[3], out[4], out[5] = \
        tracking, healthy_error, worst, last_outside, peak_u, peak_rate


def _sign_changes(values: np.ndarray) -> int:
    """Changes of sign along ``values`` (zeros skipped; a NaN counts as a change)."""
    signs = np.sign(values)
    signs = signs[signs != 0.0]
    return int(np.count_nonzero(signs[1:] != signs[:-1]))


# a RowMetric's reduction of its diagnostic over the rows (as plant.stepping.row_metrics)
REDUCTIONS = {"peak": np.max, "sign_changes": _sign_changes}


def judge(metrics: dict, criteria: dict, completed: bool) -> tuple[bool, list[str]]:
    """Whether a run passes its criteria (metric name -> upper bound), and the names of
    those it fails (a NaN metric fails; a run that did not complete fails as 'completed')."""
    failed = [] if completed else ["completed"]
    failed += [name for name, bound in criteria.items() if not metrics[name] <= bound]
    return not failed, failed
