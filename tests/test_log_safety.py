"""A full disk is found at once (issue 11, item 6) and a killed run's log opens with the
standard reader (item 9): ``hil log repair``, events in log-time order."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import warnings

import numpy as np
import pytest
from hilrig.telemetry.logfile import IncompleteLogWarning, read_log
from hilrig.telemetry.recorder import EVENT_TOPIC, TICK_TOPIC, Telemetry
from mcap.reader import make_reader

from rt_helpers import ROOT, SHARED_CPU, hil, stderr_lines, read_complete


def _read_anyway(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = read_log(path)
    return out, [w for w in caught if issubclass(w.category, IncompleteLogWarning)]


@pytest.fixture
def small_disk(tmp_path):
    """A 160 KiB tmpfs (root only): a log fills it within about a second of a run."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(where)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.system
def test_a_full_disk_stops_the_run_within_a_second_with_one_line(small_disk):
    """The log filling its disk went unnoticed until the end, then a traceback and no
    summary. Now: one line naming the cause, the run stops safely within a second of the
    write error, the summary is printed, and what was written reads back."""
    log = small_disk / "run.mcap"
    started = time.monotonic()
    proc = subprocess.run(hil("run", "serial3_free", "--duration", "20", "--no-plot",
                              "--log", str(log)),      # as shipped: its stop is timed below
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    lines = stderr_lines(proc.stderr)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1 and "No space left on device" in lines[0], proc.stderr
    assert lines[0].startswith(f"hil: telemetry log {log}: writing failed")
    assert "lateness" in proc.stdout and "(incomplete: writing it failed)" in proc.stdout
    ticks = int(re.search(r"(\d+) ticks at", proc.stdout)[1])
    (arrays, _, _, _), incomplete = _read_anyway(log)
    rows = len(arrays["t"])
    assert incomplete and rows > 100
    np.testing.assert_array_equal(arrays["tick"], np.arange(rows))
    # the writer drains every 0.5 s at most: the loop stopped within a second of the
    # failed write (1 kHz: fewer than 1500 ticks after the last rows that were written)
    assert ticks - rows < 1500, (ticks, rows)
    assert ticks < 20000 and took < 60


@pytest.mark.system
def test_a_full_disk_goes_on_unlogged_only_when_asked(small_disk):
    log = small_disk / "run.mcap"
    proc = subprocess.run(hil("run", "serial3_free", "--duration", "4", "--no-plot",
                              "--log", str(log), "--log-errors", "continue", *SHARED_CPU),
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = stderr_lines(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    assert len(lines) == 1 and "No space left on device" in lines[0] \
        and "goes on unlogged" in lines[0], proc.stderr
    assert "4001 ticks at 1000 Hz" in proc.stdout and "ended: done" in proc.stdout


def test_events_are_written_in_log_time_order():
    """An event that reaches the telemetry after later rows (the in-process loop's
    events go through its supervisor) was written after them; rows now wait for
    ``released`` and events go among the rows of their time."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "order.mcap")
        tel = Telemetry(path, [("t", 1), ("x", 1)], {}, period=0.001)
        tel.released[0] = 0
        for k in range(600):
            tel.ring[k] = (k * 1e-3, k)
            tel.head[0] = k + 1
        time.sleep(0.05)                         # the writer would have drained by now
        tel.event("overrun", t=0.1005, tick=100)  # comes late, between rows 100 and 101
        tel.event("late", t=0.3, tick=300)
        tel.released[0] = 600
        time.sleep(0.05)
        tel.close({})
        with open(path, "rb") as stream:
            reader = make_reader(stream)
            stamps = [(channel.topic, message.log_time) for _, channel, message in
                      reader.iter_messages(log_time_order=False)]
    times = [stamp for _, stamp in stamps]
    assert times == sorted(times)
    topics = [topic for topic, _ in stamps]
    assert topics.count(EVENT_TOPIC) == 2 and topics.count(TICK_TOPIC) == 600
    assert topics.index(EVENT_TOPIC) == 101      # after rows 0..100


@pytest.mark.system
def test_a_killed_run_is_repaired_into_a_log_the_standard_reader_opens(tmp_path):
    """SIGKILL a real hil run mid-run: mcap's make_reader reads none of it; hil log repair
    writes a finished MCAP whose messages make_reader reads in log-time order, as many
    ticks as were written; export and plot of the cut log say it ends early."""
    log = tmp_path / "killed.mcap"
    proc = subprocess.Popen(hil("run", "serial3_jam1", "--duration", "30", "--no-plot",
                                "--log", str(log), *SHARED_CPU),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while (not log.exists() or log.stat().st_size < 60_000) and time.monotonic() < deadline:
            time.sleep(0.05)
            assert proc.poll() is None, proc.stderr.read()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    with open(log, "rb") as stream:
        try:
            original = sum(1 for _ in make_reader(stream).iter_messages())
        except Exception:   # noqa: BLE001 -- the standard reader gives up on a cut file
            original = 0
    assert original == 0
    (arrays, _, _, _), incomplete = _read_anyway(log)
    written = len(arrays["t"])
    assert incomplete and written > 200

    out = tmp_path / "fixed.mcap"
    repaired = subprocess.run(hil("log", "repair", str(log), "--out", str(out)),
                              capture_output=True, text=True, timeout=120)
    assert repaired.returncode == 0, repaired.stderr
    assert f"wrote {out}: {written} ticks" in repaired.stdout
    with open(out, "rb") as stream:
        reader = make_reader(stream)
        assert reader.get_summary().statistics.channel_message_counts
        messages = [(channel.topic, message.log_time, message.data)
                    for _, channel, message in reader.iter_messages(log_time_order=False)]
    times = [stamp for _, stamp, _ in messages]
    assert times == sorted(times)
    ticks = np.array([np.frombuffer(data, "<f8") for topic, _, data in messages
                      if topic == TICK_TOPIC])
    assert len(ticks) == written
    np.testing.assert_array_equal(ticks, np.column_stack(
        [arrays[name] for name in arrays]))          # every row, bit for bit
    assert read_complete(out)[0]["t"].shape == (written,)

    for argv in (["log", "export", str(log), "--out", str(tmp_path / "x.npz")],
                 ["plot", str(log), "--out", str(tmp_path / "x.png")]):
        proc = subprocess.run(hil(*argv), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "the log ends early" in proc.stderr and "Traceback" not in proc.stderr


def _small_log(path) -> int:
    """A finished 300-row log of the telemetry writer; returns its row count."""
    tel = Telemetry(str(path), [("t", 1), ("x", 1)], {}, period=0.001)
    for k in range(300):
        tel.ring[k] = (k * 1e-3, k)
        tel.head[0] = k + 1
    tel.released[0] = 300
    tel.close({})
    return 300


def _bomb(path, declared: int, zeros: int) -> None:
    """An MCAP file whose one chunk holds ``zeros`` zero bytes zstd-compressed (a few kB)
    and declares ``declared`` bytes uncompressed."""
    import zstandard
    from mcap.records import Chunk, Header
    from mcap.data_stream import RecordBuilder

    compressor = zstandard.ZstdCompressor(level=1)
    data = compressor.compress(b"\0" * zeros)
    builder = RecordBuilder()
    Header(profile="", library="bomb").write(builder)
    Chunk(compression="zstd", data=data, message_start_time=0, message_end_time=0,
          uncompressed_crc=0, uncompressed_size=declared).write(builder)
    path.write_bytes(b"\x89MCAP0\r\n" + builder.end())


@pytest.mark.parametrize("declared, zeros", [(2 ** 40, 64 << 20), (64 << 20, 256 << 20)])
def test_repair_of_a_compression_bomb_is_bounded(tmp_path, declared, zeros):
    """A few kB that declare (or hold) far more uncompressed than any hilrig chunk: the
    repair stops there with the reason, in bounded time and memory, and writes a finished
    empty log (a 49 kB bomb used to run past 600 s)."""
    from hilrig.telemetry.repair import repair

    bomb = tmp_path / "bomb.mcap"
    _bomb(bomb, declared, zeros)
    assert bomb.stat().st_size < 100_000
    started = time.process_time()
    report = repair(bomb, tmp_path / "out.mcap")
    assert time.process_time() - started < 30        # CPU seconds: immune to a busy host
    assert report.messages == 0 and not report.finished
    assert "uncompressed" in report.cause or "ZstdError" in report.cause, report.cause
    with open(tmp_path / "out.mcap", "rb") as stream:
        assert make_reader(stream).get_summary() is not None


@pytest.mark.system
def test_repair_never_writes_through_a_link_to_its_source_and_passes_the_doctor(tmp_path):
    """--out a hard link of the source is refused (it used to overwrite the source); a
    repaired log is a valid MCAP in 64 kB chunks, with no summary offset pointing at an
    empty group (the MCAP doctor's SUMMARY_OFFSET_WITHOUT_GROUP)."""
    from hilrig.telemetry.logfile import LogError
    from hilrig.telemetry.repair import repair

    source = tmp_path / "run.mcap"
    rows = _small_log(source)
    before = source.read_bytes()
    link = tmp_path / "link.mcap"
    os.link(source, link)
    with pytest.raises(LogError, match="must go to another file than its source"):
        repair(source, link)
    assert source.read_bytes() == before
    out = tmp_path / "fixed.mcap"
    assert repair(source, out).ticks == rows
    assert not (tmp_path / "fixed.mcap.partial").exists()
    with open(out, "rb") as stream:
        summary = make_reader(stream).get_summary()
    groups = {record.group_opcode for record in summary.summary_offsets.values()} \
        if hasattr(summary, "summary_offsets") else set()
    assert 0x0A not in groups                            # no ATTACHMENT_INDEX offset
    assert read_complete(out)[0]["x"].tolist() == list(range(rows))
    doctor = subprocess.run([_program("pymcap-cli"), "doctor", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 0 and "SUMMARY_OFFSET_WITHOUT_GROUP" not in doctor.stdout, \
        doctor.stdout


def _program(name: str) -> str:
    """A test dependency's command: beside this interpreter (its venv), else on PATH."""
    import shutil
    import sys
    from pathlib import Path

    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)
