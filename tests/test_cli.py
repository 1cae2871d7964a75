"""``hil sim``: the command line, the npz it writes, the plot, exit codes and messages."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hilrig.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
SERIAL_JAM1 = str(CONFIGS / "serial3_jam1.toml")
RRR3_FORWARD = str(CONFIGS / "rrr3_forward.toml")


def run_cli(*argv) -> int:
    return main(["sim", *[str(a) for a in argv]])


def load_npz(path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def meta(arrays: dict) -> dict:
    return json.loads(arrays["meta"].item())


def hil(*argv, tmp_path=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    return subprocess.run([sys.executable, "-m", "hilrig.cli", "sim", *[str(a) for a in argv]],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def jam1_run(tmp_path_factory):
    """The serial arm, joint 1 jamming at 2 s, run for 3 s with a plot."""
    tmp = tmp_path_factory.mktemp("jam1")
    out, png = tmp / "run.npz", tmp / "run.png"
    rc = run_cli(SERIAL_JAM1, "--duration", "3", "--out", out, "--plot", png)
    return rc, out, png


# -- the serial arm with a jam --------------------------------------------------------

def test_sim_returns_zero_and_writes_the_npz(jam1_run):
    rc, out, _ = jam1_run
    assert rc == 0
    assert out.is_file()
    arrays = load_npz(out)
    for name in ("t", "q", "qd", "u", "meta", "energy", "com", "jam_events"):
        assert name in arrays, name


def test_time_axis(jam1_run):
    arrays = load_npz(jam1_run[1])
    t = arrays["t"]
    assert t.shape == (3001,)
    assert t[0] == 0.0
    assert t[-1] == pytest.approx(3.0)
    np.testing.assert_allclose(np.diff(t), 1e-3, rtol=1e-9)


def test_array_shapes(jam1_run):
    arrays = load_npz(jam1_run[1])
    assert arrays["q"].shape == (3001, 3)
    assert arrays["qd"].shape == (3001, 3)
    assert arrays["u"].shape == (3001, 3)
    assert arrays["energy"].shape == (3001,)
    assert arrays["com"].shape == (3001, 2)
    assert np.all(np.isfinite(arrays["q"]))
    # the run starts from the config's q0 and the arm moves
    np.testing.assert_allclose(arrays["q"][0], [0.444134, -0.444134, 0.529083])
    assert np.ptp(arrays["q"][:, 2]) > 1e-3
    # a damped arm with zero input only loses energy (up to round-off)
    assert arrays["energy"][-1] < arrays["energy"][0]


def test_meta_is_the_resolved_config_with_the_override(jam1_run):
    arrays = load_npz(jam1_run[1])
    assert arrays["meta"].shape == ()
    cfg = meta(arrays)
    assert cfg["sim"]["duration"] == 3.0  # the file says 20.0
    assert cfg["sim"]["dt"] == 0.001
    assert cfg["sim"]["integrator"] == "rk4"
    assert cfg["plant"]["model"] == "serial_arm"
    assert cfg["faults"]["jam"] == [{"joint": 1, "t1": 2.0, "duration": 0.1}]


def test_jam_events(jam1_run):
    arrays = load_npz(jam1_run[1])
    events = arrays["jam_events"]
    assert events.shape == (1, 3)
    np.testing.assert_allclose(events, [[1, 2.0, 2.1]], atol=1e-12)


def test_jammed_joint_is_blocked_after_the_jamming_phase(jam1_run):
    arrays = load_npz(jam1_run[1])
    t, q = arrays["t"], arrays["q"]
    blocked = q[t >= 2.1 - 1e-9, 0]
    assert np.ptp(blocked) < 1e-12
    assert blocked[0] == pytest.approx(0.0645, abs=5e-4)  # the paper's jammed value
    assert np.ptp(q[(t >= 1.0) & (t < 2.0), 0]) > 1e-3  # before the jam, q1 moves
    assert np.ptp(q[t >= 2.1 - 1e-9, 1]) > 1e-3  # the other joints keep moving


def test_plot_is_a_real_png(jam1_run):
    png = jam1_run[2]
    assert png.is_file()
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


def test_set_moves_the_jam(tmp_path):
    out = tmp_path / "run.npz"
    assert run_cli(SERIAL_JAM1, "--duration", "3", "--set", "faults.jam.t1=1.0",
                   "--out", out) == 0
    arrays = load_npz(out)
    np.testing.assert_allclose(arrays["jam_events"], [[1, 1.0, 1.1]], atol=1e-12)
    assert meta(arrays)["faults"]["jam"][0]["t1"] == 1.0
    t, q1 = arrays["t"], arrays["q"][:, 0]
    assert np.ptp(q1[t >= 1.1 - 1e-9]) < 1e-12
    assert np.ptp(q1[(t >= 1.0) & (t < 1.1)]) > 1e-4  # decelerating, not yet blocked
    assert np.ptp(q1[t < 1.0]) > 1e-3


def test_set_and_duration_together(tmp_path):
    out = tmp_path / "run.npz"
    assert run_cli(SERIAL_JAM1, "--duration", "0.5", "--set", "plant.damping=3",
                   "--set", "sim.integrator=euler", "--out", out) == 0
    cfg = meta(load_npz(out))
    assert cfg["plant"]["damping"] == [3.0, 3.0, 3.0]
    assert cfg["sim"]["integrator"] == "euler"
    assert cfg["sim"]["duration"] == 0.5
    # the jam at 2 s lies after the end of the run: no event
    assert load_npz(out)["jam_events"].shape == (0, 3)


def test_dt_option_halves_the_rows(tmp_path):
    fine, coarse = tmp_path / "fine.npz", tmp_path / "coarse.npz"
    assert run_cli(SERIAL_JAM1, "--duration", "2", "--out", fine) == 0
    assert run_cli(SERIAL_JAM1, "--duration", "2", "--dt", "0.002", "--out", coarse) == 0
    a, b = load_npz(fine), load_npz(coarse)
    assert len(a["t"]) == 2001
    assert len(b["t"]) == 1001
    assert len(b["t"]) - 1 == (len(a["t"]) - 1) // 2
    assert b["q"].shape == (1001, 3)
    np.testing.assert_allclose(np.diff(b["t"]), 0.002, rtol=1e-9)
    assert b["t"][-1] == pytest.approx(2.0)
    assert meta(b)["sim"]["dt"] == 0.002


def test_duration_not_exactly_representable_still_reaches_the_end(tmp_path):
    # 0.7 / 0.001 == 699.9999999999999 in floating point: the run must not lose its last step
    out = tmp_path / "run.npz"
    assert run_cli(SERIAL_JAM1, "--duration", "0.7", "--out", out) == 0
    t = load_npz(out)["t"]
    assert len(t) == 701
    assert t[-1] == pytest.approx(0.7)


def test_out_directory_is_created(tmp_path):
    out = tmp_path / "a" / "b" / "run.npz"
    assert run_cli(SERIAL_JAM1, "--duration", "0.1", "--out", out) == 0
    assert out.is_file()


# -- the 3RRR -------------------------------------------------------------------------

def test_rrr3_forward_writes_its_diagnostics(tmp_path):
    out, png = tmp_path / "rrr3.npz", tmp_path / "rrr3.png"
    assert run_cli(RRR3_FORWARD, "--duration", "0.2", "--out", out, "--plot", png) == 0
    arrays = load_npz(out)
    n = 201
    assert arrays["t"].shape == (n,)
    assert arrays["q"].shape == (n, 6)
    assert arrays["qd"].shape == (n, 6)
    assert arrays["u"].shape == (n, 3)
    assert arrays["i"].shape == (n, 3)
    for name in ("residual", "det_phi_theta", "det_phi_x"):
        assert arrays[name].shape == (n,), name
        assert np.all(np.isfinite(arrays[name])), name
    assert "energy" not in arrays and "com" not in arrays
    assert arrays["jam_events"].shape == (0, 3)
    # open loop at u = [5, -5, 5] V: at rest the current is u / R_a = 5/3 A
    np.testing.assert_allclose(arrays["u"][0], [5.0, -5.0, 5.0])
    np.testing.assert_allclose(arrays["i"][0], [5 / 3, -5 / 3, 5 / 3], rtol=1e-9)
    # projection keeps the loop-closure constraints satisfied
    assert arrays["residual"].max() < 1e-9
    assert np.any(arrays["det_phi_theta"] != 0.0)
    assert meta(arrays)["plant"]["model"] == "rrr3"
    assert png.read_bytes()[:4] == b"\x89PNG"


# -- errors and messages --------------------------------------------------------------

def test_config_error_returns_2_names_the_key_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run.npz"
    rc = run_cli(SERIAL_JAM1, "--set", "plant.dampin=3", "--out", out)
    assert rc == 2
    err = capsys.readouterr().err
    assert "plant.dampin" in err and "did you mean 'plant.damping'" in err
    assert not out.exists()


@pytest.mark.parametrize("argv, needle", [
    (["--set", "sim.dt"], "key=value"),
    (["--duration", "0"], "sim.duration"),
    (["--dt", "-0.001"], "sim.dt"),
    (["--set", "sim.integrator=rk5"], "sim.integrator"),
])
def test_bad_options_return_2(tmp_path, capsys, argv, needle):
    rc = run_cli(SERIAL_JAM1, *argv, "--out", tmp_path / "run.npz")
    assert rc == 2
    assert needle in capsys.readouterr().err


def test_missing_config_file_returns_2(tmp_path, capsys):
    missing = tmp_path / "nope.toml"
    assert run_cli(missing, "--out", tmp_path / "run.npz") == 2
    err = capsys.readouterr().err
    assert "not found" in err and "nope.toml" in err


def test_out_is_required(capsys):
    with pytest.raises(SystemExit) as info:
        main(["sim", SERIAL_JAM1])
    assert info.value.code == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.system
def test_subprocess_unknown_key_exits_2(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[sim]\nduration = 0.1\n[plant]\nmodel = "serial_arm"\nstiffness = 3.0\n')
    proc = hil(cfg, "--out", tmp_path / "run.npz")
    assert proc.returncode == 2, proc.stderr
    assert "plant.stiffness" in proc.stderr
    assert "unknown" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run.npz").exists()


@pytest.mark.system
def test_subprocess_success_says_where_the_output_went(tmp_path):
    out, png = tmp_path / "run.npz", tmp_path / "run.png"
    proc = hil(SERIAL_JAM1, "--duration", "0.5", "--out", out, "--plot", png)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert str(out) in text
    assert str(png) in text
    assert out.is_file() and png.is_file()
    assert len(load_npz(out)["t"]) == 501


LOADED = ("matplotlib", "scipy.integrate", "scipy.signal")
PROBE = ("import sys\nfrom hilrig.cli.main import main\nstatus = main(sys.argv[1:])\n"
         f"print(status, *(name in sys.modules for name in {LOADED!r}))")


@pytest.mark.system
@pytest.mark.parametrize("argv, expected", [
    (("sim", "rrr3_pd", "--duration", "0.01", "--out", "x.npz"), "0 False False False"),
    (("sim", "rrr3_pd", "--duration", "0.01", "--out", "x.npz", "--plot", "x.png"),
     "0 True False False"),
    (("excite", "rig_canopen", "--out", "e.toml", "--periods", "1"), "0 False False False"),
])
def test_a_command_imports_only_the_libraries_it_uses(tmp_path, argv, expected):
    """`hil sim` loads matplotlib only to plot and never the accurate path's
    scipy.integrate for a fixed-step config; `hil excite` not the identification's
    filters (scipy.signal). Each cost every start a few tenths of a second of CPU: a
    `hil sim` took 1.8 s, now 1.06 s."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == expected, done.stdout
