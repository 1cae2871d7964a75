"""`hil run`'s loop compiled in a second process while the first sets up (rt.loop_ahead).

The runs start on a copy of the warm kernel cache without the loop (rt.realtime.run_loop),
its fault-table kernels (which the first process compiles while the second compiles the
loop: rt.realtime.fault_parts) and the kernel of the derived diagnostics
(telemetry.derived._fill): the first process compiles the latter two, and its first
compilation starts the second, which compiles the loop; what the first process then
loads must be the loop it would have compiled itself: the run's log bit for bit as on
the whole cache, and no kernel compiled by both processes. A run that compiles nothing
starts no second process."""
import fcntl
import os
import shutil
import signal
import subprocess
import sys

import numba
import numpy as np
import pytest
from numba.core import sigutils
from hilrig.jit import compilation
from hilrig.jit.kernel import Kernel
from hilrig.plant.integrators import split_step
from hilrig.rt import realtime as rtk
from hilrig.rt.loop_ahead import LABEL, LoopAhead
from hilrig.rt.session import Session
from hilrig.settings.config import load
from hilrig.rt.tick import plant_arrays
from hilrig.telemetry.logfile import read_log
from hilrig.timing.pacing import deadline_ns
from rt_helpers import ROOT, hil, wait_for

# one config of each plant family the real-time loop compiles for
FAMILIES = ("rrr3_pd", "serial3_free", "chain_drop_ss_rt", "flex_rp_rt", "ur5_pd", "panda_pd")


@pytest.fixture(scope="module", autouse=True)
def warm_loop(tmp_path_factory):
    """rrr3_pd's fast and paced loops in this fingerprint's cache (CI's warm-up has put
    them there: then this loads them; a developer's first run of this file compiles them)."""
    scratch = tmp_path_factory.mktemp("warm")
    for fast in (["--fast"], []):
        subprocess.run(hil("run", "rrr3_pd", *fast, "--duration", "0.01", "--no-plot", "--log",
                           str(scratch / "run.mcap"), "--set", "loop.fifo_priority=0"),
                       cwd=scratch, check=True, capture_output=True, timeout=900)


FAULT_PARTS = ("hilrig.rt.realtime._scheduled_faults", "hilrig.rt.realtime._serve_request")


def _cache_without_the_loop(tmp_path):
    """A copy of this fingerprint's cache (HILRIG_CACHE_DIR=returned root) without any
    specialisation of run_loop, of its fault-table kernels (FAULT_PARTS) nor of the
    diagnostics' kernel; and the path of run_loop's index in it (its ``.lock`` beside is
    what a process saving a run_loop specialisation takes: jit.compilation)."""
    source = compilation.cache_dir()
    root = tmp_path / "cache"
    copy = root / source.name
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.lock", "*.tmp", "*.claim"))
    loop = sorted((copy / "rt").glob("realtime.run_loop-*"))
    faults = [path for name in FAULT_PARTS
              for path in (copy / "rt").glob(name.removeprefix("hilrig.rt.") + "-*")]
    diagnostics = sorted((copy / "telemetry").glob("derived._fill-*"))
    assert loop and faults and diagnostics, f"no run_loop, fault kernels or _fill in {source}"
    for path in loop + faults + diagnostics:
        path.unlink()
    return root, next(p for p in loop if p.suffix == ".nbi")


def _env(root):
    return dict(os.environ, HILRIG_CACHE_DIR=str(root))


def _fast_run(tmp_path, root, log):
    return subprocess.run(hil("run", "rrr3_pd", "--fast", "--duration", "0.5", "--no-plot",
                              "--log", str(log)),
                          cwd=tmp_path, env=_env(root), capture_output=True, text=True,
                          timeout=900)


@pytest.mark.system
def test_the_loop_compiled_in_the_second_process_runs_as_the_loop_compiled_in_the_first(
        tmp_path):
    root, _ = _cache_without_the_loop(tmp_path)
    ahead = _fast_run(tmp_path, root, tmp_path / "ahead.mcap")
    assert ahead.returncode == 0, ahead.stderr[-3000:]
    compiled = [line for line in ahead.stderr.splitlines() if line.startswith("hilrig: compiled")]
    theirs = [line.split()[3] for line in compiled if line.endswith(f"[{LABEL}]")]
    ours = [line.split()[3] for line in compiled if not line.endswith(f"[{LABEL}]")]
    assert "hilrig.rt.realtime.run_loop" in theirs, ahead.stderr
    assert "hilrig.telemetry.derived._fill" in ours, ahead.stderr
    # the fault kernels by one of them (the first, unless the second needed them sooner)
    assert set(ours) <= {"hilrig.telemetry.derived._fill", *FAULT_PARTS}, ahead.stderr
    assert set(FAULT_PARTS) <= set(ours + theirs), ahead.stderr
    assert not set(ours) & set(theirs), ahead.stderr
    # the same run on the whole cache (no second process: it holds a loop)
    whole = _fast_run(tmp_path, root, tmp_path / "whole.mcap")
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert LABEL not in whole.stderr and "hilrig: compiled" not in whole.stderr
    a, b = read_log(tmp_path / "ahead.mcap")[0], read_log(tmp_path / "whole.mcap")[0]
    assert len(a["t"]) == 501 and set(a) == set(b)
    for name in set(a) - {"lateness", "compute_read", "compute_control", "compute_write",
                          "compute_tick"}:     # the timings differ from run to run
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.system
def test_ctrl_c_while_the_first_process_waits_ends_both(tmp_path):
    root, index = _cache_without_the_loop(tmp_path)
    # the second process cannot save its loop while this lock is held: it is still running
    # when the first one has set up and waits for it
    with open(str(index) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        run = subprocess.Popen(hil("run", "rrr3_pd", "--no-plot", "--log",
                                   str(tmp_path / "run.mcap"), "--set", "loop.fifo_priority=0"),
                               cwd=tmp_path, env=_env(root), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            line = ""
            while "hilrig: waiting for" not in line:
                line = run.stderr.readline()
                assert line, run.stderr.read()
            pid = int(line.rsplit("pid ", 1)[1].rstrip(")\n"))
            assert _alive(pid)
            run.send_signal(signal.SIGINT)
            out, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
    assert "ended: interrupted during warm-up" in out, out + err
    wait_for(lambda: not _alive(pid), 30, "the second process to end")
    assert read_log(tmp_path / "run.mcap")[3]["reason"] == "interrupted during warm-up"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.system
def test_the_second_process_starts_at_the_first_kernel_compiled_and_not_after_the_warm_up(
        tmp_path):
    cfg = load("rrr3_pd")
    ahead = LoopAhead(cfg, fast=True)
    try:
        session = Session(cfg, tmp_path / "run.mcap", fast=True)   # loads every kernel
        session.telemetry.close({})
        assert ahead.process is None
        # a hilrig kernel compiled afresh (a dispatcher of its own, without a cache)
        assert numba.njit(deadline_ns.py_func)(1, 2, 3) == 7
        assert ahead.process is not None
    finally:
        ahead.stop()
    process = ahead.process
    assert process.poll() is not None
    assert numba.njit(deadline_ns.py_func)(1.0, 2.0, 3.0) == 7.0
    assert ahead.process is process and ahead._on_compile not in compilation.progress.on_compile


@pytest.mark.system
def test_a_second_process_that_cannot_compile_says_why_in_one_line():
    done = subprocess.run([sys.executable, "-m", "hilrig.rt.loop_ahead", str(os.getpid())],
                          input="{not json", capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"hilrig: {LABEL}: not compiled (JSONDecodeError: ")
    assert lines[0].endswith("the run compiles it itself")


@pytest.mark.parametrize("name", FAMILIES)
def test_the_loop_only_session_gives_the_loop_the_types_of_the_whole_session(name, tmp_path):
    """What the second process compiles (Session.compile_loop of a loop_only session: no
    correction of the initial state, no diagnostics, a placeholder law) is the
    specialisation the run's warm-up dispatches to: the same argument types."""
    cfg = load(name, ["loop.fifo_priority=0"])
    types = []
    for loop_only in (False, True):
        session = Session(cfg, tmp_path / f"{loop_only}.mcap", loop_only=loop_only)
        try:
            types.append([[kernel.typeof_pyval(a) for a in arguments]
                          for kernel, arguments in session._warm_up_kernels()])
        finally:
            session.telemetry.close({})
    assert types[0] == types[1]


def _fresh(kernel):
    """A copy of ``kernel`` without a cache: compiling it types its code afresh."""
    return Kernel(py_func=kernel.py_func, locals={}, targetoptions=dict(kernel.targetoptions))


@pytest.mark.slow
def test_the_parts_the_first_process_compiles_are_what_the_loop_calls(tmp_path, monkeypatch):
    """What a run's first process compiles while the second compiles the loop
    (Session._compile_beside_ahead: rt.tick.control_parts, the generic integrators of
    plant.integrators.split_step_parts, rt.realtime.fault_parts) are the specialisations
    the loop's typing asks for: typed afresh (copies of run_loop and split_step without a
    cache), the loop asks for each part's kernel with the part's argument types only. A
    part of other types would be compiled for nothing, and the loop's would still be
    compiled in the second process. (The 3RRR's loop: a step with the generic integrators
    as the fused step's fallback, a correction worker, a law through a pointer.)"""
    asked = []
    compile_kernel = Kernel.compile

    def recording(self, sig):
        asked.append((self, tuple(sigutils.normalize_signature(sig)[0])))
        return compile_kernel(self, sig)

    session = Session(load("rrr3_pd", ["loop.fifo_priority=0"]), tmp_path / "run.mcap")
    try:
        arrays = plant_arrays(session.plant)
        parts = session._tick_parts(arrays) + rtk.fault_parts(
            arrays, session.schedule, rtk.Supervision(session.mail, session.events,
                                                      session.timings, session.request),
            session.h)
        loop_arguments = session._warm_up_kernels()[0][1]
        monkeypatch.setattr(Kernel, "compile", recording)
        loop = _fresh(rtk.run_loop)
        loop.compile(tuple(loop.typeof_pyval(a) for a in loop_arguments))
        for signature in {args for kernel, args in asked if kernel is split_step}:
            _fresh(split_step).compile(signature)
    finally:
        session.telemetry.close({})
    for kernel, arguments in parts:
        wanted = {args for k, args in asked if k is kernel}
        assert wanted == {tuple(kernel.typeof_pyval(a) for a in arguments)}, \
            compilation.kernel_name(kernel)
