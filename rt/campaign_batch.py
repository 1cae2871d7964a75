"""One task of a campaign: a batch of scenarios run one after the other in a worker.

Each scenario is the base config with its overrides, resolved, run offline by
rt.sim.simulate (the run of ``hil sim``: one compiled call for the whole scenario, no
Python per step) and measured (rt.campaign_metrics). What a task returns is plain data
(columns of numbers and strings), so it travels from any Dask worker to the client,
which writes it (rt.campaign). Nothing here imports Dask: a batch also runs in-process.
"""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

import numpy as np
from hilrig.errors import ConfigError
from hilrig.rt.campaign_metrics import METRICS, MetricSettings, judge, measure
from hilrig.rt.config import apply_override, resolve
from hilrig.rt.sim import SimulationError, simulate

STATUS_OK = "ok"                        # the run completed
STATUS_INVALID = "invalid_state"        # the plant state became invalid (measured up to it)
STATUS_CONFIG = "config_error"          # the scenario's config was refused (not run)


@dataclass(frozen=True)
class BatchJob:
    """What every task of a campaign shares: the base config's TOML with the fixed
    overrides applied (as JSON: each scenario parses its own copy), the metric
    settings and the criteria."""

    base_raw: str
    settings: MetricSettings
    criteria: dict


def run_batch(job: BatchJob, scenarios: list) -> dict:
    """Run ``scenarios`` ((id, overrides) pairs) and return their rows as columns: id,
    the METRICS, q_end, passed, failed (the criteria failed, comma-separated), status,
    error, simulated_s (simulated time), stepping_s (wall time of the compiled run),
    wall_s (the whole scenario: config, run, metrics) and worker (host:pid)."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    rows = [run_scenario(job, sid, overrides) for sid, overrides in scenarios]
    columns = {name: [row[name] for row in rows] for name in rows[0]} if rows else {}
    columns["worker"] = [worker] * len(rows)
    return columns


def run_scenario(job: BatchJob, sid: int, overrides) -> dict:
    """One scenario's row (see run_batch). A config the scenario's overrides make invalid
    (refused by the config, or by the controller or plant built from it) is a row of
    status config_error, not a failed task."""
    started = time.perf_counter()
    raw = json.loads(job.base_raw)     # a fresh copy, faster than copy.deepcopy
    status, error = STATUS_OK, ""
    try:
        for item in overrides:
            apply_override(raw, item)
        cfg = resolve(raw)
        run = simulate(cfg, minimal=True)
        arrays, stepping, plant = run.arrays, run.stepping_seconds, run.plant
    except ConfigError as exc:
        return dict(id=sid, **dict.fromkeys(METRICS, np.nan), q_end=[], passed=False,
                    failed="config", status=STATUS_CONFIG, error=str(exc), simulated_s=0.0,
                    stepping_s=0.0, wall_s=time.perf_counter() - started)
    except SimulationError as exc:
        arrays, stepping, plant = exc.arrays, float("nan"), exc.plant
        status, error = STATUS_INVALID, str(exc)
    metrics = measure(arrays, cfg, job.settings, plant)
    passed, failed = judge(metrics, job.criteria, status == STATUS_OK)
    return dict(id=sid, **metrics, passed=passed, failed=",".join(failed), status=status,
                error=error, simulated_s=float(arrays["t"][-1]), stepping_s=stepping,
                wall_s=time.perf_counter() - started)
