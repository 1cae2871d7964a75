"""A law's sizes and its mistakes, named in one line (issue 28, item 3): the sizes a law
declares (controllers.interface.declare_sizes) against the config's, refused on load
before any kernel compiles; a law that reads past its state caught by its trial call
instead of numba's "Exception ignored" on every tick; a non-finite command reported as
the law's, with its inputs, not as an invalid plant state. The laws are in
tests/user_parts.py."""
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.interface import LawSizes, declared_sizes
from hilrig.errors import ConfigError
from hilrig.settings.config import resolve
from rt_helpers import hil

TESTS = Path(__file__).parent
ARM = {"model": "serial_arm", "damping": [15.0, 15.0, 15.0]}     # three actuated joints


def law_config(law: str, params: list, state_size: int = 0, plant: dict = ARM):
    return resolve({"sim": {"duration": 0.3}, "plant": plant,
                    "controller": {"law": f"user_parts:{law}", "params": params,
                                   "state_size": state_size}})


# -- declared sizes ----------------------------------------------------------------------

def test_a_declaration_is_found_above_or_below_njit():
    import user_parts
    sizes = declared_sizes(user_parts.declared_pd)
    assert isinstance(sizes, LawSizes)
    assert sizes.wanted(3) == {"params": 5, "state": 0, "outputs": 3}
    assert declared_sizes(user_parts.nan_elsewhere) is None


def test_a_config_that_agrees_with_the_declaration_loads_and_runs_its_law():
    cfg = law_config("declared_pd", [30.0, 3.0, 0.5, -0.5, 0.2])
    controller = controller_from_config(cfg, "N m")
    u = np.zeros(3)
    controller(0.0, np.zeros(3), np.zeros(3), np.zeros(3), u)
    assert np.allclose(u, 30.0 * np.array([0.5, -0.5, 0.2]))


@pytest.mark.parametrize("params, state_size, plant, message", [
    ([30.0, 3.0], 0, ARM,
     "declares params = 5 (for 3 outputs), but controller.params has 2 values"),
    ([30.0, 3.0, 0.5, -0.5, 0.2], 2, ARM,
     "declares state = 0 (for 3 outputs), but controller.state_size = 2"),
    ([30.0, 3.0, 0.5, -0.5], 0, {"model": "user_parts:ARM"},
     "declares outputs = 3 (for 2 outputs), but the plant has 2 actuated joints"),
], ids=["params", "state", "outputs"])
def test_a_config_that_disagrees_with_the_declaration_is_refused_on_load(
        params, state_size, plant, message):
    with pytest.raises(ConfigError) as refused:
        law_config("declared_pd", params, state_size, plant)
    assert str(refused.value) == f"controller.law: 'user_parts:declared_pd' {message}"


# -- the trial call ----------------------------------------------------------------------

def test_a_law_that_reads_past_its_state_is_refused_by_name_on_load():
    """Without controller.state_size its integrator slice is empty: numpy says so on the
    trial call. With the state it needs, it loads, builds and runs."""
    with pytest.raises(ConfigError) as refused:
        law_config("forgets_state", [30.0, 3.0])
    assert str(refused.value).startswith(
        "controller.law: 'user_parts:forgets_state' raised ValueError (")
    assert str(refused.value).endswith(
        ") on a trial call with 2 params, controller.state_size = 0 and 3 outputs: does it "
        "read past its params or state?")
    controller = controller_from_config(law_config("forgets_state", [30.0, 3.0], 3), "N m")
    u = np.zeros(3)
    controller(0.0, np.ones(3), np.zeros(3), np.zeros(3), u)
    assert np.allclose(u, -31.0) and np.allclose(controller.state, 1.0)


# -- through hil, as a user meets them ----------------------------------------------------

def user_folder(tmp_path: Path, law: str, params: list, state_size: int = 0) -> Path:
    """tmp_path with a copy of user_parts.py and a config ``run.toml`` naming ``law``."""
    shutil.copy(TESTS / "user_parts.py", tmp_path)
    (tmp_path / "run.toml").write_text(
        '[sim]\nduration = 0.3\n[plant]\nmodel = "serial_arm"\ndamping = [15.0, 15.0, 15.0]\n'
        f'[controller]\nlaw = "user_parts:{law}"\nparams = {params}\n'
        f"state_size = {state_size}\n")
    return tmp_path


def hil_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(hil(*args), cwd=folder, capture_output=True, text=True, timeout=600)


def stderr_lines(done: subprocess.CompletedProcess) -> list:
    """Its stderr without hilrig's compile progress: `hil sim` imports the built-in law,
    a cfunc compiled at import once per source version (a cold cache), whatever the
    config says."""
    return [line for line in done.stderr.splitlines() if not line.startswith("hilrig: compil")]


def compiled_here(folder: Path) -> list:
    """The numba cache files of the user's module beside it (a compiled law leaves them)."""
    return sorted(path.name for path in folder.glob("__pycache__/user_parts*.nb*"))


@pytest.mark.slow
def test_hil_refuses_sizes_that_disagree_in_one_line_and_compiles_nothing(tmp_path):
    folder = user_folder(tmp_path, "declared_pd", [30.0, 3.0])
    for command in (["run", "run.toml", "--no-plot"], ["sim", "run.toml", "--out", "x.npz"]):
        done = hil_in(folder, *command)
        assert done.returncode == 2, done.stderr
        assert stderr_lines(done) == [
            "hil: config error: controller.law: 'user_parts:declared_pd' declares params = 5 "
            "(for 3 outputs), but controller.params has 2 values"]
        if command[0] == "run":
            assert len(done.stderr.splitlines()) == 1, done.stderr    # nothing compiled
    assert compiled_here(folder) == []
    assert not (folder / "runs").exists() and not (folder / "x.npz").exists()


@pytest.mark.slow
def test_a_law_that_forgets_its_state_size_is_one_line_without_numbas_tracebacks(tmp_path):
    """Before: exit 0, a zero command, and numba's "Exception ignored" with a traceback on
    every tick (the ValueError raised inside the compiled loop cannot propagate)."""
    folder = user_folder(tmp_path, "forgets_state", [30.0, 3.0])
    for command in (["run", "run.toml", "--no-plot"], ["sim", "run.toml", "--out", "x.npz"]):
        done = hil_in(folder, *command)
        assert done.returncode == 2, done.stderr
        lines = stderr_lines(done)
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("hil: config error: controller.law: "
                                   "'user_parts:forgets_state' raised ValueError")
        assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr
        if command[0] == "run":
            assert len(done.stderr.splitlines()) == 1, done.stderr    # nothing compiled
    assert compiled_here(folder) == []


@pytest.mark.slow
def test_a_non_finite_command_is_reported_as_the_laws_with_its_inputs(tmp_path):
    """nan_after_a_tenth commands NaN from t = 0.1 s: `hil sim` (the lockstep run) blamed
    the plant ("plant state became invalid"); now it, `hil run --fast` and `hil run` name
    the law, its command and what it was given."""
    folder = user_folder(tmp_path, "nan_after_a_tenth", [30.0, 3.0])
    law = ("controller produced a non-finite command: law 'user_parts:nan_after_a_tenth' "
           "gave u = [nan, ")
    sim = hil_in(folder, "sim", "run.toml", "--out", "x.npz")
    assert sim.returncode == 1
    assert sim.stderr.splitlines()[-1].startswith(f"hil: {law}")
    assert "for t = 0.100000 s, pos = [" in sim.stderr and ", cur = [0., 0., 0.]; 101 rows " \
        "kept" in sim.stderr
    assert "plant state" not in sim.stderr
    for fast in (["--fast"], []):
        run = hil_in(folder, "run", "run.toml", "--no-plot", *fast)
        assert run.returncode == 1, run.stderr
        ended = next(line for line in run.stdout.splitlines() if ", ended: " in line)
        assert ended.split(", ended: ")[1].startswith(law), ended
        assert "for t = 0.100000 s, pos = [" in ended and "plant state" not in run.stdout


def test_the_trial_calls_time_bound_counts_the_laws_time_not_numbas_compiling(monkeypatch):
    """The trial call's CPU bound (TRIAL_CPU_S) refuses a law that loops for ever, but not
    one whose first call compiles a helper for longer than the bound: numba's compiling
    is not the law's time (and no exception may land inside numba's compiler)."""
    from hilrig.controllers import interface
    from numba import njit

    @njit
    def helper(x):                       # compiled at the trial's first call
        total = 0.0
        for k in range(x.shape[0]):
            total += np.sin(x[k]) * np.cos(x[k]) + np.exp(-x[k] * x[k])
        return total

    def law(t, pos, vel, cur, params, state, u):
        u[:] = helper(pos) - params[0] * vel

    def stuck(t, pos, vel, cur, params, state, u):
        while u[0] == u[0]:
            u[0] += 1.0

    njit(lambda x: x + 1.0)(1.0)          # numba's machinery ready: the trial's time is the
    monkeypatch.setattr(interface, "TRIAL_CPU_S", 0.01)   # helper's compile, above the bound
    params, state = np.array([1.0]), np.zeros(0)
    started = time.process_time()
    interface.trial_call(law, "law", params, state, 3)
    assert helper.signatures                              # it did compile, in the trial,
    assert time.process_time() - started > 0.01           # for longer than the bound
    with pytest.raises(ConfigError, match=r"'stuck' did not return within 0.01 s of CPU"):
        interface.trial_call(stuck, "stuck", params, state, 3)
