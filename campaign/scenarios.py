"""The configs of many scenarios of one base config, each resolved from the base's
resolved config instead of from scratch (what ``hil campaign`` pays per scenario).

A scenario is a list of (dotted key, value) overrides: what ``hil sim BASE --set
KEY=VALUE ...`` applies (settings.config.apply_value; values as settings.config.parse_value
returns them). settings.config.resolve of the base with the overrides applied checks and
types every key of the config again, about 0.3 ms; ``ScenarioConfigs.config`` checks
only what the overrides touch, in about a tenth of that, and returns an equal Config
(field for field, bit for bit), because:

- the declarations are the base's (settings.config.Frame): an override that could change them
  (plant.model, controller.type, a link.* key, a plant key that changes the sizes) or
  that a default of the model is filled from (plant.drive) is resolved from scratch;
- a key's check (settings.config.check_value) depends on its value, its declaration and the
  sizes only, so each overridden value is checked alone;
- a jam table that an override touches (a new one included) is checked whole, from its
  raw table with the overrides applied;
- the rules across keys (settings.config.complete) run again on the result; the defaults it
  filled in the base stay right, since each is filled only where its key is unset and
  the keys they are filled from resolve from scratch;
- only the typed tables on an overridden key's path are rebuilt (hilrig.schema.retyped).

A key this does not know (or a table given as one value), and any ConfigError, go
through settings.config.resolve, so a scenario's error is resolve's own message.
tests/test_scenario_configs.py checks the equality over the shipped campaigns'
scenarios and every kind of override.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from hilrig.errors import ConfigError
from hilrig.settings.config import (
    INDEXED,
    apply_value,
    check_table,
    check_value,
    complete,
    copied,
    frame_of,
    refuse_link_faults,
    resolve,
)
from hilrig.schema import Config, Key, retyped, typed

# keys whose value decides the declarations or a filled-in default: resolved from scratch
STRUCTURAL = ("plant.model", "plant.drive", "controller.type")
STRUCTURAL_TABLES = ("link",)


class _FromScratch(Exception):
    """The overrides need settings.config.resolve."""


FAULT = "fault"       # a campaign's fault axes: fault.kind, fault.KEY, fault.KIND.PARAM


def fault_overrides(defaults: dict, overrides: Iterable[tuple[str, Any]]) -> list:
    """``overrides`` with a campaign's fault keys (docs/FAULTS.md, "Campaigns") made one
    [[faults.KIND]] table: ``fault.kind`` names the kind, ``fault.KEY`` sets a key of it
    whatever the kind (joint, t1, duration, a trigger's), ``fault.KIND.PARAM`` a parameter
    of that kind only; ``defaults`` (the spec's [set] fault keys, a raw ``fault`` table)
    first. The table ("faults.KIND", {...}) takes the place of the first fault key; no
    fault.kind: the overrides as they are."""
    overrides = list(overrides)
    flat = {f"{FAULT}.{key}": value for key, value in _flat_items(defaults)}
    where = None
    rest = []
    for dotted, value in overrides:
        if dotted.split(".")[0] == FAULT:
            flat[dotted] = value
            where = len(rest) if where is None else where
        else:
            rest.append((dotted, value))
    kind = flat.get(f"{FAULT}.kind")
    if kind is None:
        if where is not None or flat:
            raise ConfigError("fault: the fault keys of a campaign need fault.kind (an axis "
                              "or [set]): the [[faults.KIND]] table they fill")
        return overrides
    table = {}
    for dotted, value in flat.items():
        parts = dotted.split(".")[1:]
        if parts == ["kind"]:
            continue
        if len(parts) == 1:
            table[parts[0]] = value
        elif len(parts) == 2 and parts[0] == kind:
            table[parts[1]] = value
    rest.insert(len(rest) if where is None else where, (f"faults.{kind}", table))
    return rest


def _flat_items(table: dict, prefix: str = ""):
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _flat_items(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


class ScenarioConfigs:
    """Resolved configs of the base config ``base_raw`` (a raw config, as settings.config.resolve
    takes it) with a scenario's overrides; ``base`` is the base's own."""

    def __init__(self, base_raw: dict):
        self._raw = copied(base_raw)
        self._faults = self._raw.pop(FAULT, {})    # the spec's fixed fault keys
        self._frame = frame_of(self._raw)
        resolved = check_table(copied(self._raw), self._frame.schema, "", self._frame.sizes)
        jams = self._raw.get("faults", {}).get("jam")
        complete(resolved, self._frame, isinstance(jams, list))
        self._resolved = resolved
        self._raw_jams = jams
        self.base: Config = typed(resolved, self._frame.schema)   # what resolve returns

    def config(self, overrides: Iterable[tuple[str, Any]]) -> Config:
        """The base config with ``overrides`` ((dotted key, value) pairs, applied in order)
        resolved: equal to settings.config.resolve of the base with them applied, and raising
        its ConfigError where it raises."""
        overrides = fault_overrides(self._faults, overrides)
        try:
            cfg = self._incremental(overrides)
        except (_FromScratch, ConfigError):
            cfg = self._from_raw(overrides)
        refuse_link_faults(cfg, "campaign")      # a link fault has no device in a campaign
        return cfg

    def from_scratch(self, overrides: Iterable[tuple[str, Any]]) -> Config:
        """settings.config.resolve of the base with ``overrides`` applied."""
        return self._from_raw(fault_overrides(self._faults, overrides))

    def _from_raw(self, overrides: list) -> Config:
        raw = copied(self._raw)
        for dotted, value in overrides:
            apply_value(raw, dotted, value)
        return resolve(raw)

    def _incremental(self, overrides: list) -> Config:
        frame = self._frame
        leaves, jam_tables = [], {}
        for dotted, value in overrides:
            parts = dotted.split(".")
            if dotted in STRUCTURAL or parts[0] in STRUCTURAL_TABLES:
                raise _FromScratch
            if parts[0] == "faults" and len(parts) == 3 and parts[1].startswith("jam"):
                table = self._jam_table(parts[1], jam_tables)
                table[parts[2]] = value
            else:
                leaves.append((parts, _declaration(frame.schema, parts), value))
        if any(parts[0] == "plant" for parts, _, _ in leaves):
            self._check_sizes(leaves)
        resolved, cfg = dict(self._resolved), self.base
        fresh: set = set()       # the tables of ``resolved`` copied for this scenario
        for parts, spec, value in leaves:
            node = _writable(resolved, parts[:-1], fresh)
            node[parts[-1]] = check_value(value, spec, ".".join(parts), frame.sizes)
        if jam_tables:
            faults = _writable(resolved, ["faults"], fresh)
            jams = list(faults["jam"])
            jam_schema = frame.schema["faults"]["jam"]
            for index in sorted(jam_tables):
                checked = check_table(jam_tables[index], jam_schema, f"faults.jam[{index}].",
                                      frame.sizes)
                if index < len(jams):
                    jams[index] = checked
                else:
                    jams.append(checked)
            faults["jam"] = jams
        complete(resolved, frame, isinstance(self._raw_jams, list) or bool(jam_tables))
        for parts, _, _ in leaves:
            cfg = _retyped_path(cfg, parts, resolved)
        if jam_tables:
            cfg = _retyped_path(cfg, ["faults", "jam"], resolved)
        return cfg

    def _jam_table(self, part: str, tables: dict) -> dict:
        """The raw jam table that ``faults.PART.KEY`` names (PART: jam or jam[i], as
        settings.config.apply_value reads it), copied into ``tables`` (index -> raw table)."""
        jams = self._raw_jams
        listed = [] if jams is None else jams if isinstance(jams, list) else [jams]
        indexed = INDEXED.fullmatch(part)
        if indexed is None:
            if part != "jam" or isinstance(jams, list):
                raise _FromScratch     # a list named without an index: resolve's message
            index = 0
        elif indexed[1] != "jam":
            raise _FromScratch
        else:
            index = int(indexed[2])
        if index not in tables:
            if index < len(listed):
                tables[index] = dict(listed[index])
            elif index == len(listed) + sum(i >= len(listed) for i in tables):
                tables[index] = {}     # appended, as apply_value appends it
            else:
                raise _FromScratch
        return tables[index]

    def _check_sizes(self, leaves: list) -> None:
        """_FromScratch if the overridden plant keys change the model's sizes."""
        plant = dict(self._raw.get("plant", {}))
        for parts, _, value in leaves:
            if parts[0] == "plant":
                node = plant
                for part in parts[1:-1]:      # the tables on the way copied, not the rest
                    node[part] = node = dict(node.get(part, {}))
                node[parts[-1]] = value
        nq, nact = self._frame.model.sizes(plant)
        if (nq, nact) != (self._frame.sizes["nq"], self._frame.sizes["nact"]):
            raise _FromScratch


def _declaration(schema: dict, parts: list) -> Key:
    """The declaration of the value at ``parts`` (no index, no table); _FromScratch if there
    is none (an unknown key, a table, a list of tables)."""
    node: Any = schema
    for part in parts:
        if not isinstance(node, dict) or part not in node or part == "jam":
            raise _FromScratch
        node = node[part]
    if not isinstance(node, Key):
        raise _FromScratch
    return node


def _writable(resolved: dict, path: list, fresh: set) -> dict:
    """The table at ``path`` of ``resolved``, each table on the way copied once (``fresh``
    holds the ids of those already copied), so the base's stays as it is."""
    node = resolved
    for part in path:
        child = node[part]
        if id(child) not in fresh:
            child = dict(child)
            fresh.add(id(child))
            node[part] = child
        node = child
    return node


def _retyped_path(table, parts: list, resolved: dict):
    """The typed ``table`` with the value at ``parts`` taken from the resolved dict."""
    key = parts[0]
    if len(parts) == 1:
        return retyped(table, key, resolved[key])
    inner = _retyped_path(getattr(table, key), parts[1:], resolved[key])
    return dataclasses.replace(table, **{key: inner})
