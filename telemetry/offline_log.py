"""``hil sim --log``: an offline run's arrays as a telemetry log like ``hil run``'s, so that
Foxglove, the mcap readers and ``hil log`` open it with the same layout (the rows on
``/hil/tick``, the jams, the other faults' starts and ends and the law's first detected
fault on ``/hil/event``, the robot
in 3D on ``/hil/frames`` and ``/hil/scene``): a campaign's failing scenario run again with ``hil sim ... --log`` is
watched as a real-time run's log is.

A row per step of the run, in ``hil run``'s layout (telemetry.recorder.run_groups): t,
q, qd, u, the motor currents of voltage drives, the model's diagnostics, ``tick`` (the
row's index) and the five timing columns, NaN (an offline run has no clock). A group the
run does not give (an offline integrator of the model's own) is NaN too.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from hilrig.controllers.interface import detection_event
from hilrig.plant.factory import plant_model
from hilrig.plant.faults import CHANNEL_NAMES, KINDS, NAMES, SENSOR
from hilrig.schema import Config
from hilrig.telemetry.recorder import Telemetry, run_groups
from hilrig.telemetry.scene import attach


def write_log(path: str | Path, cfg: Config, arrays: dict, summary: dict) -> None:
    """Write the arrays of an offline run of ``cfg`` (``hil sim``'s: t, q, qd, u, ...,
    jam_events rows [joint (1-based), t1, t2], s; fault_events rows, plant.faults.started_rows)
    to the MCAP log ``path``, with
    ``summary`` as its run summary. TelemetryError if the file cannot be written."""
    t = np.asarray(arrays["t"], dtype=float)
    n = len(t)
    nq, nact = np.shape(arrays["q"])[1], np.shape(arrays["u"])[1]
    groups = run_groups(plant_model(cfg.plant.model).diagnostics, nq, nact, cfg.plant.drive)
    # the rows are all there before the writer starts: a ring that holds them, written at close
    telemetry = Telemetry(path, groups, cfg.to_dict(), capacity=n + 2, period=3600.0)
    try:
        attach(telemetry, cfg)
        ring = telemetry.ring
        ring[:n] = np.nan
        for name, column in telemetry.columns.items():
            if name == "tick":
                ring[:n, column] = np.arange(n)
            elif name in arrays:
                ring[:n, column] = np.asarray(arrays[name], dtype=float).reshape(n, -1) \
                    if isinstance(column, slice) else np.asarray(arrays[name], dtype=float)
        for joint, t1, t2 in sorted(np.asarray(arrays.get("jam_events", np.zeros((0, 3))))
                                    .tolist(), key=lambda e: e[1]):
            telemetry.event("jam", joint=int(joint), t1=t1, t2=t2, duration=t2 - t1,
                            tick=int(np.searchsorted(t, t1 - 1e-12)), t=t1)
        for event in other_fault_events(arrays.get("fault_events", np.zeros((0, 5)))):
            telemetry.event(event.pop("kind"), **event,
                            tick=int(np.searchsorted(t, event["t"] - 1e-12)))
        for tick, t_detected, code in np.asarray(arrays.get("fault_detected",
                                                              np.zeros((0, 3)))).tolist():
            event = detection_event(code)
            telemetry.event(event.pop("kind"), **event, tick=int(tick), t=t_detected)
        telemetry.head[0] = n
    finally:
        telemetry.close({"source": "hil sim", **summary})


def other_fault_events(rows) -> list:
    """The ``fault`` and ``fault_end`` events (as a real-time loop logs them, without the
    parameters) of the started faults other than jams and clears in ``rows`` [kind code,
    joint (1-based), channel, start (s), end (s; NaN: still active)], in time order."""
    events = []
    for code, joint, channel, start, end in np.asarray(rows, dtype=float).tolist():
        name = NAMES[int(code)]
        if name in ("jam", "clear"):
            continue
        fields = {"fault": name, "joint": int(joint)}
        if KINDS[name].family == SENSOR:
            fields["channel"] = CHANNEL_NAMES[int(channel)]
        events.append({"kind": "fault", **fields, "t": start})
        if not np.isnan(end):
            events.append({"kind": "fault_end", **fields, "t": end})
    return sorted(events, key=lambda e: e["t"])
