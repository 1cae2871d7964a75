"""Live faults into a running `hil run` (issue 28, item 6): `hil fault --run RUN_ID` (or a
bare `hil fault` that finds your only run) reaches the run through its own `hil set`
endpoint, the loop takes the fault at a tick boundary and the answer names that tick;
what the run cannot take is refused with one line, and the run goes on."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hilrig.live.params import LiveParameters
from hilrig.live.tuning import TuningError, TuningServer, send_request

from rt_helpers import ROOT, SHARED_CPU, hil, read_complete
from test_live import finish


def serve(tmp_path) -> tuple[TuningServer, str]:
    endpoint = f"ipc:///tmp/hil-fault-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    return TuningServer(endpoint, LiveParameters()), endpoint


class Controller:
    """What a `hil control` run offers its hooks: no request_fault (its plant is behind
    a link)."""


@pytest.mark.parametrize("fault, error", [
    ({"kind": "break", "joint": 1}, "fault: unknown kind 'break' (one of jam, clear, "),
    ({"kind": "jam", "joint": "2"}, "fault: joint must be an integer (1-based)"),
    ({"kind": "jam", "joint": True}, "fault: joint must be an integer (1-based)"),
    ({"kind": "jam", "joint": 2, "duration": "inf"},
     "fault: duration must be a number of seconds"),
    ({"kind": "sensor_bias", "joint": 2, "params": {"bias": "1"}},
     "fault: params must map names to numbers"),
    ([1, 2], 'expected {"fault": {"kind": KIND'),
])
def test_a_malformed_fault_request_is_refused_with_its_reason(tmp_path, fault, error):
    server, endpoint = serve(tmp_path)
    try:
        with pytest.raises(TuningError, match=re.escape(error)):
            send_request(endpoint, {"fault": fault}, timeout=10.0)
        # the serving thread lives on
        with pytest.raises(TuningError, match="the run's loop is not running"):
            send_request(endpoint, {"fault": {"kind": "jam", "joint": 1}}, timeout=10.0)
    finally:
        server.stop()


def test_a_run_behind_a_link_takes_no_faults(tmp_path):
    """`hil control`'s plant is the emulator's: the refusal says where faults go."""
    server, endpoint = serve(tmp_path)
    try:
        server.start(Controller())
        with pytest.raises(TuningError, match=r"behind a link \(`hil control`\): hil fault "
                                              r"reaches its emulator, --connect ENDPOINT"):
            send_request(endpoint, {"fault": {"kind": "jam", "joint": 1, "duration": 0.1}},
                         timeout=10.0)
    finally:
        server.stop()


def fault(*argv: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(hil("fault", *argv), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.system
def test_hil_fault_jams_a_joint_of_a_running_hil_run_at_the_tick_it_names(tmp_path):
    """A jam sent to a `hil run` by its run id: the answer's tick is the log's jam event,
    and from it the joint's rate falls linearly to zero over the jamming phase (paper
    000's jam law), then stays zero. A joint the arm lacks, and a bare `hil fault` while
    no emulator serves the default endpoint, reach the same run (the only one)."""
    runtime = Path(tempfile.mkdtemp(prefix="hfault-", dir="/tmp"))
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime))
    log = tmp_path / "run.mcap"
    proc = subprocess.Popen(hil("run", "serial3_free", "--duration", "600", "--log", str(log),
                                "--no-plot", *SHARED_CPU),
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        match = re.match(r"run ([0-9a-f]{6}): .*`hil fault jam --run \1 --joint K` jams a "
                         r"joint", line)
        assert match, line + (proc.stderr.read() if proc.poll() is not None else "")
        run_id = match.group(1)
        deadline = time.monotonic() + 180          # until its loop runs (kernels loaded)
        while True:
            jam = fault("jam", "--run", run_id, "--joint", "2", "--duration", "0.1", env=env)
            if jam.returncode == 0 or "not running" not in jam.stderr \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert jam.returncode == 0, jam.stderr
        found = re.fullmatch(r"joint 2 jammed at tick (\d+) \(plant time ([\d.]+) s\)\n",
                             jam.stdout)
        assert found, jam.stdout
        tick = int(found.group(1))
        assert float(found.group(2)) == pytest.approx(tick * 1e-3, abs=1e-9)
        # a joint the arm lacks: one line naming it, and the run goes on
        wrong = fault("jam", "--joint", "7", env=env)
        assert wrong.returncode == 1
        assert wrong.stderr.strip().splitlines()[-1] == (
            "hil: refused: fault on joint 7: joint must be 1..3, got 7")
        # a bare `hil fault` (no emulator at the default endpoint): the only run; its jam
        # was cleared at a later tick
        deadline = time.monotonic() + 60
        while True:
            clear = fault("clear", "--joint", "2", env=env)
            if clear.returncode == 0 or time.monotonic() > deadline:
                break
        assert clear.returncode == 0, clear.stderr
        cleared = int(re.fullmatch(r"joint 2 cleared at tick (\d+) .*\n", clear.stdout).group(1))
        assert cleared > tick + 100
    finally:
        finish(proc, interrupt=True)
    arrays, events, _, _ = read_complete(log)
    jams = [e for e in events if e["kind"] == "jam"]
    assert len(jams) == 1 and jams[0]["tick"] == tick and jams[0]["live"] is True
    assert [e["tick"] for e in events if e["kind"] == "clear"] == [cleared]
    qd2 = arrays["qd"][:, 1]
    rows = np.arange(len(qd2))
    during = (rows > tick) & (rows <= tick + 100)
    expected = qd2[tick] * (1 - (rows[during] - tick) / 100.0)
    np.testing.assert_allclose(qd2[during], expected, atol=1e-9 + 1e-9 * abs(qd2[tick]))
    assert np.all(qd2[tick + 100:cleared + 1] == 0.0)
