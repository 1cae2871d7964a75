"""No telemetry row is dropped without the run failing loudly (issue 28, item 1).

A loop without a deadline (``hil run --fast``, a lockstep link or emulator, drives in
lockstep) waits for its log's writer when the ring is full, so it keeps every row; a
paced loop that laps its writer stops (``telemetry.on_overrun = "stop"``) or goes on
saying so ("warn"), and either way its summary and exit code name the count;
``hil log export`` names every gap it finds. A run of T s logs the rows at t = 0 .. T,
as ``hil sim`` does.
"""
from __future__ import annotations

import re
import subprocess
import time
import warnings

import numpy as np
import pytest
from conftest import config
from hilrig.devices.plant_log import PlantLog
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.zmq_link import ZmqLink
from hilrig.rt.loop import LinkLoop
from hilrig.rt.session import Session
from hilrig.rt.sim import simulate
from hilrig.telemetry.logfile import RowGapWarning, read_log
from hilrig.telemetry.recorder import Telemetry
from rt_helpers import ROOT, EmulatorProcess, endpoint, hil, read_complete, stderr_lines

LOST = re.compile(r"telemetry ring overrun: (\d+) rows lost")


@pytest.fixture(autouse=True)
def _no_emulator_left():
    yield
    EmulatorProcess.reap()


def _gap_warnings(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        read_log(path)
    return [str(w.message) for w in caught if issubclass(w.category, RowGapWarning)]


@pytest.mark.system
def test_a_30_s_fast_run_logs_its_30001_rows_equal_to_hil_sim_bit_for_bit(tmp_path):
    """It kept only the last 4095 rows (the loop lapped its writer) and said "ended:
    done"; `hil log export` gave 3000 rows of a 3 s run where `hil sim` gives 3001."""
    log, run_npz, sim_npz = tmp_path / "fast.mcap", tmp_path / "run.npz", tmp_path / "sim.npz"
    run = subprocess.run(hil("run", "serial3_jam1", "--fast", "--duration", "30", "--no-plot",
                             "--log", str(log)),
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    assert "30001 ticks at 1000 Hz (fast), ended: done" in run.stdout, run.stdout
    assert stderr_lines(run.stderr) == [], run.stderr
    export = subprocess.run(hil("log", "export", str(log), "--out", str(run_npz)),
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert export.returncode == 0 and stderr_lines(export.stderr) == [], export.stderr
    assert f"wrote {run_npz}: 30001 rows, t = 0 .. 30 s, 1 jam(s)" in export.stdout
    sim = subprocess.run(hil("sim", "serial3_jam1", "--duration", "30", "--out", str(sim_npz)),
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert sim.returncode == 0, sim.stderr
    logged, offline = np.load(run_npz), np.load(sim_npz)
    assert len(offline["t"]) == 30001
    np.testing.assert_array_equal(logged["tick"], np.arange(30001))
    for key in offline.files:       # every array of hil sim, its config (meta) too
        assert logged[key].tobytes() == offline[key].tobytes(), key
    _, _, _, summary = read_complete(log)
    assert summary["telemetry"]["rows"] == 30001 and summary["telemetry"]["lost_rows"] == 0


def test_a_fast_run_waits_for_the_writer_of_a_tiny_ring(tmp_path):
    """A 64-row ring, lapped hundreds of times: the loop waits, nothing is lost."""
    cfg = config("rrr3_pd", "sim.duration=2.0", "telemetry.ring_rows=64")
    session = Session(cfg, tmp_path / "fast.mcap", fast=True)
    result = session.run()
    assert session.telemetry.capacity == 64
    assert (result.status, result.reason, result.ticks) == ("ok", "done", 2001)
    arrays, _, _, summary = read_complete(tmp_path / "fast.mcap")
    reference = simulate(cfg).arrays
    for key in ("t", "q", "qd", "u", "i", "residual"):
        assert arrays[key].tobytes() == reference[key].tobytes(), key
    assert summary["telemetry"]["lost_rows"] == 0 and "lost_rows" not in summary


def _run_tiny_ring(tmp_path, *extra):
    log = tmp_path / "paced.mcap"
    proc = subprocess.run(hil("run", "serial3_free", "--duration", "1", "--no-plot",
                              "--log", str(log), "--set", "telemetry.ring_rows=16", *extra),
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    ticks = int(re.search(r"(\d+) ticks at", proc.stdout)[1])
    return proc, log, ticks


def test_a_paced_run_that_laps_a_tiny_ring_stops_and_names_the_count(tmp_path):
    """A 16-row ring at 1 kHz: the writer (every 25 ms) cannot keep up. The run stops
    safely at once (the default, telemetry.on_overrun = "stop"), exit code 1, one line."""
    proc, log, ticks = _run_tiny_ring(tmp_path)
    lines = stderr_lines(proc.stderr)
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and lines[0].endswith(
        "stopped the run (telemetry.on_overrun = 'stop')"), proc.stderr
    lost = int(LOST.search(lines[0])[1])
    assert f"ended: telemetry ring overrun: {lost} rows lost" in proc.stdout
    assert f"telemetry: {lost} rows lost (ring overrun)" in proc.stdout    # the summary
    assert ticks < 1001                                                    # stopped early
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RowGapWarning)
        arrays, events, _, summary = read_complete(log)
    assert summary["lost_rows"] == summary["telemetry"]["lost_rows"] == lost > 0
    assert len(arrays["t"]) + lost == ticks          # every row the loop wrote: kept or counted
    assert sum(e["lost"] for e in events if e["kind"] == "ring_overrun") == lost


@pytest.mark.system
def test_warn_goes_on_says_so_and_export_names_the_gaps(tmp_path):
    """telemetry.on_overrun = "warn": the run goes to its end, says so on stderr at once
    and with the total at the end, exit code 1; `hil log export` names the gaps."""
    proc, log, ticks = _run_tiny_ring(tmp_path, "--set", "telemetry.on_overrun='warn'")
    lines = stderr_lines(proc.stderr)
    assert proc.returncode == 1, proc.stderr
    assert ticks == 1001
    assert len(lines) == 2, proc.stderr
    assert "so far: the run goes on (telemetry.on_overrun = 'warn')" in lines[0]
    assert lines[1].startswith("hil: done, but telemetry ring overrun: ")
    lost = int(LOST.search(lines[1])[1])
    assert "ended: done, but telemetry ring overrun" in proc.stdout
    out = tmp_path / "paced.npz"
    export = subprocess.run(hil("log", "export", str(log), "--out", str(out)),
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    warned = stderr_lines(export.stderr)
    assert export.returncode == 0 and len(warned) == 1, export.stderr
    assert warned[0].startswith(f"hil: warning: {log}: {lost} rows lost (ring overrun")
    assert re.search(r"rows \d+\.\.\d+", warned[0])
    assert f"{1001 - lost} rows" in export.stdout
    ticks_kept = np.load(out)["tick"]
    assert len(ticks_kept) == 1001 - lost and len(np.setdiff1d(np.arange(1001), ticks_kept)) \
        == lost


@pytest.mark.system
def test_export_names_the_rows_a_lapped_ring_lost(tmp_path):
    """A log whose writer was lapped: 937 of 1000 rows lost. `hil log export` said
    nothing; now one warning line names the count and the rows."""
    path = tmp_path / "lapped.mcap"
    tel = Telemetry(path, [("t", 1), ("tick", 1)], {}, capacity=64, period=3600.0)
    for k in range(1000):          # the writer never wakes before close
        tel.ring[k % 64] = (k * 1e-3, k)
        tel.head[0] += 1
    tel.close({})
    proc = subprocess.run(hil("log", "export", str(path), "--out", str(tmp_path / "x.npz")),
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert stderr_lines(proc.stderr) == [
        f"hil: warning: {path}: 937 rows lost (ring overrun: the log's writer fell behind "
        "the loop; rows 0..936); read 63 rows, t = 0.937 .. 0.999 s"], proc.stderr
    assert "63 rows" in proc.stdout


def test_missing_ticks_are_named_unless_an_overrun_skipped_them(tmp_path):
    """Ticks 100..149 have no row: said, unless an overrun event at tick 99 skipped 50
    ticks (a link loop's policy "skip" writes no row for them)."""
    for explained in (False, True):
        path = tmp_path / f"ticks-{explained}.mcap"
        tel = Telemetry(path, [("t", 1), ("tick", 1)], {})
        ticks = [k for k in range(200) if not 100 <= k < 150]
        for n, k in enumerate(ticks):
            tel.ring[n] = (k * 1e-3, k)
            tel.head[0] = n + 1
        if explained:
            tel.event("overrun", t=0.099, tick=99, missed=50)
        tel.close({})
        gaps = _gap_warnings(path)
        assert gaps == ([] if explained else
                        [f"{path}: 50 ticks have no row (ticks 100..149); read 150 "
                         "rows, t = 0 .. 0.199 s"])


@pytest.mark.system
def test_lockstep_controller_and_emulator_wait_for_their_writers(tmp_path):
    """`hil control` against `hil emulate --mode lockstep`, both with a 16-row ring: neither
    has a deadline, so both wait for their writers and keep every row."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("serial3_free", ep, tmp_path / "emu.mcap", "--mode", "lockstep",
                          "--set", "telemetry.ring_rows=16")
    cfg = config("serial3_free", f"link.endpoint='{ep}'", "link.type='zmq'", "sim.duration=2.0",
                 "link.timeout=5.0", "telemetry.ring_rows=16")
    result = LinkLoop(cfg, ZmqLink.from_config(cfg), tmp_path / "ctl.mcap").run()
    out, err = emu.stop()
    assert result.status == "ok" and result.ticks == 2001, result.reason
    ctl, _, _, ctl_summary = read_complete(tmp_path / "ctl.mcap")
    plant, _, _, emu_summary = read_complete(tmp_path / "emu.mcap")
    np.testing.assert_array_equal(ctl["tick"], np.arange(2001))
    np.testing.assert_array_equal(ctl["t"], np.arange(2001) * 1e-3)
    np.testing.assert_array_equal(plant["tick"], np.arange(len(plant["tick"])))
    assert len(plant["tick"]) >= 2000                 # a row per step it took
    assert ctl_summary["telemetry"]["lost_rows"] == emu_summary["telemetry"]["lost_rows"] == 0
    reference = simulate(config("serial3_free", "sim.duration=2.0")).arrays
    np.testing.assert_array_equal(plant["q"], reference["q"][:len(plant["q"])])


def test_the_drives_plant_log_waits_in_lockstep_and_names_its_loss_otherwise(tmp_path):
    """Emulated drives log their plant's steps (devices.plant_log): in lockstep (no clock)
    each step waits for room; stepped by a controller's clock they never wait, and the
    rows lost are named when the log closes (the drives' serve raises it)."""
    cfg = config("serial3_free", "telemetry.ring_rows=16")
    for wait in (True, False):
        link = PlantLink.from_config(cfg)
        link.open()
        plant_log = PlantLog(cfg, tmp_path / f"plant-{wait}.mcap", link, wait=wait)
        u = np.zeros(link.n_axes)
        steps, stopped, end = 0, False, time.monotonic() + 10.0
        while steps < 2000 or (not wait and time.monotonic() < end):
            plant_log.record(u, u)         # far faster than the writer wakes (every 25 ms)
            link.write(u)
            steps += 1
            if plant_log.lost():           # what the drives' serve loop asks
                stopped = True
                break
        loss = plant_log.close("stopped")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RowGapWarning)
            arrays, _, _, summary = read_complete(tmp_path / f"plant-{wait}.mcap")
        if wait:
            assert loss is None and not stopped and len(arrays["t"]) == steps == 2000
            np.testing.assert_array_equal(arrays["tick"], np.arange(2000))
        else:
            lost = int(LOST.search(loss)[1])
            assert stopped and loss.endswith("stopped the run (telemetry.on_overrun = 'stop')")
            assert summary["lost_rows"] == lost and len(arrays["t"]) + lost == steps


def test_a_ring_of_fewer_than_16_rows_is_refused():
    with pytest.raises(Exception, match=r"telemetry.ring_rows: at least 16 rows"):
        config("rrr3_pd", "telemetry.ring_rows=3")
