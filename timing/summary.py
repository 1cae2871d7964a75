"""Timing summary of a real-time run: lateness and compute time statistics."""
from __future__ import annotations

import numpy as np

COLUMNS = ("lateness", "compute_read", "compute_control", "compute_write", "compute_tick")


def summarize(timings: np.ndarray, overruns: int, scheduling: dict | None = None) -> dict:
    """Statistics of a (ticks, 5) timing array in s (columns of COLUMNS; NaN rows = skipped).

    Returns a JSON-ready dict: per column median, p99, p99.9 and max in µs,
    plus tick counts, overruns (ticks that ended after the next deadline),
    skipped ticks, and the scheduling that was in force.
    """
    ran = timings[~np.isnan(timings[:, 0])]
    out = {"ticks": int(len(timings)), "ticks_run": int(len(ran)),
           "skipped": int(len(timings) - len(ran)), "overruns": int(overruns),
           "overruns_per_1000": 1000.0 * overruns / max(len(timings), 1)}
    for i, name in enumerate(COLUMNS):
        column = ran[:, i] * 1e6
        if len(column) == 0:
            continue
        out[name + "_us"] = {"median": float(np.median(column)),
                             "p99": float(np.percentile(column, 99)),
                             "p99.9": float(np.percentile(column, 99.9)),
                             "max": float(column.max())}
    if scheduling is not None:
        out["scheduling"] = scheduling
    return out


def format_summary(summary: dict) -> str:
    """A few lines for the terminal."""
    lines = [f"ticks {summary['ticks']} (run {summary['ticks_run']}, skipped "
             f"{summary['skipped']}), overruns {summary['overruns']} "
             f"({summary['overruns_per_1000']:.2f} per 1000)"]
    for name in COLUMNS:
        s = summary.get(name + "_us")
        if s:
            lines.append(f"  {name:<16} median {s['median']:9.2f} µs  p99 {s['p99']:9.2f}  "
                         f"p99.9 {s['p99.9']:9.2f}  max {s['max']:10.2f}")
    if "enable_to_first_command_s" in summary:
        lines.append(f"  bring-up: warm-up {summary['warm_up_s']:.3f} s, then drives enabled, "
                     f"first command {summary['enable_to_first_command_s'] * 1e3:.3f} ms "
                     "after the enable")
    if summary.get("lost_rows"):
        lines.append(f"  telemetry: {summary['lost_rows']} rows lost (ring overrun): the log "
                     "has gaps (hil log export names them)")
    if summary.get("lost_events"):
        lines.append(f"  telemetry: {summary['lost_events']} loop events lost (event ring "
                     "overflow)")
    sched = summary.get("scheduling")
    if sched:
        lines.append("  scheduling: " + ", ".join(f"{k}={v}" for k, v in sched.items()))
    return "\n".join(lines)
