"""The install: one top-level name (hilrig), the console script, the layer contract."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import hilrig
import pytest

pytestmark = pytest.mark.system     # every test here starts other processes

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_one_top_level_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    code = [n for n in names if ".dist-info/" not in n]
    assert {n.split("/")[0] for n in code} == {"hilrig"}
    for package in ("jit", "plant", "plant/flex_chain", "plant/flex_rp", "controllers", "timing",
                    "telemetry", "drivers", "devices", "settings", "rt", "campaign", "live",
                    "remote", "analysis", "conformance", "cli"):
        assert f"hilrig/{package}/__init__.py" in names
    assert not any(n.startswith("hilrig/tests/") or n.startswith("hilrig/bench/") for n in names)
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["hilrig"]
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "hil = hilrig.cli.main:main" in entry_points
    assert "hilrig_zmq = hilrig.drivers.zmqcan:ZmqCanBus" in entry_points


def test_version_matches_the_distribution():
    proc = subprocess.run([sys.executable, "-m", "hilrig.cli", "--version"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == f"hilrig {hilrig.__version__}"
    assert hilrig.__version__[0].isdigit() and hilrig.__version__ != "0+unknown"


def _lint(tmp_path: Path, probe: str, source: str) -> subprocess.CompletedProcess:
    """lint-imports on a copy of the package with the module ``probe`` (a path inside it,
    e.g. "plant/_probe.py") holding ``source``. A copy: the probe written into this
    checkout would change, for the tests running beside this one, the sources the kernel
    cache is keyed on (jit.compilation), or vanish while one of them reads it."""
    copy = tmp_path / "hilrig"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", "runs", "tests", "bench", "docs"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    if source:
        (copy / probe).write_text(source)
    lint = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command;"
            " sys.exit(lint_imports_command())"]
    return subprocess.run(lint, cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)))


def test_layer_contract_holds_and_catches_an_upward_import(tmp_path):
    """lint-imports keeps the layers (pyproject.toml); an upward import breaks it."""
    kept = _lint(tmp_path / "kept", "plant/_upward_import_probe.py", "")
    assert kept.returncode == 0, kept.stdout[-2000:]
    broken = _lint(tmp_path / "broken", "plant/_upward_import_probe.py",
                   "from hilrig.rt import session  # noqa: F401\n")
    assert broken.returncode != 0
    assert "hilrig.plant is not allowed to import hilrig.rt" in broken.stdout
    assert "hilrig.plant._upward_import_probe -> hilrig.rt.session" in broken.stdout


def test_layer_contract_catches_an_import_between_packages_of_one_level(tmp_path):
    """campaign, live, remote, analysis and conformance stand side by side: independent."""
    broken = _lint(tmp_path, "campaign/_sibling_import_probe.py",
                   "from hilrig.live import watch  # noqa: F401\n")
    assert broken.returncode != 0
    assert "hilrig.campaign is not allowed to import hilrig.live" in broken.stdout
