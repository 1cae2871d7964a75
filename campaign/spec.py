"""Campaign specs (``hil campaign SPEC.toml``, docs/CAMPAIGNS.md): a base config, the axes
that vary it, the run length, what is measured and the pass/fail criteria.

A spec enumerates its scenarios without running anything: scenario ``id`` is grid cell
``id // samples`` (the grid axes' values, the first axis slowest) and random draw
``id % samples``, whose random values come from a generator seeded with
``[campaign.seed, id]``, so a scenario is the same whatever the batching, the workers
or an interrupted and resumed run. A scenario is a list of ``key=value`` overrides in
the syntax of ``hil sim --set``: applied to the base config in order they give exactly
the config a ``hil sim BASE --set ...`` of the same line runs.

``load_spec`` checks the whole spec before any scenario runs: every axis value and
range is resolved against the base config, every criterion names a metric that the
scenarios have; a mistake is one ConfigError line naming the spec and the key.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from hilrig.errors import ConfigError
from hilrig.settings import builtin_configs
from hilrig.campaign.metrics import METRICS, MetricSettings, unavailable
from hilrig.settings.config import (apply_override, read_bounded, refuse_link_faults, resolve,
                                    toml_value)
from hilrig.campaign.scenarios import FAULT, ScenarioConfigs, fault_overrides
from hilrig.schema import Config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SPECS = "campaigns"            # the built-in specs' folder in hilrig.configs
TABLES = ("campaign", "set", "axis", "metrics", "criteria")
CAMPAIGN_KEYS = ("base", "duration", "samples", "seed", "batch", "plot")
GRID_KINDS = ("values", "linspace")            # enumerated: their product is the grid
RANDOM_KINDS = ("uniform", "relative", "choice")   # drawn per scenario
METRIC_KEYS = ("settle_time", "reach_tolerance")
MAX_SCENARIOS = 2_000_000      # per campaign: the client holds their ids (split a bigger one)
MAX_AXIS_VALUES = 10_000       # per grid axis or choice: each is checked before anything runs


@dataclass(frozen=True)
class Axis:
    """One varied config key. kind: "values" or "linspace" (grid), "uniform", "relative"
    or "choice" (random). values: the grid's values or the choices; low, high: the
    uniform range; spread: the relative half-range; base: the value a relative axis
    perturbs (a number or a list of numbers, from the base config)."""

    key: str
    kind: str
    values: tuple = ()
    low: float = 0.0
    high: float = 0.0
    spread: float = 0.0
    base: Any = None

    @property
    def random(self) -> bool:
        return self.kind in RANDOM_KINDS

    def draw(self, rng: np.random.Generator) -> Any:
        """One random value of this axis."""
        if self.kind == "uniform":
            return float(rng.uniform(self.low, self.high))
        if self.kind == "choice":
            return self.values[int(rng.integers(len(self.values)))]
        if isinstance(self.base, list):
            return [float(v * (1.0 + rng.uniform(-self.spread, self.spread)))
                    for v in self.base]
        return float(self.base * (1.0 + rng.uniform(-self.spread, self.spread)))


@dataclass(frozen=True)
class Scenario:
    """One scenario: its id, the value of each axis (by key) and its overrides."""

    id: int
    values: dict
    overrides: tuple


@dataclass(frozen=True)
class CampaignSpec:
    """A checked spec (``load_spec``).

    base: the base config as ``hil sim`` takes it (a path or a built-in name);
    base_raw: its TOML with the fixed overrides applied; fixed: those overrides ([set]
    and campaign.duration) as ``--set`` items; digest: identifies the spec and its base
    (an output directory holds one campaign).
    """

    path: Path
    base: str
    base_raw: dict
    fixed: tuple
    axes: tuple
    samples: int
    seed: int
    batch: int | None
    plot: tuple
    settings: MetricSettings
    criteria: dict
    digest: str
    duration: float
    grid_shape: tuple = field(default=())

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def count(self) -> int:
        """Number of scenarios: the grid's cells times the samples."""
        return math.prod(self.grid_shape) * self.samples

    def scenario(self, sid: int) -> Scenario:
        """Scenario ``sid`` (0 <= sid < count)."""
        if not 0 <= sid < self.count:
            raise IndexError(f"scenario {sid} of {self.count}")
        cell = np.unravel_index(sid // self.samples, self.grid_shape) if self.grid_shape \
            else ()
        grid = [axis for axis in self.axes if not axis.random]
        values = {axis.key: axis.values[int(i)] for axis, i in zip(grid, cell)}
        rng = np.random.default_rng([self.seed, sid])
        for axis in self.axes:
            if axis.random:
                values[axis.key] = axis.draw(rng)
        ordered = {axis.key: values[axis.key] for axis in self.axes}
        overrides = fault_overrides(self.base_raw.get(FAULT, {}), ordered.items())
        return Scenario(sid, ordered, tuple(f"{key}={toml_value(value)}"
                                            for key, value in overrides))

    def config(self, scenario: Scenario) -> Config:
        """The resolved config of a scenario, as its ``hil sim`` line would load it."""
        raw = copy.deepcopy(self.base_raw)
        raw.pop(FAULT, None)                   # in the overrides (fault_overrides)
        for item in scenario.overrides:
            apply_override(raw, item)
        return resolve(raw)

    def sim_line(self, scenario: Scenario, out: str) -> str:
        """The ``hil sim`` command that runs this scenario alone and writes ``out``."""
        varied = {item.split("=", 1)[0] for item in scenario.overrides}
        items = [item for item in self.fixed if item.split("=", 1)[0] not in varied]
        items += scenario.overrides
        sets = " ".join(f"--set {shlex.quote(item)}" for item in items)
        return f"hil sim {shlex.quote(self.base)} {sets} --out {shlex.quote(out)}"


# -- loading and checking ------------------------------------------------------------------

def load_spec(path: str | Path) -> CampaignSpec:
    """Read and check a campaign spec (a file, or the name of one in the package's
    configs/campaigns); ConfigError (one line, naming the spec and the key) on any
    mistake, before anything runs."""
    path = locate_spec(path)
    try:
        text = read_bounded(path, "spec")
        raw = tomllib.loads(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        return _checked(path, text, raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def locate_spec(spec: str | Path) -> Path:
    """The spec file: the path if it exists, else the built-in spec of that name."""
    path = Path(spec)
    if path.exists():
        return path
    builtin = Path(str(builtin_configs.directory())) / SPECS / f"{spec}.toml"
    if builtin.is_file():
        return builtin
    known = ", ".join(sorted(p.stem for p in builtin.parent.glob("*.toml")))
    raise ConfigError(f"campaign spec not found: {spec} is neither a file nor a built-in "
                      f"spec ({known})")


def _checked(path: Path, text: str, raw: dict) -> CampaignSpec:
    _known(raw, TABLES, "")
    campaign = _table(raw, "campaign")
    _known(campaign, CAMPAIGN_KEYS, "campaign.")
    if "base" not in campaign or not isinstance(campaign["base"], str):
        raise ConfigError("campaign.base: missing (a config file, relative to the spec, or "
                          "the name of a built-in config)")
    base, base_text = _base(path, campaign["base"])
    try:
        base_raw = tomllib.loads(base_text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"campaign.base: {base} is not valid TOML: {exc}") from None
    fixed, faults = [], {}
    for key, value in _flat(_table(raw, "set"), ""):
        if key.split(".")[0] == FAULT:         # a fault axis's fixed keys: fault_overrides
            node = faults
            for part in key.split(".")[1:-1]:
                node = node.setdefault(part, {})
            node[key.split(".")[-1]] = value
        else:
            fixed.append(f"{key}={toml_value(value)}")
    if "duration" in campaign:
        fixed.append(f"sim.duration={toml_value(_number(campaign, 'duration', 'campaign.'))}")
    for item in fixed:
        try:
            apply_override(base_raw, item)
        except ConfigError as exc:
            raise ConfigError(f"set: {exc}") from None
    try:
        base_cfg = resolve(base_raw)
        refuse_link_faults(base_cfg, "campaign")
    except ConfigError as exc:
        raise ConfigError(f"the base config with [set]: {exc}") from None
    if faults:
        base_raw[FAULT] = faults
    samples = _integer(campaign, "samples", 1, minimum=1, maximum=MAX_SCENARIOS)
    seed = _integer(campaign, "seed", 0, minimum=0)
    batch = _integer(campaign, "batch", None, minimum=1)
    axes = _axes(raw.get("axis", []), base_cfg)
    if samples > 1 and not any(axis.random for axis in axes):
        raise ConfigError(f"campaign.samples: {samples} draws, but no axis is random "
                          f"({', '.join(RANDOM_KINDS)})")
    metrics = _table(raw, "metrics")
    _known(metrics, METRIC_KEYS, "metrics.")
    settings = MetricSettings(
        settle_time=_number(metrics, "settle_time", "metrics.", 0.0, minimum=0.0),
        reach_tolerance=_number(metrics, "reach_tolerance", "metrics.", 0.01, positive=True))
    duration = base_cfg.sim.duration
    if settings.settle_time >= duration:
        raise ConfigError(f"metrics.settle_time: {settings.settle_time} s is not before the "
                          f"end of the run (sim.duration = {duration} s)")
    criteria = _criteria(_table(raw, "criteria"))
    plot = _plot(campaign.get("plot"), axes)
    grid_shape = tuple(len(axis.values) for axis in axes if not axis.random)
    count = math.prod(grid_shape) * samples
    if count > MAX_SCENARIOS:
        shape = " x ".join(map(str, (*grid_shape, samples)))
        raise ConfigError(f"{count:,} scenarios ({shape}); a campaign runs at most "
                          f"{MAX_SCENARIOS:,}: split it into several specs")
    digest = hashlib.sha256(json.dumps([text, base_text], sort_keys=True).encode()).hexdigest()
    spec = CampaignSpec(path, base, base_raw, tuple(fixed), tuple(axes), samples, seed, batch,
                        plot, settings, criteria, digest, duration, grid_shape)
    _check_scenarios(spec)
    return spec


def _known(table: dict, known: tuple, prefix: str) -> None:
    for key in table:
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            extra = f"did you mean '{prefix}{hint[0]}'?" if hint else \
                f"known: {', '.join(known)}"
            raise ConfigError(f"unknown key '{prefix}{key}' ({extra})")


def _table(raw: dict, name: str) -> dict:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: expected a table")
    return value


def _base(spec_path: Path, base: str) -> tuple[str, str]:
    """The base as ``hil sim`` takes it (a path from here, or a built-in name) and its text."""
    beside = spec_path.parent / base
    if beside.is_file():
        try:
            return str(beside), read_bounded(beside)
        except ConfigError as exc:
            raise ConfigError(f"campaign.base: {beside}: {exc}") from None
    found = builtin_configs.find(base)
    if found is None:
        raise ConfigError(f"campaign.base: {base} is neither a file beside the spec nor a "
                          f"built-in config; {builtin_configs.suggestion(base)}")
    return base, found.read_text(encoding="utf-8")


def _flat(table: dict, prefix: str):
    """(dotted key, value) of every value of a nested table ([set] as --set items)."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def _number(table: dict, key: str, prefix: str, default: float | None = None,
            minimum: float | None = None, positive: bool = True) -> float:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise ConfigError(f"{prefix}{key}: expected a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{prefix}{key}: must be >= {minimum}, got {value}")
    if minimum is None and positive and value <= 0:
        raise ConfigError(f"{prefix}{key}: must be > 0, got {value}")
    return float(value)


def _integer(table: dict, key: str, default: int | None, minimum: int,
             maximum: int | None = None) -> int | None:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"campaign.{key}: expected an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"campaign.{key}: at most {maximum:,}, got {value:,}")
    return value


def _axes(items: Any, base_cfg: Config) -> list[Axis]:
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list) or not items:
        raise ConfigError("axis: no [[axis]] table: a campaign varies at least one key")
    axes, seen = [], set()
    for i, item in enumerate(items):
        name = f"axis[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{name}: expected a table")
        _known(item, ("key", *GRID_KINDS, *RANDOM_KINDS), f"{name}.")
        key = item.get("key")
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{name}.key: missing (the config key it varies, e.g. "
                              "'faults.jam.t1')")
        name = f"axis {key!r}"
        if key in seen:
            raise ConfigError(f"{name}: the key is varied by two axes")
        seen.add(key)
        kinds = [kind for kind in (*GRID_KINDS, *RANDOM_KINDS) if kind in item]
        if len(kinds) != 1:
            raise ConfigError(f"{name}: give exactly one of {', '.join(GRID_KINDS)} (a grid) "
                              f"or {', '.join(RANDOM_KINDS)} (random), got "
                              f"{', '.join(kinds) or 'none'}")
        axes.append(_axis(key, kinds[0], item[kinds[0]], name, base_cfg))
    return axes


def _axis(key: str, kind: str, spec: Any, name: str, base_cfg: Config) -> Axis:
    if kind in ("values", "choice"):
        if not isinstance(spec, list):
            raise ConfigError(f"{name}: {kind}: expected a list of values, got {spec!r}")
        if not spec:
            raise ConfigError(f"{name}: {kind} is empty (an axis needs at least one value)")
        if len(spec) > MAX_AXIS_VALUES:
            raise ConfigError(f"{name}: {len(spec):,} values; at most {MAX_AXIS_VALUES:,} "
                              "per axis (a random axis, 'uniform', samples a range)")
        kinds = {_kind_of(value) for value in spec}
        if len(kinds) > 1:
            raise ConfigError(f"{name}: {kind} mixes {' and '.join(sorted(kinds))}: one "
                              "kind of value per axis")
        return Axis(key, kind, values=tuple(spec))
    if kind == "linspace":
        if (not isinstance(spec, list) or len(spec) != 3
                or not all(_is_number(v) for v in spec[:2])
                or isinstance(spec[2], bool) or not isinstance(spec[2], int)):
            raise ConfigError(f"{name}: linspace: expected [first, last, count], got {spec!r}")
        if spec[2] < 1:
            raise ConfigError(f"{name}: linspace is empty (count {spec[2]}; an axis needs at "
                              "least one value)")
        if spec[2] > MAX_AXIS_VALUES:
            raise ConfigError(f"{name}: linspace of {spec[2]:,} values; at most "
                              f"{MAX_AXIS_VALUES:,} per axis (a random axis, 'uniform', "
                              "samples a range)")
        values = np.linspace(float(spec[0]), float(spec[1]), spec[2])
        return Axis(key, kind, values=tuple(float(v) for v in values))
    if kind == "uniform":
        if (not isinstance(spec, list) or len(spec) != 2 or not all(_is_number(v) for v in spec)
                or not spec[0] < spec[1]):
            raise ConfigError(f"{name}: uniform: expected [low, high] with low < high, "
                              f"got {spec!r}")
        return Axis(key, kind, low=float(spec[0]), high=float(spec[1]))
    # relative: the base value times (1 + U(-spread, spread)), element by element
    if not _is_number(spec) or not 0.0 < spec < 1.0:
        raise ConfigError(f"{name}: relative: expected a fraction between 0 and 1 (0.1: "
                          f"+-10 %), got {spec!r}")
    base = _lookup(base_cfg.to_dict(), key, name)
    numbers = base if isinstance(base, list) else [base]
    if base is None or not numbers or not all(_is_number(v) for v in numbers):
        raise ConfigError(f"{name}: relative perturbs a number or a list of numbers; the base "
                          f"config's {key} is {base!r}")
    return Axis(key, kind, spread=float(spec),
                base=[float(v) for v in base] if isinstance(base, list) else float(base))


def _kind_of(value: Any) -> str:
    """numbers, strings, booleans, lists or tables: the values of one axis share one."""
    if isinstance(value, bool):
        return "booleans"
    if isinstance(value, (int, float)):
        return "numbers"
    return {str: "strings", list: "lists", dict: "tables"}.get(type(value), "other values")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) \
        and math.isfinite(value)


def _lookup(resolved: dict, key: str, name: str) -> Any:
    """The resolved base config's value at a dotted key (faults.jam[1].t1 indexes)."""
    node: Any = resolved
    for part in key.split("."):
        index = None
        if part.endswith("]") and "[" in part:
            part, index = part[:-1].split("[", 1)
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"{name}: the base config has no key {key!r}")
        node = node[part]
        if index is not None:
            if not isinstance(node, list) or not index.isdigit() or int(index) >= len(node):
                raise ConfigError(f"{name}: the base config has no key {key!r}")
            node = node[int(index)]
    return node


def _criteria(table: dict) -> dict:
    criteria = {}
    for name, bound in table.items():
        if name not in METRICS:
            hint = difflib.get_close_matches(name, list(METRICS), n=1)
            extra = f"did you mean '{hint[0]}'?" if hint else \
                f"metrics: {', '.join(METRICS)}"
            raise ConfigError(f"criteria.{name}: no such metric ({extra})")
        if not _is_number(bound):
            raise ConfigError(f"criteria.{name}: expected a number (the metric's upper "
                              f"bound), got {bound!r}")
        criteria[name] = float(bound)
    return criteria


def _plot(plot: Any, axes: list[Axis]) -> tuple:
    keys = [axis.key for axis in axes]
    if plot is None:
        return tuple(keys[:2])
    if not isinstance(plot, list) or not 1 <= len(plot) <= 2 \
            or not all(isinstance(key, str) for key in plot):
        raise ConfigError(f"campaign.plot: expected one or two axis keys, got {plot!r}")
    for key in plot:
        if key not in keys:
            raise ConfigError(f"campaign.plot: {key!r} is not an axis ({', '.join(keys)})")
    return tuple(plot)


def _check_scenarios(spec: CampaignSpec) -> None:
    """Resolve every value each axis takes (every grid value and choice, both ends of a
    uniform range, a relative perturbation of either sign) on the base config alone,
    then with the other axes at scenario 0's values; each criterion's metric must be
    measurable on each of these scenarios. The configs are resolved as the workers
    resolve them (campaign.scenarios: resolve's configs and messages, faster)."""
    configs = ScenarioConfigs(spec.base_raw)
    first = spec.scenario(0)
    probes = [(None, None)]
    for axis in spec.axes:
        if axis.kind in ("values", "linspace", "choice"):
            extremes = axis.values
        elif axis.kind == "uniform":
            extremes = (axis.low, axis.high)
        elif isinstance(axis.base, list):
            extremes = ([v * (1 - axis.spread) for v in axis.base],
                        [v * (1 + axis.spread) for v in axis.base])
        else:
            extremes = (axis.base * (1 - axis.spread), axis.base * (1 + axis.spread))
        for value in extremes:
            try:      # (a fault key needs fault.kind: checked with scenario 0's, below)
                if axis.key.split(".")[0] != FAULT:
                    configs.config([(axis.key, value)])
            except ConfigError as exc:
                raise ConfigError(f"axis {axis.key!r} = {toml_value(value)}: {exc}") from None
            probes.append((axis.key, value))
    for key, value in probes:
        values = dict(first.values) if key is None else {**first.values, key: value}
        where = "scenario 0" if key is None else \
            f"scenario 0 with {key} = {toml_value(value)}"
        try:
            cfg = configs.config(values.items())
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if abs(cfg.sim.duration - spec.duration) > 1e-12:
            raise ConfigError("axis 'sim.duration': the run length is campaign.duration, "
                              "not an axis")
        for name in spec.criteria:
            reason = unavailable(name, cfg)
            if reason is not None:
                raise ConfigError(f"criteria.{name}: {reason} ({where})")
