"""Built-in configs (hilrig.configs): by name, `hil configs`, errors, from an installed wheel;
docs cited in the repository exist inside it; a bug shows its traceback."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import hilrig
import pytest
from hilrig.settings import builtin_configs
from hilrig.cli import main as cli
from hilrig.jit import compilation
from hilrig.settings.config import ConfigError, load

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
NAMES = sorted(path.stem for path in CONFIGS.glob("*.toml"))


def hil(*argv, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m hilrig.cli ARGV`` in a subprocess, with this checkout's hilrig."""
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "hilrig.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


# -- by name ------------------------------------------------------------------------------

def test_the_built_in_configs_are_the_checkouts_configs():
    assert NAMES and builtin_configs.names() == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_a_built_in_config_loads_by_name_as_by_path(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)          # no file of that name here
    assert load(name) == load(CONFIGS / f"{name}.toml")
    assert builtin_configs.text(name) == (CONFIGS / f"{name}.toml").read_text(encoding="utf-8")
    assert builtin_configs.description(name), f"{name}.toml: no '# description' first line"


def test_a_path_that_exists_wins_over_a_name(tmp_path, monkeypatch):
    text = (CONFIGS / "rrr3_pd.toml").read_text(encoding="utf-8")
    (tmp_path / "rrr3_pd").write_text(text.replace("duration = 3.0", "duration = 0.5"))
    monkeypatch.chdir(tmp_path)
    assert load("rrr3_pd").sim.duration == 0.5
    assert load(CONFIGS / "rrr3_pd.toml").sim.duration == 3.0


def test_an_unknown_name_names_the_closest_built_in_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="rrr3_pdd is neither a file nor a built-in config; "
                                          "closest built-in: rrr3_pd, rrr3_forward"):
        load("rrr3_pdd")


def test_run_by_name_writes_the_log_named_after_the_config(tmp_path, monkeypatch):
    """In process (this also fills the checkout's numba caches for the wheel test)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert cli.main(["run", "rrr3_pd", "--fast", "--duration", "0.05", "--no-plot"]) == 0
    assert (tmp_path / "runs" / "rrr3_pd.mcap").is_file()


# -- hil configs --------------------------------------------------------------------------

@pytest.mark.system
def test_hil_configs_lists_every_config_with_its_description_and_where(tmp_path):
    proc = hil("configs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == NAMES
    for name, line in zip(NAMES, lines):
        assert line.split(None, 1)[1] == builtin_configs.description(name)
    assert str(builtin_configs.directory()) in lines[-1]


@pytest.mark.system
def test_hil_configs_show_prints_the_file(tmp_path):
    proc = hil("configs", "--show", "serial3_jam2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (CONFIGS / "serial3_jam2.toml").read_text(encoding="utf-8")


@pytest.mark.system
@pytest.mark.parametrize("argv, name", [(["run", "rrr3_pdd", "--fast"], "rrr3_pdd"),
                                        (["sim", "serial3_jam", "--out", "x.npz"], "serial3_jam"),
                                        (["configs", "--show", "rrr3_p"], "rrr3_p")])
def test_an_unknown_name_is_one_line_and_exit_2(argv, name, tmp_path):
    proc = hil(*argv, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("hil: config error: ") and name in line
    assert f"closest built-in: {builtin_configs.closest(name)[0]}" in line
    assert proc.stdout == ""


# -- a bug is not a user's mistake ----------------------------------------------------------

@pytest.mark.parametrize("error", [RuntimeError, ValueError, KeyError])
def test_a_bug_propagates_out_of_main(error, monkeypatch):
    def broken():
        raise error("a bug")

    monkeypatch.setattr(builtin_configs, "names", broken)
    with pytest.raises(error, match="a bug"):
        cli.main(["configs"])


@pytest.mark.system
def test_a_bug_prints_its_traceback(tmp_path):
    script = ("import sys\nfrom hilrig.settings import builtin_configs\nfrom hilrig.cli import main as cli\n"
              "def broken():\n    raise ValueError('a bug in names()')\n"
              "builtin_configs.names = broken\nsys.exit(cli.main(['configs']))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr
    assert "in broken" in proc.stderr and "ValueError: a bug in names()" in proc.stderr


@pytest.mark.system
def test_a_config_error_raised_past_the_config_is_one_line(tmp_path):
    """A setting the chosen loop cannot run (checked after loading) is a user's mistake."""
    proc = hil("run", "rrr3_pd", "--set", "sim.integrator=accurate", cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "hil: config error: sim.integrator: 'accurate' is for offline runs (hil sim); "
        "a real-time run needs 'rk4' or 'euler'"]


# -- docs -------------------------------------------------------------------------------

def tracked_files(*patterns: str) -> list[Path]:
    proc = subprocess.run(["git", "ls-files", "-z", *patterns], cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout: no list of tracked files")
    return [ROOT / name for name in proc.stdout.decode().split("\0") if name]


@pytest.mark.system
def test_every_cited_doc_is_in_the_repository():
    """Paths under docs/ and bare upper-case names of Markdown files (README.md,
    PROTOCOLS.md §2.1, ...) name files that exist."""
    missing = []
    for path in tracked_files("*.py", "*.md"):
        text = path.read_text(encoding="utf-8")
        for cited in set(re.findall(r"docs/[\w.-]+\.md", text)):
            if not (ROOT / cited).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {cited}")
        for name in set(re.findall(r"\b[A-Z][A-Z0-9_]*\.md\b", text)):
            if not ((ROOT / "docs" / name).is_file() or (ROOT / name).is_file()):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing


@pytest.mark.system
def test_no_tracked_file_points_outside_the_repository():
    outside = ("../" + "shared", "shared" + "/docs")
    offenders = [str(path.relative_to(ROOT)) for path in tracked_files()
                 if path.is_file() and any(s.encode() in path.read_bytes() for s in outside)]
    assert not offenders


# -- from an installed wheel -----------------------------------------------------------------

@pytest.mark.system
def test_the_wheel_holds_the_configs(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "hilrig/configs/__init__.py" in names
    assert {f"hilrig/configs/{name}.toml" for name in NAMES} <= names


def seed_numba_caches(installed: Path) -> None:
    """Give the installed copy the checkout's kernel cache, so the runs below load their
    kernels instead of compiling them for minutes. The cache is a folder named by the
    fingerprint of the kernel sources (hilrig.jit.compilation), the same for the wheel's
    identical copy; kernels outside it (numba's own per-file caches) are keyed on the
    source file's mtime and size, so the installed files that equal the checkout's get its
    mtimes. A missing or stale cache costs only time (the kernels compile)."""
    source = Path(hilrig.__file__).resolve().parent
    cache = compilation.cache_dir()
    if cache is not None and cache.is_dir():
        shutil.copytree(cache, installed / "__pycache__" / "numba" / cache.name,
                        dirs_exist_ok=True)
    for cache in source.rglob("__pycache__/*.nb[ic]"):
        target = installed / cache.relative_to(source)
        if target.parent.parent.is_dir():
            target.parent.mkdir(exist_ok=True)
            shutil.copy2(cache, target)
    for path in installed.rglob("*.py"):
        original = source / path.relative_to(installed)
        if original.is_file() and original.read_bytes() == path.read_bytes():
            stat = original.stat()
            os.utime(path, (stat.st_atime, stat.st_mtime))


@pytest.mark.system
def test_an_installed_wheel_runs_a_built_in_config_by_name(wheel, tmp_path):
    """In a fresh venv, no checkout on the path: the wheel's own copy finds rrr3_pd, and
    panda_pd with the URDF the wheel ships.

    The venv takes the dependencies (numpy, numba, ...) from the environment the tests
    run in: the system site-packages, and the site-packages of the venv the tests run in
    if they run in one (a venv made from a venv sees only the base interpreter's), on
    its path after its own, without their .pth files, so that an editable install of a
    hilrig checkout there stays out; the test checks that the hilrig it imports is the
    wheel's."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["MPLBACKEND"] = "Agg"
    python, work = venv / "bin" / "python", tmp_path / "work"
    outer = {sysconfig.get_paths()[name] for name in ("purelib", "platlib")}
    inner = subprocess.run([str(python), "-c", "import sysconfig; "
                            "print(sysconfig.get_paths()['purelib'])"],
                           check=True, capture_output=True, text=True, env=env).stdout.strip()
    (Path(inner) / "tests-environment.pth").write_text("".join(f"{path}\n" for path in
                                                              sorted(outer)))
    work.mkdir()
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--ignore-installed",
                    "-q", str(wheel)], check=True, capture_output=True, env=env, cwd=work)
    where = subprocess.run([str(python), "-c", "import hilrig; print(hilrig.__file__)"],
                           check=True, capture_output=True, text=True, env=env, cwd=work)
    installed = Path(where.stdout.strip()).parent
    assert installed.is_relative_to(venv), f"imported {installed}, not the wheel's copy"
    assert sorted(p.stem for p in (installed / "configs").glob("*.toml")) == NAMES
    seed_numba_caches(installed)

    proc = subprocess.run([str(venv / "bin" / "hil"), "run", "rrr3_pd", "--fast",
                           "--duration", "0.05", "--no-plot"],
                          capture_output=True, text=True, env=env, cwd=work, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rrr3: 51 ticks" in proc.stdout
    assert (work / "runs" / "rrr3_pd.mcap").is_file()
    # the Panda from the wheel's own URDF (plant/urdf/robots), computed torque (issue 23)
    proc = subprocess.run([str(venv / "bin" / "hil"), "run", "panda_pd", "--fast",
                           "--duration", "0.05", "--no-plot"],
                          capture_output=True, text=True, env=env, cwd=work, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "urdf: 51 ticks" in proc.stdout
    assert (work / "runs" / "panda_pd.mcap").is_file()
    listing = subprocess.run([str(venv / "bin" / "hil"), "configs"], capture_output=True,
                             text=True, env=env, cwd=work, check=True)
    assert str(installed / "configs") in listing.stdout
