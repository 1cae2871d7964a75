"""Scenario configs: TOML files, ``--set key=value`` overrides, validation with clear errors.

A config is a nested table. Every key is declared once with its type, default and (for
lists) its length rule: the common tables' keys as the fields of their classes
(hilrig.schema: ``SimTable``, ``LoopTable``, ...; ``SCHEMA`` below is derived from them), a
plant model's, a controller type's and a link's own keys by their specs. Anything else
fails at load time with the key's dotted name and the reason. Joints are numbered from 1,
as in the papers. The resolved config (defaults filled in) is what runs, as a typed
``Config`` of those classes (hilrig.schema.typed), and its ``to_dict()`` is what is stored
as ``meta`` next to every result.
"""
from __future__ import annotations

import difflib
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hilrig.drivers.registry import command_unit, link_spec, links
from hilrig.errors import ConfigError
from hilrig.plugins import registered
from hilrig.settings import builtin_configs
from hilrig.schema import Config, Key, Tables, declarations, typed

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from hilrig.plant.interface import PlantModel

# The plant models' and controllers' registries (hilrig.plant.factory,
# hilrig.controllers.factory) are imported where a config is resolved, not here: they
# import numba, and `hil --help`, `hil configs` or `hil --version` need none of it.
PLANT_MODELS = "hilrig.plants"      # plant.factory.GROUP, the entry-point group

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# the declarations of the common tables, from their classes (hilrig.schema: SimTable, ...):
# key -> Key, table -> dict, list of tables -> Tables
SCHEMA: dict[str, Any] = declarations(Config)
MAX_FILE_BYTES = 2**20         # a config or campaign spec larger than this is not one


# -- loading ----------------------------------------------------------------------

def load(config: str | Path, overrides: list[str] = ()) -> Config:
    """Read a TOML config, apply ``key=value`` overrides, validate, fill defaults: the
    typed resolved config.

    ``config`` is a file, or the name of a built-in config (``hil configs``) when no
    file of that name exists.
    """
    path = locate(config)
    try:
        raw = tomllib.loads(read_bounded(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for item in overrides:
        apply_override(raw, item)
    return resolve(raw)


def read_bounded(path: Path | Traversable, what: str = "config") -> str:
    """The text of ``path``, a regular file of at most MAX_FILE_BYTES (or a built-in file
    inside the package); ConfigError, without the path, for anything else (a device such
    as /dev/zero, a FIFO, a folder, a file too large to be a ``what``), before reading
    more than that."""
    if not isinstance(path, Path):
        return path.read_text(encoding="utf-8")     # a built-in config, in the package
    if not path.is_file():
        raise ConfigError("not a regular file")
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ConfigError(f"larger than {MAX_FILE_BYTES // 2**20} MB: not a {what}")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}") from None


def locate(config: str | Path) -> Path | Traversable:
    """The file a config argument names: the path if it exists, else the built-in config of
    that name; ConfigError naming the closest built-in configs if neither exists."""
    path = Path(config)
    if path.exists():
        return path
    builtin = builtin_configs.find(str(config))
    if builtin is not None:
        return builtin
    raise ConfigError(f"config not found: {config} is neither a file nor a built-in config; "
                      f"{builtin_configs.suggestion(str(config))}")


def parse_value(text: str) -> Any:
    """A TOML value (number, bool, list, quoted string), or a bare word as a string;
    ConfigError for one Python cannot hold (an integer of over 4300 digits, lists nested
    past the recursion limit)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"value {_shortened(text)}: not readable ({_shortened(str(exc))})") \
            from None


def _shortened(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was (a message stays one
    short line whatever was sent)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def toml_value(value: Any) -> str:
    """``value`` in the syntax ``--set`` parses (settings.config.parse_value) back to an equal
    value: floats by repr (which round-trips exactly), strings quoted, lists and tables
    inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML value for {value!r}")


def apply_override(raw: dict, item: str) -> None:
    """Apply one ``dotted.key=value`` to the raw (unvalidated) config in place.

    A table of a list of tables is named by its 0-based index, ``faults.jam[1].t1=3.0``;
    the index one past the last appends a table, and a single table counts as a list of one.
    """
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    dotted, text = item.split("=", 1)
    apply_value(raw, dotted.strip(), parse_value(text.strip()))


def apply_value(raw: dict, dotted: str, value: Any) -> None:
    """Set the key ``dotted`` (as in apply_override) of the raw config to ``value``, a TOML
    value (what parse_value returns) that is not validated here."""
    parts = dotted.split(".")
    if INDEXED.fullmatch(parts[-1]):
        raise ConfigError(f"--set {dotted}: an index names a table of a list of tables, "
                          "not a value")
    node = raw
    for depth, part in enumerate(parts[:-1]):
        indexed = INDEXED.fullmatch(part)
        if indexed:
            child = _listed_table(node, indexed[1], int(indexed[2]), dotted,
                                  ".".join(parts[:depth] + [indexed[1]]))
        else:
            child = node.setdefault(part, {})
        if isinstance(child, list):
            raise ConfigError(f"--set {dotted}: '{'.'.join(parts[:depth + 1])}' is a list of "
                              f"tables in this config; name one by its index, "
                              f"{'.'.join(parts[:depth + 1])}[0].{'.'.join(parts[depth + 1:])}")
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: '{'.'.join(parts[:depth + 1])}' is a value, "
                              "not a table")
        node = child
    node[parts[-1]] = value


OFFLINE_ONLY = ("position_noise", "velocity_noise", "command_latency")   # sim.* keys


def refuse_offline_only(cfg: Config, command: str) -> None:
    """ConfigError if ``cfg`` sets a measurement noise or command latency, which only the
    offline runs (rt.sim) model, for ``hil COMMAND``, whose noise and latency are its
    link's."""
    for key in OFFLINE_ONLY:
        if getattr(cfg.sim, key) != 0.0:
            raise ConfigError(f"sim.{key}: modelled by the offline runs only (hil sim, hil "
                              f"campaign); `hil {command}` measures through its link, whose "
                              "emulator has its own noise and latency keys")


def refuse_link_faults(cfg: Config, command: str) -> None:
    """ConfigError naming the first [[faults.KIND]] table of a link kind (drop, delay, ...:
    devices.link_faults) in ``cfg``, for ``hil COMMAND`` (run, sim), which has no emulated
    device for it to act in: no table is ignored silently."""
    from hilrig.plant.faults import KINDS, LINK

    for kind in (name for name, spec in KINDS.items() if spec.family == LINK):
        if getattr(cfg.faults, kind):
            raise ConfigError(f"faults.{kind}: a link fault acts in the emulated devices of "
                              f"`hil emulate` (under `hil control`); `hil {command}` has no "
                              "link to fault: run the config with those, or remove the table")


INDEXED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]")


def _listed_table(node: dict, name: str, index: int, dotted: str, where: str) -> dict:
    """Table ``index`` of the list of tables ``node[name]`` (a single table is a list of one;
    the index one past the end appends an empty table)."""
    items = node.get(name, [])
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ConfigError(f"--set {dotted}: '{where}' is a value, not a list of tables")
    if index > len(items):
        names = f"index 0..{len(items) - 1} names one, " if items else ""
        raise ConfigError(f"--set {dotted}: '{where}' has {len(items)} table(s); "
                          f"{names}{len(items)} appends one")
    if index == len(items):
        items.append({})
    node[name] = items
    return items[index]


# -- validation -------------------------------------------------------------------

def resolve(raw: dict) -> Config:
    """Validate a raw config and return it with every default filled in, typed by the
    declarations that validated it (its plant model's and links' keys included)."""
    raw = copied(raw)
    refuse_unknown_keys(raw, SCHEMA, "", EXTENDED)
    frame = frame_of(raw)
    out = check_table(raw, frame.schema, "", frame.sizes)
    complete(out, frame, isinstance(raw.get("faults", {}).get("jam"), list))
    return typed(out, frame.schema)


@dataclass(frozen=True)
class Frame:
    """What a raw config's validation follows: its plant model, the declarations of its
    keys (SCHEMA with the model's, the controller type's and the links' own), its sizes
    (nq, nact) and the links whose tables it has."""

    model: PlantModel
    schema: dict
    sizes: dict
    links: dict


def frame_of(raw: dict) -> Frame:
    """The Frame of a raw config, from its plant.model, controller.type and link tables."""
    plant_raw = raw.get("plant", {})
    if not isinstance(plant_raw, dict):
        raise ConfigError("plant: expected a table")
    model = plant_raw.get("model")
    if model is None or not isinstance(model, str):
        known = ", ".join(repr(name) for name in sorted(registered(PLANT_MODELS)))
        if model is None:
            raise ConfigError(f"plant.model: missing (one of {known}, or 'package.module:MODEL')")
        raise ConfigError(f"plant.model: must be one of {known} or 'package.module:MODEL', "
                          f"got {model!r}")
    from hilrig.controllers.factory import controller_spec
    from hilrig.plant.factory import plant_model

    spec = plant_model(model)
    # the tables this config extends are copied, the declarations (frozen Keys) shared
    schema = dict(SCHEMA, plant={**SCHEMA["plant"], **spec.keys},
                  controller=dict(SCHEMA["controller"]), link=dict(SCHEMA["link"]))
    nq, nact = spec.sizes(plant_raw)
    controller = raw.get("controller", {})
    kind = controller.get("type", SCHEMA["controller"]["type"].default) \
        if isinstance(controller, dict) else None
    if not isinstance(kind, str):
        raise ConfigError(f"controller.type: expected a string, got {kind!r}")
    if not (isinstance(controller, dict) and "law" in controller and "type" not in controller):
        # a law named by controller.law has no type keys: nothing registered is loaded
        schema["controller"].update(controller_spec(kind).keys)
    links_used = _link_specs(raw)
    for name, link in links_used.items():
        if link.keys:
            schema["link"][name] = link.keys
    return Frame(spec, schema, {"nq": nq, "nact": nact}, links_used)


def complete(out: dict, frame: Frame, listed: bool) -> None:
    """The rules across keys of a config whose tables ``check_table`` checked (``out``,
    completed in place): jams, the model's defaults (plant.drive, q0, qd0,
    controller.output), the other faults (plant.faults), the links' checks and the consistency of the whole. ``listed``:
    faults.jam was a list of tables (its messages name the index)."""
    _check_jams(out, frame.sizes, listed, frame.model)
    _fill_model_defaults(out, frame.sizes, frame.model)
    _check_faults(out, frame.sizes, frame.model)
    for link in frame.links.values():
        if link.check is not None:
            link.check(out, frame.sizes)
    _check_consistency(out, frame.sizes)


def copied(tree: Any) -> Any:
    """A copy of a TOML tree: its tables and lists copied, its leaves (immutable) shared;
    a few times faster than copy.deepcopy."""
    if isinstance(tree, dict):
        return {key: copied(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [copied(value) for value in tree]
    return tree


def _link_specs(raw: dict) -> dict:
    """The LinkSpecs whose tables this config has: link.type's (default inprocess) and
    every [link.NAME] table of a registered link (another table is an unknown key)."""
    link = raw.get("link", {})
    if not isinstance(link, dict):
        raise ConfigError("link: expected a table")
    selected = link.get("type", SCHEMA["link"]["type"].default)
    if not isinstance(selected, str):
        raise ConfigError(f"link.type: expected a string, got {selected!r}")
    names = {selected} | {name for name, value in link.items()
                          if isinstance(value, dict) and name in links()}
    return {name: link_spec(name) for name in sorted(names)}


# the tables whose keys depend on the plant model, the controller type or the links: their
# declarations are known only once those are imported (frame_of)
EXTENDED = ("plant", "controller", "link")


def refuse_unknown_keys(raw: Any, schema: dict, prefix: str, skip: tuple = ()) -> None:
    """ConfigError naming the first key of the table ``raw`` (and of its plain sub-tables
    but those named in ``skip``) that ``schema`` does not declare, with the closest known
    one. ``resolve`` calls it on the common tables first, so that a misspelt key is one
    line before frame_of imports (and may compile) the model's and the law's kernels."""
    if not isinstance(raw, dict):
        return                       # check_table says what it expected
    for key, value in raw.items():
        if key not in schema:
            hint = difflib.get_close_matches(key, list(schema), n=1)
            extra = f" (did you mean '{prefix}{hint[0]}'?)" if hint else \
                f" (known: {', '.join(sorted(schema))})"
            raise ConfigError(f"unknown key '{prefix}{key}'{extra}")
        spec = schema[key]
        if isinstance(spec, dict) and not isinstance(spec, Tables) and key not in skip:
            refuse_unknown_keys(value, spec, f"{prefix}{key}.")


def check_table(raw: Any, schema: dict, prefix: str, sizes: dict) -> dict:
    """The raw table checked against its declarations (``schema``), every default filled
    in; ConfigError naming the first bad key (``prefix`` + its name)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a table")
    refuse_unknown_keys(raw, schema, prefix)
    out: dict = {}
    for key, spec in schema.items():
        name = prefix + key
        if isinstance(spec, dict):
            if isinstance(spec, Tables):      # a table or a list of tables
                value = raw.get(key, [])
                items = value if isinstance(value, list) else [value]
                out[key] = [check_table(item, spec, f"{name}[{i}]." if isinstance(value, list)
                                         else f"{name}.", sizes) for i, item in enumerate(items)]
            else:
                out[key] = check_table(raw.get(key, {}), spec, name + ".", sizes)
        else:
            out[key] = check_value(raw[key], spec, name, sizes) if key in raw else \
                _default(spec, name, sizes)
    return out


def _default(spec: Key, name: str, sizes: dict) -> Any:
    if spec.required:
        raise ConfigError(f"{name}: missing ({spec.doc or spec.kind})")
    if spec.default is None:
        return None
    return check_value(spec.default, spec, name, sizes)


def check_value(value: Any, spec: Key, name: str, sizes: dict) -> Any:
    """A raw value checked against its declaration (``spec``; lists of ``spec.length``
    given by ``sizes``), as the resolved config holds it; ConfigError naming ``name``."""
    kind = spec.kind
    if kind == "ints":
        length = sizes.get(spec.length, spec.length)
        if not isinstance(value, list) or len(value) != length:
            raise ConfigError(f"{name}: expected a list of {length} integers, got {value!r}")
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"{name}[{i}]: expected an integer, got {v!r}")
        return list(value)
    if kind == "bools":
        length = sizes.get(spec.length, spec.length)
        if isinstance(value, bool) and spec.scalar_ok:
            value = [value] * length
        if not isinstance(value, list) or len(value) != length:
            raise ConfigError(f"{name}: expected true, false or a list of {length} of them "
                              f"(one per actuated joint), got {value!r}")
        for i, v in enumerate(value):
            if not isinstance(v, bool):
                raise ConfigError(f"{name}[{i}]: expected true or false, got {v!r}")
        return list(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected a string, got {value!r}")
        if spec.choices and value not in spec.choices:
            raise ConfigError(f"{name}: must be one of {list(spec.choices)}, got {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        if spec.choices and value not in spec.choices:
            raise ConfigError(f"{name}: must be one of {list(spec.choices)}, got {value!r}")
        _check_range(float(value), spec, name)
        return value
    if kind == "float":
        return _number(value, spec, name)
    if kind == "pairs":
        return _pairs(value, spec, name, sizes)
    # floats: a list of numbers
    length = sizes.get(spec.length, spec.length) if isinstance(spec.length, str) else spec.length
    if not isinstance(value, list):
        if spec.scalar_ok and length is not None:
            value = [value] * length
        else:
            raise ConfigError(f"{name}: expected a list of numbers"
                              + (f" of length {length}" if length else "") + f", got {value!r}")
    if length is not None and len(value) != length:
        what = {"nq": "one per coordinate", "nact": "one per actuated joint"}.get(spec.length, "")
        raise ConfigError(f"{name}: expected {length} values ({what}), got {len(value)}"
                          if what else f"{name}: expected {length} values, got {len(value)}")
    return [_number(v, spec, f"{name}[{i}]") for i, v in enumerate(value)]


def _pairs(value: Any, spec: Key, name: str, sizes: dict) -> list:
    """A list of [int, int] pairs, one per entry of ``spec.length``."""
    length = sizes.get(spec.length, spec.length)
    if not isinstance(value, list):
        raise ConfigError(f"{name}: expected a list of [int, int] pairs, got {value!r}")
    if length is not None and len(value) != length:
        raise ConfigError(f"{name}: expected {length} pairs (one per actuated joint), "
                          f"got {len(value)}")
    for i, pair in enumerate(value):
        if (not isinstance(pair, list) or len(pair) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in pair)):
            raise ConfigError(f"{name}[{i}]: expected a pair of integers, got {pair!r}")
    return [list(pair) for pair in value]


def _number(value: Any, spec: Key, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    try:
        value = float(value)
    except OverflowError:
        raise ConfigError(f"{name}: must be finite, got an integer of {len(str(value))} "
                          "digits") from None
    if not math.isfinite(value) and not (spec.infinite_ok and math.isinf(value)):
        raise ConfigError(f"{name}: must be finite, got {value}")
    _check_range(value, spec, name)
    return value


def _check_range(value: float, spec: Key, name: str) -> None:
    if spec.positive and value <= 0.0:
        raise ConfigError(f"{name}: must be > 0, got {value}")
    if spec.minimum is not None and value < spec.minimum:
        raise ConfigError(f"{name}: must be >= {spec.minimum}, got {value}")


def _check_jams(cfg: dict, sizes: dict, listed: bool, spec: PlantModel) -> None:
    from hilrig.plant.jam import jam_duration_error

    for i, jam in enumerate(cfg["faults"]["jam"]):
        name = f"faults.jam[{i}]" if listed else "faults.jam"
        error = jam_duration_error(jam["duration"])
        if error is not None:
            raise ConfigError(f"{name}.duration: {error}")
        if not 1 <= jam["joint"] <= sizes["nact"]:
            raise ConfigError(f"{name}.joint: must be 1..{sizes['nact']}, got {jam['joint']}")
    if cfg["faults"]["jam"] and not spec.jams:
        raise ConfigError(f"faults.jam: jams are modelled for chains (serial arms, a user's "
                          f"chain), not for plant.model = {cfg['plant']['model']!r}")
    safety = cfg["safety"]
    if any(safety["brake"]) and not spec.jams:
        raise ConfigError(f"safety.brake: a brake stops its joint by the jam law, modelled "
                          f"for chains (serial arms, a user's chain), not for plant.model = "
                          f"{cfg['plant']['model']!r}")
    error = jam_duration_error(safety["brake_time"])
    if error is not None:
        raise ConfigError(f"safety.brake_time: {error}")


def _check_faults(cfg: dict, sizes: dict, spec: PlantModel) -> None:
    """The [[faults.KIND]] tables (plant.faults): joints in range, the plant and drive a
    kind needs, intermittent phases given in full, the kind's own parameters."""
    from hilrig.plant.faults import ACTUATOR, KINDS, SENSOR, TABLE_KINDS, check_row

    for kind in TABLE_KINDS:
        family = KINDS[kind]
        for i, fault in enumerate(cfg["faults"][kind]):
            name = f"faults.{kind}[{i}]"
            if not 1 <= fault["joint"] <= sizes["nact"]:
                raise ConfigError(f"{name}.joint: must be 1..{sizes['nact']}, got "
                                  f"{fault['joint']}")
            when = fault["when_joint"]
            if when is not None and not 1 <= when <= sizes["nq"]:
                raise ConfigError(f"{name}.when_joint: must be 1..{sizes['nq']}, got {when}")
            if (fault["mean_on"] is None) != (fault["mean_off"] is None):
                raise ConfigError(f"{name}: an intermittent fault needs both mean_on and "
                                  "mean_off (s)")
            if kind == "brake" and not spec.jams:
                raise ConfigError(f"{name}: a brake stops its joint by the jam law, modelled "
                                  f"for chains (serial arms, a user's chain), not for "
                                  f"plant.model = {cfg['plant']['model']!r}")
            if family.family == ACTUATOR and not spec.takes_actuator_faults():
                raise ConfigError(f"{name}: actuator faults are not modelled for plant.model "
                                  f"= {cfg['plant']['model']!r}")
            if family.motor and cfg["plant"]["drive"] == "torque":
                raise ConfigError(f"{name}: needs a motor model (plant.drive = 'voltage' or "
                                  "'voltage_full'), not a torque drive")
            if family.family == SENSOR and cfg["sim"]["integrator"] == "accurate":
                raise ConfigError(f"{name}: sensor faults act on the sampled measurement; "
                                  "sim.integrator = 'accurate' has none")
            error = check_row(kind, {p: fault[p] for p in family.params})
            if error is not None:
                raise ConfigError(f"{name}: {error}")


def _fill_model_defaults(cfg: dict, sizes: dict, spec: PlantModel) -> None:
    plant = cfg["plant"]
    if plant["drive"] is None:
        plant["drive"] = spec.default_drive
    if plant["q0"] is None:
        plant["q0"] = [0.0] * sizes["nq"]
    if plant["qd0"] is None:
        plant["qd0"] = [0.0] * sizes["nq"]
    ctrl = cfg["controller"]
    if ctrl["output"] is None:
        unit = command_unit(cfg["link"]["type"], plant["drive"])
        ctrl["output"] = "torque" if unit == "N m" else "voltage"


def _check_consistency(cfg: dict, sizes: dict) -> None:
    plant, ctrl, inp, sim = cfg["plant"], cfg["controller"], cfg["input"], cfg["sim"]
    steps = sim["duration"] / sim["dt"]
    if steps < 1.0 - 1e-9 or abs(steps - round(steps)) > 1e-6:
        raise ConfigError(f"sim.duration: {sim['duration']} s is not a whole number of steps of "
                          f"sim.dt = {sim['dt']} s")
    _check_run_length(steps, sizes, sim)
    latency = sim["command_latency"] / sim["dt"]
    if abs(latency - round(latency)) > 1e-6:
        raise ConfigError(f"sim.command_latency: {sim['command_latency']} s is not a whole "
                          f"number of steps of sim.dt = {sim['dt']} s")
    if sim["integrator"] == "accurate":
        for key in OFFLINE_ONLY:
            if sim[key] != 0.0:
                raise ConfigError(f"sim.{key}: modelled by the fixed-step runs only "
                                  "(sim.integrator = 'rk4' or 'euler'), not 'accurate'")
    # what the link takes (torque-mode drives take torques, whatever drives the plant)
    voltage_driven = command_unit(cfg["link"]["type"], plant["drive"]) == "V"
    if voltage_driven and inp["torque"] is not None:
        raise ConfigError("input.torque: the plant is voltage-driven (plant.drive = "
                          f"{plant['drive']!r}); give input.voltage instead")
    if not voltage_driven and inp["voltage"] is not None:
        raise ConfigError("input.voltage: the plant is torque-driven (plant.drive = 'torque'); "
                          "give input.torque or set plant.drive = 'voltage'")
    _check_controller(ctrl, voltage_driven)
    from hilrig.controllers.factory import check_law, controller_spec
    from hilrig.plant.factory import plant_model

    if ctrl["law"] is not None:     # before any kernel compiles
        if ctrl["with_model"] and plant_model(plant["model"]).model_block is None:
            raise ConfigError(f"controller.with_model: plant.model = {plant['model']!r} has "
                              "no rigid-body model for a law (plant.model_kernels: the URDF "
                              "arm and the serial arm have one)")
        check_law(ctrl["law"], ctrl["params"], ctrl["state_size"], sizes["nact"],
                  ctrl["with_model"])
    elif controller_spec(ctrl["type"]).check is not None:
        controller_spec(ctrl["type"]).check(cfg, voltage_driven)
    if 0 < cfg["telemetry"]["ring_rows"] < 16:
        raise ConfigError(f"telemetry.ring_rows: at least 16 rows (0: 4 s of ticks), got "
                          f"{cfg['telemetry']['ring_rows']}")
    for table in ("loop", "emulator"):
        if cfg[table]["fifo_priority"] > 99:
            raise ConfigError(f"{table}.fifo_priority: SCHED_FIFO priorities are 1..99 (0: "
                              f"off), got {cfg[table]['fifo_priority']}")
    if cfg["sim"]["control"] == "continuous" and cfg["sim"]["integrator"] != "accurate":
        raise ConfigError("sim.control: 'continuous' needs sim.integrator = 'accurate' (a "
                          "fixed-step run holds the command over each step)")
    if cfg["sim"]["integrator"] == "rosenbrock" and not plant_model(plant["model"]).stiff_step:
        raise ConfigError(f"sim.integrator: 'rosenbrock' does not step plant.model = "
                          f"{plant['model']!r}; use 'rk4' or 'accurate'")
    if cfg["sim"]["integrator"] == "rosenbrock" and plant["drive"] == "voltage_full":
        raise ConfigError("sim.integrator: 'rosenbrock' steps plants without current states "
                          "(not plant.drive = 'voltage_full'); use 'rk4' or 'accurate'")
    if plant["drive"] == "voltage_full" and cfg["sim"]["integrator"] != "accurate":
        tau = min(l / r for l, r in zip(plant["motor"]["inductance"], plant["motor"]["resistance"]))
        if cfg["sim"]["dt"] > 2.5 * tau:
            raise ConfigError(f"sim.dt: {cfg['sim']['dt']} s is too long for the full motor "
                              f"model (electrical time constant L_a/R_a = {tau:.3g} s; a fixed "
                              "step must stay below about 2.5 L_a/R_a). Use plant.drive = "
                              "'voltage' (L_a di/dt = 0), a smaller sim.dt, or "
                              "sim.integrator = 'accurate'")


# what a run keeps per tick, in float64 values besides the state: command, currents,
# diagnostics, time and the real-time loop's timing records
VALUES_PER_TICK = 16


@lru_cache(maxsize=1)
def memory_bytes() -> int:
    """This machine's physical memory, bytes (0 if the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def _check_run_length(steps: float, sizes: dict, sim: dict) -> None:
    """A run's per-tick records (hil sim's rows, hil run's timing) must fit in memory."""
    per_tick = 8 * (2 * sizes["nq"] + 3 * sizes["nact"] + VALUES_PER_TICK)
    memory = memory_bytes()
    if memory and steps * per_tick > memory / 2:
        raise ConfigError(
            f"sim.duration / sim.dt: {sim['duration']:g} s in steps of {sim['dt']:g} s is "
            f"{steps:.3g} ticks, whose records ({per_tick} bytes each, {steps * per_tick / 1e9:.3g}"
            f" GB) do not fit in half of this machine's memory ({memory / 1e9:.3g} GB); "
            "shorten sim.duration or lengthen sim.dt")


def _check_controller(ctrl: dict, voltage_driven: bool) -> None:
    """controller.law stands alone: no controller.type beside it."""
    if ctrl["law"] is None:
        if ctrl["params"] or ctrl["state_size"]:
            raise ConfigError("controller.params: only for a law named by controller.law")
        if ctrl["detection_slot"] is not None:
            raise ConfigError("controller.detection_slot: only for a law named by "
                              "controller.law")
        return
    if ctrl["detection_slot"] is not None and ctrl["detection_slot"] >= ctrl["state_size"]:
        raise ConfigError(f"controller.detection_slot: {ctrl['detection_slot']} is not an "
                          f"entry of the law's state (controller.state_size = "
                          f"{ctrl['state_size']})")
    if ctrl["type"] != "open_loop":
        raise ConfigError(f"controller.law: give controller.law or controller.type, not both "
                          f"(controller.type = {ctrl['type']!r})")
    if ctrl["output"] == ("torque" if voltage_driven else "voltage"):
        raise ConfigError("controller.output: a law named by controller.law writes what the "
                          f"link takes ({'V' if voltage_driven else 'N m'}); leave "
                          "controller.output unset")


