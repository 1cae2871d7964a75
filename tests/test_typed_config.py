"""The typed config a reader can see (issue 22, item 5): the common tables are static
classes whose fields an editor and a type checker know, the validation's declarations
come from the same fields, and "what does the link take" has one answer."""
from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Optional

import hilrig
import numpy as np
import pytest
from hilrig.drivers.registry import command_unit, link_spec, links
from hilrig.errors import ConfigError
from hilrig.rt.sim import simulate
from hilrig.schema import (
    ANNOTATIONS,
    Config,
    EmulatorCanopenTable,
    EmulatorTable,
    FaultsTable,
    JamTable,
    Key,
    LoopTable,
    PlantTable,
    SafetyTable,
    SimTable,
    Table,
    declarations,
    key,
)
from hilrig.settings.config import SCHEMA, load

from conftest import config

ROOT = Path(__file__).resolve().parents[1]
CONFIG_FILES = sorted((ROOT / "configs").glob("*.toml"))


def test_the_common_tables_are_classes_with_annotated_fields():
    assert typing.get_type_hints(SimTable)["dt"] is float
    assert typing.get_type_hints(LoopTable)["max_overruns"] is int
    assert typing.get_type_hints(SafetyTable)["max_command"] == Optional[tuple[float, ...]]
    assert typing.get_type_hints(EmulatorTable)["canopen"] is EmulatorCanopenTable
    assert typing.get_type_hints(FaultsTable)["jam"] == tuple[JamTable, ...]
    assert typing.get_type_hints(Config)["sim"] is SimTable
    cfg = load("serial3_jam1")
    # a common table is its class; a table a part extends is a subclass of its class
    assert type(cfg.sim) is SimTable and type(cfg.emulator.canopen) is EmulatorCanopenTable
    assert type(cfg.faults.jam[0]) is JamTable and isinstance(cfg, Config)
    assert isinstance(cfg.plant, PlantTable) and type(cfg.plant) is not PlantTable
    assert cfg.plant.damping == (15.0, 15.0, 15.0)          # the model's own key
    assert cfg.emulator.drive_range("V") == 48.0 and cfg.emulator.drive_range("N m") == 1000.0


def _fields(cls: type, prefix: str = "") -> dict:
    """dotted key -> (annotation, the field's key() options) of a static table class."""
    hints, out = typing.get_type_hints(cls), {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        inner = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else hint
        if isinstance(inner, type) and issubclass(inner, Table):
            out.update(_fields(inner, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = (hint, dict(f.metadata["key"]))
    return out


def _keys(schema: dict, prefix: str = "") -> dict:
    out = {}
    for name, spec in schema.items():
        if isinstance(spec, dict):
            out.update(_keys(spec, f"{prefix}{name}."))
        else:
            out[prefix + name] = spec
    return out


def test_every_declared_key_is_a_field_and_every_field_a_declared_key():
    fields, keys = _fields(Config), _keys(SCHEMA)
    assert set(fields) == set(keys)
    assert {"sim.dt", "plant.motor.gear_ratio", "emulator.canopen.seed",
            "faults.jam.t1", "link.first_measurement_timeout"} <= set(keys)
    for name, spec in keys.items():
        hint, options = fields[name]
        # the Key's kind is the field's type; the rest of the Key is the field's key()
        assert hint in (ANNOTATIONS[spec.kind], Optional[ANNOTATIONS[spec.kind]]), name
        assert dataclasses.replace(spec, kind="") == Key("", **options), name


def _matches(value, hint) -> bool:
    """Whether ``value`` is of the annotation ``hint`` (bool is not an int here)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(item, args[0]) for item in value)
        return len(value) == len(args) and all(map(_matches, value, args))
    if isinstance(hint, type) and issubclass(hint, Table):
        return type(value) is hint and _all_match(value)
    return type(value) is hint


def _all_match(table) -> bool:
    hints = typing.get_type_hints(type(table))
    bad = [f.name for f in dataclasses.fields(table)
           if not _matches(getattr(table, f.name), hints[f.name])]
    assert not bad, f"{type(table).__name__}: {bad} are not of their annotation"
    return True


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_every_resolved_value_is_of_its_fields_type(path):
    """What a type checker reads is what a run gets: every value of every shipped config,
    the keys filled from the model included (plant.drive: str, never None)."""
    cfg = load(path)
    assert _all_match(cfg)


@pytest.mark.system
def test_a_config_pickled_into_another_process_equals_its_own_load():
    """Configs travel to Dask workers and spawned processes: the static tables by name, the
    tables made at run time (a model's, a controller type's, a link's keys) as their plain
    table and what made their class."""
    cfg = load("rig_canopen")
    probe = ("import pickle, sys; from hilrig.settings.config import load; "
             "cfg = pickle.loads(sys.stdin.buffer.read()); "
             "print(cfg == load('rig_canopen'), type(cfg.sim).__name__, "
             "type(cfg.plant).__mro__[1].__name__, cfg.link.canopen.node_ids)")
    proc = subprocess.run([sys.executable, "-c", probe], input=pickle.dumps(cfg),
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split("\n")[-2] == "True SimTable PlantTable (1, 2, 3)"


def test_a_table_class_is_its_declarations():
    """A key added to a table is one field: its annotation gives the kind, key() the rest;
    an annotation that is no kind, or optional but never unset, fails at import."""

    @dataclasses.dataclass(frozen=True)
    class Telemetry(Table):
        on_overrun: str = key("log", choices=("log", "stop"), doc="what an overrun does")
        budget: Optional[tuple[float, ...]] = key(None, length="nact", doc="s")

    assert declarations(Telemetry) == {
        "on_overrun": Key("str", "log", choices=("log", "stop"), doc="what an overrun does"),
        "budget": Key("floats", None, length="nact", doc="s")}

    @dataclasses.dataclass(frozen=True)
    class Listed(Table):
        values: list = key([])

    with pytest.raises(TypeError, match="Listed.values: a key's annotation must be one of"):
        declarations(Listed)

    @dataclasses.dataclass(frozen=True)
    class NeverUnset(Table):
        rate: Optional[float] = key(1.0)

    with pytest.raises(TypeError, match="NeverUnset.rate: annotated as optional but never"):
        declarations(NeverUnset)


@pytest.mark.system
def test_a_type_checker_knows_the_fields(tmp_path):
    """mypy reads cfg.sim.dt as a float and refuses cfg.sim.dtt; a model's own keys (made at
    run time) are Any to it; hilrig.schema itself type-checks."""
    pytest.importorskip("mypy")
    (tmp_path / "user.py").write_text(
        "from hilrig.schema import Config\n"
        "\n"
        "\n"
        "def period(cfg: Config) -> float:\n"
        "    cfg.plant.lengths             # a model's own key\n"
        "    cfg.link.canopen.node_ids     # a link's own table\n"
        "    return cfg.sim.dt + cfg.emulator.drive_range('V')\n"
        "\n"
        "\n"
        "def typo(cfg: Config) -> float:\n"
        "    return cfg.sim.dtt\n"
        "\n"
        "\n"
        "def wrong(cfg: Config) -> str:\n"
        "    return cfg.loop.max_overruns\n")
    package = Path(hilrig.__file__).parent
    (tmp_path / "path").mkdir()      # the package under its import name, wherever it lives
    (tmp_path / "path" / "hilrig").symlink_to(package, target_is_directory=True)
    schema = tmp_path / "path" / "hilrig" / "schema.py"
    env = {"MYPYPATH": str(tmp_path / "path"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), "user.py", str(schema)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, proc.stdout + proc.stderr
    assert errors[0].startswith("user.py:11:") and '"SimTable" has no attribute "dtt"' in errors[0]
    assert errors[1].startswith("user.py:15:") and 'got "int", expected "str"' in errors[1]


# -- what the link takes: one answer -------------------------------------------------------

def test_command_unit_is_the_links_declared_unit_or_the_plants():
    for name in links():
        declared = link_spec(name).command_unit
        for drive in ("torque", "voltage", "voltage_full"):
            expected = declared or ("N m" if drive == "torque" else "V")
            assert command_unit(name, drive) == expected
    assert command_unit("canopen", "voltage") == "N m"
    assert command_unit("serial", "voltage") == "V"


TORQUE_LINK = '''
from hilrig.drivers.link import LinkSpec

TORQUE_RIG = LinkSpec("torque_rig", "hilrig.drivers.inprocess:PlantLink", command_unit="N m")
'''


@pytest.fixture
def torque_rig(tmp_path, monkeypatch):
    """A user's link whose drives take torques, registered in hilrig.links as 'torque_rig'."""
    site = tmp_path / "site"
    dist = site / "torque_rig-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torque-rig\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[hilrig.links]\ntorque_rig = torque_rig:TORQUE_RIG\n")
    (site / "torque_rig.py").write_text(TORQUE_LINK)
    monkeypatch.syspath_prepend(str(site))
    links.cache_clear()
    link_spec.cache_clear()
    yield "torque_rig"
    links.cache_clear()
    link_spec.cache_clear()
    sys.modules.pop("torque_rig", None)


def test_a_users_torque_link_gets_torque_commands_and_the_torque_limit(torque_rig):
    """A link that declares command_unit = "N m" (not only CANopen) makes the controller
    compute torques and clamps them at the drives' peak torque, on a voltage-driven plant:
    the config's checks, the controller and the limits ask the same question."""
    cfg = config("rig_inprocess", f"link.type={torque_rig}", "controller.kp=1e12",
                 "controller.reference=hold", "sim.duration=0.02", "emulator.max_torque=250.0")
    assert cfg.safety.max_command is None
    assert cfg.plant.drive == "voltage" and cfg.controller.output == "torque"
    u = simulate(cfg).arrays["u"]
    assert np.abs(u).max() == 250.0 and np.all(np.abs(u[0]) == 250.0)
    with pytest.raises(ConfigError, match="input.voltage: the plant is torque-driven"):
        config("rrr3_forward", f"link.type={torque_rig}")
