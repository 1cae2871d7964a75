"""The user's own controller, as examples/ shows it: a compiled law in the user's file run
by `hil sim` and `hil run`, a plain Python law run by `hil control` against `hil emulate`,
and a user's own loop through hilrig.connect; and the one-line errors of a wrong law."""
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hilrig.controllers.interface import compile_law
from hilrig.errors import ConfigError
from rt_helpers import ROOT, endpoint, hil, read_complete

USER_LAW = ROOT / "examples" / "user_controller"
PYTHON_LAW = ROOT / "examples" / "python_controller"


def run(args, cwd, timeout=300):
    return subprocess.run(hil(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def emulator(config: Path, where: str):
    """`hil emulate CONFIG` in lockstep at ``where``, stopped (Ctrl-C) on exit."""
    proc = subprocess.Popen(hil("emulate", str(config), "--bind", where, "--mode", "lockstep"),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = proc.stdout.readline()
        assert banner.startswith("emulating"), banner + proc.stderr.read()
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@pytest.mark.system
def test_users_compiled_pd_equals_the_builtin_pd_bit_for_bit(tmp_path):
    """The user's PD (examples/user_controller/my_laws.py) with the built-in PD's gains
    gives the built-in PD's trajectory exactly: both enter the loop the same way."""
    mine, builtin = tmp_path / "mine.npz", tmp_path / "builtin.npz"
    for args, cwd in ((["sim", "rrr3_my_pd.toml", "--duration", "1", "--out", mine], USER_LAW),
                      (["sim", "configs/rrr3_pd.toml", "--duration", "1", "--out", builtin],
                       ROOT)):
        proc = run([str(a) for a in args], cwd)
        assert proc.returncode == 0, proc.stderr
    a, b = np.load(mine), np.load(builtin)
    assert len(a["t"]) == 1001
    assert np.array_equal(a["q"], b["q"]) and np.array_equal(a["u"], b["u"])
    assert np.abs(a["q"][-1, :3] - [0.4, 0.8, 1.0]).max() < 0.25   # on its way (at 2.5 s)


@pytest.mark.system
def test_users_compiled_law_runs_in_the_real_time_loop_as_in_hil_sim(tmp_path):
    """`hil run --fast` runs the user's law in the compiled real-time loop; its log equals
    `hil sim` of the same config row for row."""
    log, out = tmp_path / "run.mcap", tmp_path / "sim.npz"
    proc = run(["run", "rrr3_my_pd.toml", "--fast", "--duration", "0.5", "--log", str(log),
                "--no-plot"], USER_LAW)
    assert proc.returncode == 0, proc.stderr
    proc = run(["sim", "rrr3_my_pd.toml", "--duration", "0.5", "--out", str(out)], USER_LAW)
    assert proc.returncode == 0, proc.stderr
    arrays, _, meta, summary = read_complete(log)
    sim = np.load(out)
    assert meta["controller"]["law"] == "my_laws:pd_torque"
    assert summary["reason"] == "done"
    assert np.array_equal(arrays["q"], sim["q"][:len(arrays["q"])])
    assert np.array_equal(arrays["u"], sim["u"][:len(arrays["u"])])


@pytest.mark.system
def test_python_law_runs_under_hil_control_against_hil_emulate(tmp_path):
    """A numpy class named by controller.law drives the emulated arm to its targets through
    hil control (limits and telemetry included); its per-tick cost is in the summary."""
    config = str(PYTHON_LAW / "rig_zmq_python.toml")
    where = endpoint(tmp_path)
    with emulator(config, where):
        proc = run(["control", config, "--connect", where, "--log", str(tmp_path / "c.mcap")],
                   PYTHON_LAW)
    assert proc.returncode == 0, proc.stderr
    arrays, _, meta, summary = read_complete(tmp_path / "c.mcap")
    assert summary["status"] == "ok"
    # PD without gravity compensation: joint 1 (gravity along +x) settles a little short
    assert np.abs(arrays["q"][-1] - [0.6, -0.4, 0.5]).max() < 0.03
    assert np.abs(arrays["u"]).max() <= 24.0        # safety.max_command clamps the law
    assert summary["compute_control_us"]["median"] > 0.0    # the Python law's cost per tick


@pytest.mark.system
def test_users_own_loop_drives_the_emulator_through_hilrig_connect(tmp_path):
    where = endpoint(tmp_path)
    with emulator(ROOT / "configs" / "rig_zmq.toml", where):
        proc = subprocess.run([sys.executable, str(PYTHON_LAW / "own_loop.py"), where],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "joint 2 jammed at tick 101, t = 0.101 s"
    final = np.array([float(v) for v in lines[1].split()[2:5]])
    assert lines[1].endswith(" V")
    assert abs(final[0] - 0.3) < 0.04 and abs(final[2] - 0.3) < 0.04
    assert abs(final[1] - 0.3) > 0.05     # joint 2 stayed where the jam caught it


@pytest.mark.system
def test_a_plain_python_law_in_hil_sim_is_one_clear_line(tmp_path):
    proc = run(["sim", "rig_zmq_python.toml", "--out", str(tmp_path / "x.npz")], PYTHON_LAW)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "controller.law: 'numpy_pd:NumpyPD' is a plain Python callable" in proc.stderr
    assert "@numba.njit" in proc.stderr


@pytest.mark.system
@pytest.mark.parametrize("law, message", [
    ("nowhere_module:law", "controller.law: cannot import 'nowhere_module'"),
    ("my_laws:no_such_law", "controller.law: module 'my_laws' has no 'no_such_law'"),
    ("my_laws", "controller.law: expected 'package.module:function'"),
])
def test_a_wrong_law_reference_is_one_clear_line(tmp_path, law, message):
    proc = run(["sim", "rrr3_my_pd.toml", "--set", f"controller.law='{law}'", "--out",
                str(tmp_path / "x.npz")], USER_LAW)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr


def test_a_law_that_does_not_compile_names_itself():
    def not_a_law(t, pos, vel, cur, params, state, u):
        u[0] = {}["key"]
    with pytest.raises(ConfigError, match="not_a_law does not compile as a law"):
        compile_law(not_a_law)


FAMILY = '''
import numpy as np
from numba import njit
from hilrig.controllers.interface import Controller, ControllerSpec, compile_law
from hilrig.errors import ConfigError
from hilrig.schema import Key


@njit
def damping_law(t, pos, vel, cur, params, state, u):
    for j in range(u.shape[0]):
        u[j] = -params[0] * vel[j]


def build(cfg, unit):
    return Controller(compile_law(damping_law), np.array([cfg.controller.damping]),
                      np.zeros(0), name="damper")


def check(cfg, voltage_driven):
    if cfg["controller"]["damping"] > 100.0:
        raise ConfigError("controller.damping: more than 100 shakes the arm")


DAMPER = ControllerSpec("damper", build, {"damping": Key("float", 1.0, minimum=0.0,
                                                         doc="N m s/rad")}, check)
'''


@pytest.mark.system
def test_a_registered_controller_family_brings_its_own_keys(tmp_path):
    """A package's ControllerSpec in the hilrig.controllers entry-point group becomes a
    controller.type whose keys are validated like ours and whose law runs in hil sim."""
    site = tmp_path / "site"
    dist = site / "damper-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: damper\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[hilrig.controllers]\ndamper = damper:DAMPER\n")
    (site / "damper.py").write_text(FAMILY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    base = ["sim", "serial3_free", "--set", "controller.type=damper", "--set",
            "plant.qd0=[1.0, 0.0, 0.0]", "--duration", "0.5"]

    def sim(*sets):
        args = [a for s in sets for a in ("--set", s)]
        return subprocess.run(hil(*base, *args, "--out", str(tmp_path / "d.npz")),
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    proc = sim("controller.damping=20")
    assert proc.returncode == 0, proc.stderr
    arrays = np.load(tmp_path / "d.npz")
    assert np.allclose(arrays["u"], -20.0 * arrays["qd"], rtol=0, atol=1e-12)
    for override, message in (("controller.dampng=2", "did you mean 'controller.damping'"),
                              ("controller.damping=-1", "controller.damping: must be >= 0"),
                              ("controller.damping=200", "more than 100 shakes the arm")):
        proc = sim(override)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert message in proc.stderr


@pytest.mark.system
def test_a_law_from_the_current_folder_does_not_let_its_neighbours_shadow_packages(tmp_path):
    """Loading my_laws.py from the current folder put that folder first on sys.path for
    good, and `python -m` put it there too: a planted matplotlib.py beside it ran when the
    plot was drawn. Now only the named module comes from the folder."""
    import shutil

    for name in ("my_laws.py", "rrr3_my_pd.toml"):
        shutil.copy(USER_LAW / name, tmp_path / name)
    planted = tmp_path / "planted-ran"
    (tmp_path / "matplotlib.py").write_text(
        f"open({str(planted)!r}, 'w').close()\nraise SystemExit('planted matplotlib')\n")
    proc = run(["sim", "rrr3_my_pd.toml", "--duration", "0.05", "--out", "x.npz", "--plot",
                "x.png"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not planted.exists()
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(np.load(tmp_path / "x.npz")["t"]) == 51       # the user's law ran
