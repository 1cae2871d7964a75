"""The fault table's summary (plant.faults: C_NEXT, C_SENSING, C_HOLD) lets the loops skip
their passes over the rows on the ticks where nothing is to do (issue 24's benchmark:
three active faults cost < 10 % of the plant's tick). Skipping must change nothing: a
table driven the loops' way (apply_schedule, hold_previous while ``holding``, sense while
``sensing``) goes through exactly the states, actuator columns and corrupted
measurements of one whose every pass runs at every tick."""
import numpy as np
from conftest import config
from hilrig.plant.factory import plant_from_config
from hilrig.plant.faults import (
    C_HELD,
    C_KIND,
    C_STATE,
    K_NOISE_BURST,
    K_SENSOR_BIAS,
    K_SENSOR_DROPOUT,
    S_ACTIVE,
    add_row,
    apply_faults,
    fault_row,
    faults_due,
    hold_previous,
    holding,
    phases,
    sense,
    sensing,
)
from hilrig.plant.stepping import apply_schedule


def rows(h: float) -> list:
    """Every way a row starts and ends: at a time, for a while and for good, on a
    condition, intermittently, a dropout and a stuck sensor, a brake, a clear."""
    out = [fault_row("effectiveness", 0, 0.010, 0.020, {"factor": 0.5}),
           fault_row("friction", 1, 0.0, np.inf, {"viscous": 0.5}),
           fault_row("sensor_bias", 0, 0.005, np.inf, {"bias": 0.01}),
           fault_row("sensor_dropout", 1, 0.030, 0.015, {}, "rate"),
           fault_row("sensor_stuck", 2, 0.050, 0.010, {"value": np.nan}),
           fault_row("torque_offset", 2, 0.0, 0.040, {"torque": 1.0},
                     when=(0, "q", 0.25, None)),            # once joint 1 passes 0.25 rad
           fault_row("brake", 2, 0.080, 0.020, {"stop_time": 0.01}),
           fault_row("clear", 1, 0.120, np.inf, {})]
    for start, length in phases(0.0, 0.004, 0.006, 3, 0.2):
        out.append(fault_row("noise_burst", 0, start, length, {"std": 0.01, "seed": 5},
                             "rate"))
    return out


def test_the_summary_skips_no_change_of_the_fault_table():
    """200 boundaries of 1 ms, joint 1 swept through the condition's angle, a live row
    added at tick 90: the summary-driven table equals the every-pass one after every
    tick, in all its columns, the jams' and the measurement's; its flags say what a scan
    of the rows says, and the table is skipped at most boundaries (else nothing is
    saved)."""
    cfg = config("serial3_free")
    h, tol, nact = 0.001, 1e-12, 3
    plants = [plant_from_config(cfg) for _ in range(2)]
    tables = []
    for _ in range(2):
        table = np.zeros((len(rows(h)) + 4, len(rows(h)[0])))
        table[:len(rows(h))] = rows(h)
        tables.append(table)
    meas = [np.zeros(1 + 3 * nact), np.zeros(1 + 3 * nact)]
    skipped = 0
    for k in range(200):
        t = k * h
        for plant in plants:
            plant.x[0] = 0.3 * np.sin(40.0 * t)          # through 0.25 rad and back
            plant.x[nact:2 * nact] = [0.1 * k, -0.2 * k, 0.05 * k]
        if k == 90:
            for table in tables:
                add_row(table, fault_row("sensor_bias", 2, t, 0.03, {"bias": -0.02}, "rate"))
        fast, full = (plants[0], tables[0], meas[0]), (plants[1], tables[1], meas[1])
        skipped += not faults_due(fast[1], t, tol)
        apply_schedule(fast[0].params, fast[0].jams, fast[1], t, fast[0].x, tol)
        apply_faults(full[0].params, full[0].jams, full[1], t, full[0].x, tol)
        active = fast[1][:, C_STATE] == S_ACTIVE
        kinds = fast[1][:, C_KIND]
        sensor = active & (kinds >= K_SENSOR_BIAS) & (kinds <= K_NOISE_BURST)
        assert sensing(fast[1]) == sensor.any(), k
        waiting = active & (kinds == K_SENSOR_DROPOUT) & (fast[1][:, C_HELD] == 0.0)
        assert holding(fast[1]) == waiting.any(), k
        if holding(fast[1]):
            hold_previous(fast[1], fast[2], nact)
        hold_previous(full[1], full[2], nact)
        for plant, _, m in (fast, full):
            m[0] = t
            m[1:1 + 2 * nact] = np.concatenate([plant.x[:nact], plant.x[nact:2 * nact]])
        if sensing(fast[1]):
            sense(fast[1], t, k, fast[2], nact)
        sense(full[1], t, k, full[2], nact)
        np.testing.assert_array_equal(fast[1], full[1], err_msg=f"tick {k}")
        np.testing.assert_array_equal(fast[0].jams, full[0].jams, err_msg=f"tick {k}")
        np.testing.assert_array_equal(fast[2], full[2], err_msg=f"tick {k}")
    named = len(rows(h)) - len(phases(0.0, 0.004, 0.006, 3, 0.2))
    assert (tables[0][:named, C_STATE] != 0.0).all()         # every named row started,
    assert tables[0][len(rows(h)), C_STATE] != 0.0            # and the live one
    assert skipped > 100
