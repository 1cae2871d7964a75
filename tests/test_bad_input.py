"""Every bad command line is one clear line on stderr and a non-zero exit, never a
traceback or a hang (issue 11, item 7): each row runs the real ``hil`` as a subprocess."""
from __future__ import annotations

import os
import signal
import subprocess
import time
import warnings

import pytest
from hilrig.telemetry.logfile import IncompleteLogWarning, read_log

from rt_helpers import ROOT, hil, stderr_lines

RUN = ("run", "serial3_free", "--duration", "0.05", "--no-plot")


def _cases(tmp):
    """(id, argv, what the one line must name)."""
    log = str(tmp / "run.mcap")
    return [
        ("rate-zero", [*RUN, "--rate", "0", "--log", log], "--rate"),
        ("rate-nan", [*RUN, "--rate", "nan", "--log", log], "--rate"),
        ("rate-huge", [*RUN[:2], "--rate", "1e9", "--no-plot", "--log", log], "sim.dt"),
        ("duration-huge", [*RUN[:2], "--duration", "1e12", "--no-plot", "--log", log],
         "sim.duration"),
        ("dt-tiny", [*RUN, "--set", "sim.dt=1e-300", "--log", log], "sim.dt"),
        ("fault-timeout-negative", ["fault", "jam", "--joint", "1", "--timeout", "-1",
                                    "--connect", "ipc:///tmp/hil-test-nobody"], "--timeout"),
        ("fault-timeout-nan", ["fault", "clear", "--joint", "1", "--timeout", "nan",
                               "--connect", "ipc:///tmp/hil-test-nobody"], "--timeout"),
        ("estop-timeout-negative", ["estop", "--timeout", "-1",
                                    "--connect", "ipc:///tmp/hil-test-nobody"], "--timeout"),
        ("estop-timeout-nan", ["estop", "--timeout", "nan"], "--timeout"),
        ("log-in-proc", [*RUN, "--log", "/proc/hilrig-nowhere/run.mcap"],
         "/proc/hilrig-nowhere/run.mcap"),
        ("log-dev-full", [*RUN, "--log", "/dev/full"], "No space left on device"),
        ("log-is-directory", [*RUN, "--log", str(tmp)], "is a folder"),
    ]


CASES = [case[0] for case in _cases(ROOT)]


@pytest.mark.system
@pytest.mark.parametrize("name", CASES)
def test_bad_command_line_is_one_line(name, tmp_path):
    _, argv, cause = next(case for case in _cases(tmp_path) if case[0] == name)
    started = time.monotonic()
    proc = subprocess.run(hil(*argv), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = stderr_lines(proc.stderr)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert cause in lines[0] and lines[0].startswith("hil:"), lines[0]
    assert time.monotonic() - started < 60.0


@pytest.mark.system
def test_ctrl_c_during_warm_up_is_one_line_and_a_finished_log(tmp_path):
    """SIGINT as soon as the log file exists (its header being written, or the run building
    or warming up its kernels; a Ctrl-C while the header is written is taken once it is):
    exit code 130, one line, no traceback, and a finished log that says why it ended."""
    log = tmp_path / "run.mcap"
    proc = subprocess.Popen(hil("run", "serial3_free", "--duration", "5", "--no-plot",
                                "--log", str(log)),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while not log.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err, err
    assert len(stderr_lines(err)) <= 1, err
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteLogWarning)     # the log is finished
        arrays, events, _, summary = read_log(log)
    assert summary["reason"].startswith("interrupted"), summary
    assert os.path.getsize(log) > 0
