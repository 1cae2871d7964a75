"""Telemetry: the ring, the writer thread, the MCAP file, reading it back, export and plot."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hilrig.cli.main import main
from hilrig.plant.factory import plant_model
from hilrig.telemetry import recorder as telemetry
from hilrig.telemetry.logfile import IncompleteLogWarning, LogError, RowGapWarning, read_log
from hilrig.telemetry.recorder import Telemetry, TelemetryError, run_groups
from mcap.reader import make_reader
from mcap.records import Footer
from mcap.stream_reader import StreamReader
from mcap.writer import Writer
from mcap_ros1.decoder import DecoderFactory

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TIMING = [name for name, _ in telemetry.TIMING_GROUPS]
GROUPS = [("t", 1), ("q", (3,)), ("u", 2), ("lateness", 1)]  # 7 columns


def run_loop(tel: Telemetry, rows: np.ndarray, events: dict | None = None) -> None:
    """Write ``rows`` through the ring from a thread, as the loop does; never lap the writer.

    events: row index -> (kind, fields), emitted by the loop thread after that row.
    """
    ring, head, cap = tel.ring, tel.head, tel.capacity

    def loop():
        for k, row in enumerate(rows):
            while head[0] - tel.copied >= cap - 1:
                time.sleep(0.001)
            ring[head[0] % cap] = row
            head[0] += 1
            if events and k in events:
                kind, fields = events[k]
                tel.event(kind, **fields)

    thread = threading.Thread(target=loop)
    thread.start()
    thread.join()


def odd_rows(n: int, width: int, rng) -> np.ndarray:
    """Rows of random bit patterns (NaN payloads, infinities, -0, subnormals), t = k ms."""
    rows = rng.integers(0, 2 ** 63, size=(n, width), dtype=np.uint64).view(np.float64).copy()
    rows[::7, 1] = -0.0
    rows[::11, 2] = np.inf
    rows[::13, 3] = 5e-324
    rows[:, 0] = np.arange(n) * 1e-3
    return rows


def stacked(arrays: dict, groups) -> np.ndarray:
    return np.column_stack([arrays[name].reshape(len(arrays["t"]), -1) for name, _ in groups])


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def child(argv: list, wait: bool = True):
    """Run ``python *argv`` from the repository (finished, or started when not ``wait``)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if wait:
        return subprocess.run([sys.executable, *map(str, argv)], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=120)
    return subprocess.Popen([sys.executable, *map(str, argv)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


# -- round trip ------------------------------------------------------------------------

def test_round_trip_is_bit_for_bit_with_events_meta_and_summary(tmp_path, rng):
    path = tmp_path / "run.mcap"
    rows = odd_rows(3000, 7, rng)
    cfg = {"plant": {"model": "serial_arm"}, "note": "round trip"}
    tel = Telemetry(path, GROUPS, cfg, capacity=256, period=0.005)
    run_loop(tel, rows, {10: ("jam", {"joint": 2, "t1": 0.01, "t2": 0.11, "tick": 10}),
                         2000: ("overrun", {"tick": np.int64(2000), "late": np.float64(1e-3)})})
    tel.event("stop", reason="duration reached")
    tel.close({"ticks": 3000, "median_lateness": np.float64(2e-6)})
    arrays, events, meta, summary = read_log(path)
    assert list(arrays) == ["t", "q", "u", "lateness"]
    assert arrays["t"].shape == (3000,) and arrays["q"].shape == (3000, 3)
    assert arrays["u"].shape == (3000, 2) and arrays["lateness"].shape == (3000,)
    assert same_bits(stacked(arrays, GROUPS), rows)
    assert events == [
        {"kind": "jam", "joint": 2, "t1": 0.01, "t2": 0.11, "tick": 10, "t": 0.01},
        {"kind": "overrun", "tick": 2000, "late": 1e-3, "t": 2.0},
        {"kind": "stop", "reason": "duration reached", "t": 2.999}]
    assert meta == cfg
    assert summary == {"ticks": 3000, "median_lateness": 2e-6,
                       "telemetry": {"rows": 3000, "lost_rows": 0, "events": 3}}


def test_close_is_idempotent_and_late_events_are_dropped(tmp_path):
    path = tmp_path / "run.mcap"
    tel = Telemetry(path, [("t", 1)], {})
    run_loop(tel, np.arange(5.0)[:, None])
    tel.close({"n": 5})
    size = path.stat().st_size
    tel.event("late")
    tel.close({"n": 6})
    assert path.stat().st_size == size
    arrays, events, _, summary = read_log(path)
    np.testing.assert_array_equal(arrays["t"], np.arange(5.0))
    assert events == [] and summary["n"] == 5


def test_groups_must_have_a_scalar_time_and_distinct_names(tmp_path):
    with pytest.raises(ValueError, match="scalar 't'"):
        Telemetry(tmp_path / "a.mcap", [("q", 3)], {})
    with pytest.raises(ValueError, match="'q'"):
        Telemetry(tmp_path / "b.mcap", [("t", 1), ("q", 3), ("q", 2)], {})


def test_ring_overrun_is_counted_and_logged(tmp_path, rng):
    path = tmp_path / "run.mcap"
    rows = odd_rows(1000, 7, rng)
    tel = Telemetry(path, GROUPS, {}, capacity=64, period=3600.0)  # the writer never wakes
    for row in rows:  # the loop laps the ring 15 times before the final drain
        tel.ring[tel.head[0] % tel.capacity] = row
        tel.head[0] += 1
    tel.close()
    assert tel.lost_rows == 937
    with pytest.warns(RowGapWarning, match=r"937 rows lost \(ring overrun.*rows 0\.\.936\)"):
        arrays, events, _, summary = read_log(path)
    # the slot of the oldest row is the one the loop writes next: counted lost too
    assert same_bits(stacked(arrays, GROUPS), rows[937:])
    assert events == [{"kind": "ring_overrun", "lost": 937, "first_row": 0, "t": 0.999}]
    assert summary["telemetry"] == {"rows": 63, "lost_rows": 937, "events": 1}


def test_an_exception_leaving_the_with_block_is_an_event_and_the_file_is_finished(tmp_path):
    path = tmp_path / "run.mcap"
    with pytest.raises(RuntimeError), Telemetry(path, [("t", 1)], {}) as tel:
        run_loop(tel, np.arange(3.0)[:, None])
        raise RuntimeError("link lost")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a finished log reads without a warning
        arrays, events, _, summary = read_log(path)
    assert len(arrays["t"]) == 3
    assert events == [{"kind": "exception", "type": "RuntimeError", "message": "link lost",
                       "t": 2.0}]
    assert summary["telemetry"]["rows"] == 3


# -- the file is finished however the process ends -------------------------------------

WRITER = """
import sys, numpy as np
from hilrig.telemetry.recorder import Telemetry
tel = Telemetry(sys.argv[1], [("t", 1), ("x", (3,))], {{"run": "child"}}, period=0.005)
def put(n):
    for _ in range(n):
        k = int(tel.head[0])
        tel.ring[k % tel.capacity] = [k * 1e-3, k, -k, 0.5 * k]
        tel.head[0] = k + 1
{body}
"""


def expected_rows(n: int) -> np.ndarray:
    k = np.arange(n, dtype=float)
    return np.column_stack([k * 1e-3, k, 0.0 - k, 0.5 * k])  # as the child writes them


@pytest.mark.system
@pytest.mark.parametrize("ending, code", [
    ("normal exit", "put(500)"),
    ("uncaught exception", "put(500)\nraise RuntimeError('link lost')"),
    ("Ctrl-C", "put(500)\nraise KeyboardInterrupt"),
])
def test_the_log_is_complete_however_the_process_ends(tmp_path, ending, code):
    path = tmp_path / "run.mcap"
    proc = child(["-c", WRITER.format(body=code), path])
    assert (proc.returncode == 0) == (ending == "normal exit"), proc.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arrays, _, meta, summary = read_log(path)
    assert same_bits(stacked(arrays, [("t", 1), ("x", 3)]), expected_rows(500))
    assert meta == {"run": "child"}
    assert summary == {"telemetry": {"rows": 500, "lost_rows": 0, "events": 0}}


FLUSH_INTERRUPTED = """
import os, signal, sys, threading, time
from hilrig.telemetry.recorder import Telemetry
n = 200000                                    # rows the writer has not taken (it sleeps)
tel = Telemetry(sys.argv[1], [("t", 1), ("x", (3,))], {}, capacity=n + 1, period=3600.0)
for k in range(n):
    tel.ring[k] = [k * 1e-3, k, -k, 0.5 * k]
tel.head[0] = n

def interrupt():                              # Ctrl-C once the final flush has begun
    while not tel._flushed:
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt).start()
tel.close()
"""


@pytest.mark.system
def test_a_ctrl_c_during_the_final_flush_loses_no_row(tmp_path):
    """`hil emulate` stopped by Ctrl-C while it wrote its last rows (its run had ended, its
    writer behind) finished its log without them: 826 of 1000 rows, and a summary that
    said none was lost. The final flush now runs to its end first."""
    path = tmp_path / "run.mcap"
    proc = child(["-c", FLUSH_INTERRUPTED, path])
    assert proc.returncode == 0, proc.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arrays, _, _, summary = read_log(path)
    assert same_bits(stacked(arrays, [("t", 1), ("x", 3)]), expected_rows(200000))
    assert summary == {"telemetry": {"rows": 200000, "lost_rows": 0, "events": 0}}


HEADER_INTERRUPTED = """
import os, signal, sys
from hilrig.telemetry.recorder import Telemetry

class CtrlCWhileWritten(dict):                # the header's meta: Ctrl-C while it is written
    def items(self):
        os.kill(os.getpid(), signal.SIGINT)
        return super().items()

try:
    tel = Telemetry(sys.argv[1], [("t", 1), ("x", (3,))], CtrlCWhileWritten(run="child"))
except KeyboardInterrupt:
    sys.exit(130)
tel.close({"reason": "done"})
"""


@pytest.mark.system
def test_a_ctrl_c_while_the_header_is_written_is_taken_after_it(tmp_path):
    """A Ctrl-C while the log's header was written used to be ignored: the run went on as
    if none had come. It is held back until the header is written, then taken: the log
    is finished with the reason and KeyboardInterrupt reaches the caller."""
    path = tmp_path / "run.mcap"
    proc = child(["-c", HEADER_INTERRUPTED, path])
    assert proc.returncode == 130, (proc.stdout, proc.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arrays, _, meta, summary = read_log(path)
    assert meta == {"run": "child"} and len(arrays["t"]) == 0
    assert summary["reason"] == "interrupted during start-up", summary


@pytest.mark.system
def test_a_killed_writer_leaves_a_log_readable_up_to_its_last_chunk(tmp_path):
    path = tmp_path / "run.mcap"
    body = """
import time, warnings
from hilrig.telemetry.logfile import read_log
put(2000)
warnings.simplefilter("ignore")
while len(read_log(sys.argv[1])[0]["t"]) < 2000:  # until the rows are in the file
    time.sleep(0.05)
print("ready", flush=True)
while True:
    put(10)
    time.sleep(0.001)
"""
    proc = child(["-c", WRITER.format(body=body), path], wait=False)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with pytest.warns(IncompleteLogWarning, match="ends early"):
        arrays, events, meta, summary = read_log(path)
    n = len(arrays["t"])
    assert n >= 2000
    assert same_bits(stacked(arrays, [("t", 1), ("x", 3)]), expected_rows(n))
    assert meta == {"run": "child"} and summary == {} and events == []


@pytest.fixture(scope="module")
def chunked_log(tmp_path_factory):
    """A finished log of 1000 rows in several chunks, and its chunk indexes."""
    path = tmp_path_factory.mktemp("chunked") / "run.mcap"
    saved = telemetry.CHUNK_ROWS
    telemetry.CHUNK_ROWS = 100
    try:
        tel = Telemetry(path, [("t", 1), ("x", (3,))], {"run": "chunked"}, period=0.002)
        for start in range(0, 1000, 200):  # wait for the writer every 200 rows: >= 5 chunks
            run_loop(tel, expected_rows(1000)[start:start + 200])
            while tel.copied < start + 200:
                time.sleep(0.002)
        tel.close()
    finally:
        telemetry.CHUNK_ROWS = saved
    with open(path, "rb") as stream:
        chunks = make_reader(stream).get_summary().chunk_indexes
    assert len(chunks) >= 5
    return path, chunks


@pytest.mark.parametrize("where", ["inside a chunk", "inside a message index",
                                   "inside the summary"])
def test_a_cut_log_is_read_up_to_its_last_complete_chunk(tmp_path, chunked_log, where):
    path, chunks = chunked_log
    data = path.read_bytes()
    last = chunks[-1]
    if where == "inside a chunk":
        cut, complete = last.chunk_start_offset + last.chunk_length // 2, chunks[-2]
    elif where == "inside a message index":
        cut, complete = last.chunk_start_offset + last.chunk_length + 20, last
    else:
        cut, complete = len(data) - 40, last
    cut_path = tmp_path / "cut.mcap"
    cut_path.write_bytes(data[:cut])
    with pytest.warns(IncompleteLogWarning):
        arrays, _, meta, summary = read_log(cut_path)
    n = len(arrays["t"])
    assert n == round(complete.message_end_time / 1e6) + 1  # t = k ms
    assert same_bits(stacked(arrays, [("t", 1), ("x", 3)]), expected_rows(n))
    assert meta == {"run": "chunked"}
    # the summary metadata comes after the last chunk, before the summary section
    assert ("telemetry" in summary) == (where == "inside the summary")


@pytest.mark.system
def test_a_failing_disk_is_reported_by_close(tmp_path):
    """A file size limit stops the writer thread's writes: close names the cause."""
    body = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
put(5000)
try:
    tel.close()
except Exception as exc:
    print(type(exc).__name__, exc)
"""
    proc = child(["-c", WRITER.format(body=body), tmp_path / "run.mcap"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("TelemetryError")
    assert "File too large" in proc.stdout and "run.mcap" in proc.stdout
    assert issubclass(TelemetryError, RuntimeError)


# -- the file is standard MCAP ---------------------------------------------------------

def test_the_mcap_library_reads_the_file_and_decodes_ticks_as_ros1(tmp_path, rng):
    path = tmp_path / "run.mcap"
    rows = odd_rows(500, 7, rng)
    rows[:, 1:] = rng.standard_normal((500, 6))  # comparable with ==
    tel = Telemetry(path, GROUPS, {"run": 1})
    run_loop(tel, rows, {5: ("fault", {"name": "jam"})})
    tel.close()
    with open(path, "rb") as stream:
        reader = make_reader(stream, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        assert summary.statistics.message_count == 501
        assert {c.topic: c.message_encoding for c in summary.channels.values()} == \
            {"/hil/tick": "ros1", "/hil/event": "json"}
        assert {s.name: s.encoding for s in summary.schemas.values()} == \
            {"hilrig/Tick": "ros1msg", "hilrig/Event": "jsonschema"}
        ticks = list(reader.iter_decoded_messages(topics=["/hil/tick"]))
        assert [m.message.log_time for m in ticks] == [k * 1_000_000 for k in range(500)]
        for k in (0, 1, 499):
            decoded = ticks[k].decoded_message
            assert decoded.t == rows[k, 0]
            assert list(decoded.q) == list(rows[k, 1:4])
            assert list(decoded.u) == list(rows[k, 4:6])
            assert decoded.lateness == rows[k, 6]
            assert ticks[k].message.data == rows[k].tobytes()
        (event,) = reader.iter_messages(topics=["/hil/event"])
        assert json.loads(event[2].data) == {"kind": "fault", "name": "jam", "t": 0.005}
        assert {m.name for m in reader.iter_metadata()} == {"meta", "summary"}
    with open(path, "rb") as stream:  # every record, CRCs checked, ends with the footer
        records = list(StreamReader(stream, validate_crcs=True).records)
    assert isinstance(records[-1], Footer)


def test_schema_text_is_ros1_with_scalars_and_fixed_arrays():
    assert telemetry.schema_text(GROUPS) == \
        "float64 t\nfloat64[3] q\nfloat64[2] u\nfloat64 lateness\n"


# -- export and plot -------------------------------------------------------------------

def log_of_a_sim_run(tmp_path, config: str, *sim_args) -> tuple[Path, Path]:
    """``hil sim`` of a config, and a telemetry log of the same rows with timing and jams."""
    npz, log = tmp_path / "sim.npz", tmp_path / "run.mcap"
    assert main(["sim", str(CONFIGS / config), *sim_args, "--out", str(npz)]) == 0
    with np.load(npz) as data:
        sim = {name: data[name] for name in data.files}
    cfg = json.loads(sim["meta"].item())
    n = len(sim["t"])
    groups = run_groups(plant_model(cfg["plant"]["model"]).diagnostics, sim["q"].shape[1],
                        sim["u"].shape[1], cfg["plant"]["drive"])
    timing = {name: np.arange(n) * (j + 1) * 1e-6 for j, name in enumerate(TIMING)}
    rows = np.column_stack([{**sim, **timing}[name].reshape(n, -1) for name, _ in groups])
    jams = {round(t1 / cfg["sim"]["dt"]): ("jam", {"joint": int(j), "t1": t1, "t2": t2})
            for j, t1, t2 in sim["jam_events"]}
    tel = Telemetry(log, groups, cfg)
    run_loop(tel, rows, {**jams, 7: ("overrun", {"tick": 7})})
    tel.close()
    return npz, log


@pytest.mark.parametrize("config, sim_args", [
    ("serial3_jam1.toml", ["--duration", "2.5"]),
    ("rrr3_forward.toml", ["--duration", "0.2"]),
])
def test_export_writes_the_npz_of_hil_sim_plus_the_timing_arrays(tmp_path, config, sim_args):
    npz, log = log_of_a_sim_run(tmp_path, config, *sim_args)
    out = tmp_path / "exported" / "run.npz"
    assert main(["log", "export", str(log), "--out", str(out)]) == 0
    with np.load(npz) as a, np.load(out) as b:
        assert set(b.files) == set(a.files) | set(TIMING)
        for name in a.files:
            assert b[name].dtype == a[name].dtype, name
            if name == "meta":  # the config as JSON, the same string
                assert b[name].item() == a[name].item()
            else:
                assert same_bits(b[name], a[name]), name
        assert b["tick"].shape == (len(a["t"]),)
    if config.startswith("serial3_jam1"):
        with np.load(out) as b:
            np.testing.assert_allclose(b["jam_events"], [[1, 2.0, 2.1]], atol=1e-12)


@pytest.mark.slow
def test_plot_draws_a_png(tmp_path, capsys):
    _, log = log_of_a_sim_run(tmp_path, "serial3_jam2.toml", "--duration", "1")
    capsys.readouterr()
    assert main(["plot", str(log)]) == 0
    png = log.with_suffix(".png")
    assert str(png) in capsys.readouterr().out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    out = tmp_path / "figs" / "x.png"
    assert main(["plot", str(log), "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


# -- errors ----------------------------------------------------------------------------

def test_missing_file_exits_2(tmp_path, capsys):
    for argv in (["log", "export", str(tmp_path / "nope.mcap"), "--out", str(tmp_path / "a.npz")],
                 ["plot", str(tmp_path / "nope.mcap")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "nope.mcap: not found" in err
    assert not (tmp_path / "a.npz").exists()


def test_not_an_mcap_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "run.mcap"
    bad.write_bytes(b"PK\x03\x04 this is a zip, not a log")
    assert main(["plot", str(bad)]) == 2
    assert "not an MCAP file" in capsys.readouterr().err
    with pytest.raises(LogError, match="not an MCAP file"):
        read_log(bad)


def test_an_mcap_file_of_something_else_exits_2(tmp_path, capsys):
    other = tmp_path / "other.mcap"
    with open(other, "wb") as stream:
        writer = Writer(stream)
        writer.start()
        channel = writer.register_channel("/camera", "json", 0)
        writer.add_message(channel, 0, b"{}", 0)
        writer.finish()
    assert main(["log", "export", str(other), "--out", str(tmp_path / "a.npz")]) == 2
    assert "not a hilrig telemetry log" in capsys.readouterr().err


@pytest.mark.system
def test_subprocess_export_of_a_cut_log_warns_and_exits_0(tmp_path, chunked_log):
    path, chunks = chunked_log
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(path.read_bytes()[:chunks[2].chunk_start_offset + 30])
    out = tmp_path / "cut.npz"
    proc = child(["-m", "hilrig.cli", "log", "export", cut, "--out", out])
    assert proc.returncode == 0, proc.stderr
    assert "hil: warning:" in proc.stderr and "ends early" in proc.stderr
    assert "Traceback" not in proc.stderr
    with np.load(out) as data:
        n = round(chunks[1].message_end_time / 1e6) + 1
        assert same_bits(np.column_stack([data["t"], data["x"]]), expected_rows(n))
        assert data["jam_events"].shape == (0, 3)
