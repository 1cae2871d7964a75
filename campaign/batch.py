"""One task of a campaign: a batch of scenarios, run in a worker.

Each scenario is the base config with its overrides, resolved from the base's resolved
config (campaign.scenarios: equal to a resolve from scratch, in a tenth of its time). The
batch first builds every scenario's inputs (rt.sim.offline_run: what ``hil sim`` runs),
then runs and measures them all in one compiled call per Group of alike scenarios
(campaign.kernel), so no Python runs between two runs. A scenario that the compiled
call cannot take (the ``accurate`` integrator, a chain on the ground) runs alone through
rt.sim.simulate and is measured by campaign.metrics.measure: the same rows, the same
metrics. What a task returns is plain data (columns of numbers and strings), so it travels
from any Dask worker to the client, which writes it (campaign.runner). Nothing here imports
Dask: a batch also runs in-process.
"""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

import numpy as np
from hilrig.errors import ConfigError
from hilrig.plant.factory import plant_model
from hilrig.plant.family import for_plant
from hilrig.campaign.kernel import R_DETECTED, R_FOUND, R_MEASURING, R_ONSET, R_ROWS, \
    R_STEPPING, Group, group_capacity, group_key
from hilrig.campaign.metrics import FOUND, METRICS, MetricSettings, detection_metrics, judge, \
    measure, metrics_of, target_of
from hilrig.rt.lockstep import law_of
from hilrig.campaign.scenarios import ScenarioConfigs
from hilrig.rt.sim import SimulationError, invalid_state, offline_run, simulate

STATUS_OK = "ok"                        # the run completed
STATUS_INVALID = "invalid_state"        # the plant state became invalid (measured up to it)
STATUS_CONFIG = "config_error"          # the scenario's config was refused (not run)


@dataclass(frozen=True)
class BatchJob:
    """What every task of a campaign shares: the base config's TOML with the fixed
    overrides applied (as JSON), the metric settings and the criteria."""

    base_raw: str
    settings: MetricSettings
    criteria: dict


def run_batch(job: BatchJob, scenarios: list) -> dict:
    """Run ``scenarios`` ((id, values) pairs; values: (dotted key, value) pairs, what the
    scenario's ``--set`` items parse to) and return their rows as columns, in their order:
    id, the METRICS, q_end, passed, failed (the criteria failed, comma-separated), status,
    error, simulated_s (simulated time), stepping_s (wall time of the compiled run), wall_s
    (the scenario's share of the batch: its config and inputs, its run and measurement,
    and an equal part of the rest) and worker (host:pid)."""
    started = time.perf_counter()
    configs = ScenarioConfigs(json.loads(job.base_raw))
    rows, groups = {}, {}
    for sid, values in scenarios:
        rows[sid] = _prepare(job, configs, sid, values, groups)
    for alike in groups.values():
        for group in alike:
            _run_group(job, group, rows)
    ordered = [rows[sid] for sid, _ in scenarios]
    share = (time.perf_counter() - started - sum(r["wall_s"] for r in ordered)) \
        / max(len(ordered), 1)
    for row in ordered:
        row["wall_s"] += share
    columns = {name: [row[name] for row in ordered] for name in COLUMNS}
    columns["worker"] = [f"{socket.gethostname()}:{os.getpid()}"] * len(ordered)
    return columns


COLUMNS = ("id", *METRICS, "q_end", "passed", "failed", "status", "error", "simulated_s",
           "stepping_s", "wall_s")


def _prepare(job: BatchJob, configs: ScenarioConfigs, sid: int, values, groups: dict) -> dict:
    """The scenario's row: final if its config is refused or it runs alone (run_scenario),
    else what _run_group completes it from, its inputs added to the last Group of its
    kind (``groups``: group_key -> the Groups of that key) or to a new one when that is
    full."""
    started = time.perf_counter()
    try:
        cfg = configs.config(values)
        model = plant_model(cfg.plant.model)
        if cfg.sim.integrator == "accurate" or model.offline is not None:
            return run_scenario(job, configs, sid, values)
        run = offline_run(cfg)
    except ConfigError as exc:
        return _refused(sid, exc, started)
    alike = groups.setdefault(group_key(run), [])
    if not alike or len(alike[-1].ids) >= alike[-1].capacity:
        alike.append(Group(law_of(run.controller), for_plant(run.plant, run.method), run.method,
                           run.correction, run.n_steps, capacity=group_capacity(run)))
    target = target_of(cfg)
    alike[-1].add(sid, run, np.zeros(run.plant.nact) if target is None else target,
                  job.settings.settle_time, job.settings.reach_tolerance)
    return {"id": sid, "has_target": target is not None,
            "watched": run.controller.detection.shape[0] > 0,
            "row_model": model if model.metrics else None,
            "h": run.h, "wall_s": time.perf_counter() - started}


def _run_group(job: BatchJob, group: Group, rows: dict) -> None:
    """Run a Group and complete its scenarios' rows (from what _prepare left in them)."""
    results = group.run()
    for sid, result in zip(group.ids, results):
        row = rows[sid]
        count = int(result[R_ROWS])
        completed = count == group.n_steps + 1
        metrics = metrics_of(result[R_FOUND:R_FOUND + FOUND], count, row.pop("has_target"),
                             row.pop("row_model"))
        metrics.update(detection_metrics(result[R_DETECTED], result[R_ONSET],
                                         row.pop("watched")))
        passed, failed = judge(metrics, job.criteria, completed)
        h = row.pop("h")
        row.update(metrics, q_end=[float(v) for v in result[R_FOUND + FOUND:]], passed=passed,
                   failed=",".join(failed), status=STATUS_OK if completed else STATUS_INVALID,
                   error="" if completed else invalid_state((count - 1) * h, count),
                   simulated_s=float((count - 1) * h), stepping_s=float(result[R_STEPPING]))
        row["wall_s"] += float(result[R_STEPPING] + result[R_MEASURING])


def run_scenario(job: BatchJob, configs: ScenarioConfigs, sid: int, values) -> dict:
    """One scenario's row (see run_batch), run alone through rt.sim.simulate: ``configs``
    of the job's base, the scenario's ``values``. A config the scenario's values make
    invalid (refused by the config, or by the controller or plant built from it) is a row
    of status config_error, not a failed task."""
    started = time.perf_counter()
    status, error = STATUS_OK, ""
    try:
        cfg = configs.config(values)
        run = simulate(cfg, minimal=True)
        arrays, stepping, plant = run.arrays, run.stepping_seconds, run.plant
    except ConfigError as exc:
        return _refused(sid, exc, started)
    except SimulationError as exc:
        arrays, stepping, plant = exc.arrays, float("nan"), exc.plant
        status, error = STATUS_INVALID, str(exc)
    metrics = measure(arrays, cfg, job.settings, plant)
    passed, failed = judge(metrics, job.criteria, status == STATUS_OK)
    return dict(id=sid, **metrics, passed=passed, failed=",".join(failed), status=status,
                error=error, simulated_s=float(arrays["t"][-1]), stepping_s=stepping,
                wall_s=time.perf_counter() - started)


def _refused(sid: int, exc: ConfigError, started: float) -> dict:
    """The row of a scenario whose config was refused."""
    return dict(id=sid, **dict.fromkeys(METRICS, np.nan), q_end=[], passed=False,
                failed="config", status=STATUS_CONFIG, error=str(exc), simulated_s=0.0,
                stepping_s=0.0, wall_s=time.perf_counter() - started)
