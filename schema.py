"""Declarations of config keys (``Key``) and the typed config they give (``Config``),
importable from every layer.

Each part declares the keys it owns (a plant model its ``[plant]`` keys, a link its
``[link.NAME]`` table, ...); hilrig.settings.config validates a whole config against the
declarations it collects from the registries, then ``typed`` makes the resolved config
a ``Config`` of frozen dataclasses from the same declarations.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Optional


@dataclass(frozen=True)
class Key:
    """Declaration of one config key.

    kind: "float", "int", "bool", "str", "floats" (list of numbers, or one number
    broadcast when ``scalar_ok``), "ints", "pairs" (list of [int, int]). length: None,
    an int, or the name of a size resolved from the plant ("nq" coordinates, "nact"
    actuated joints). doc: what the value means, with its unit.
    """

    kind: str
    default: Any = None
    length: Any = None
    choices: tuple = ()
    minimum: float | None = None
    positive: bool = False
    scalar_ok: bool = False
    required: bool = False
    doc: str = ""
    infinite_ok: bool = False     # a float that may be inf (a limit switched off on purpose)


# -- the typed view of a resolved config ------------------------------------------------

ANNOTATIONS = {"float": float, "int": int, "bool": bool, "str": str,
               "floats": tuple[float, ...], "ints": tuple[int, ...],
               "pairs": tuple[tuple[int, int], ...]}


class Table:
    """Base of the frozen dataclass of one table of a resolved config (``typed``)."""

    _shape: ClassVar[tuple]

    def __reduce__(self) -> tuple:
        # the classes are made at run time: pickle the plain table and its shape
        return _rebuild, (plain(self), type(self).__name__, self._shape)


class Config(Table):
    """A resolved config, typed and immutable: one frozen dataclass per table.

    Made by ``typed`` from the declarations that validated it, so every key, a plant
    model's and a link's own included, is an attribute of its declared type: ``cfg.sim.dt``
    (float), ``cfg.plant.motor.gear_ratio`` (tuple of float), ``cfg.faults.jam`` (a tuple
    of tables). ``to_dict()`` is the resolved dict (the ``meta`` of every log);
    ``replace(**changes)`` a derived config (not validated again).
    """

    def to_dict(self) -> dict:
        """The resolved config as a plain nested dict (lists, not tuples)."""
        return plain(self)

    def replace(self, **changes: Any) -> Config:
        """A copy with the given top-level tables replaced (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


def typed(resolved: dict, schema: dict) -> Config:
    """The typed view of a resolved config, with the classes that ``schema`` (the
    declarations that validated it) gives: each key an attribute of its ``Key.kind``,
    lists as tuples, a list of tables (faults.jam) as a tuple of dataclasses."""
    return _rebuild(resolved, "Config", _shape(resolved, schema))


def retyped(table: Table, key: str, resolved: Any) -> Table:
    """``table`` (a typed table) with its key ``key`` replaced by the typed view of
    ``resolved`` (the resolved value, or table, or list of tables, that typed would have
    read there): equal to typed() of the whole with that one change."""
    for name, kind, _ in type(table)._shape:
        if name == key:
            break
    else:
        raise KeyError(key)
    if isinstance(kind, tuple):
        how, sub = kind
        child = _child(type(table).__name__, key)
        value = (tuple(_rebuild(item, child, sub) for item in resolved) if how == "tables"
                 else _rebuild(resolved, child, sub))
    else:
        value = _frozen(resolved)
    return dataclasses.replace(table, **{key: value})


def plain(value: Any) -> Any:
    """A typed table (or one of its values) as in the resolved dict: dicts and lists."""
    if isinstance(value, Table):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [plain(item) for item in value]
    return value


def _shape(resolved: dict, schema: dict) -> tuple:
    """(key, kind, optional) per key, kind a Key.kind or ("table" or "tables", shape):
    all that the classes depend on, hashable, so that equal schemas share classes."""
    shape = []
    for key, spec in schema.items():
        if isinstance(spec, dict):
            value = resolved.get(key, {})
            listed = isinstance(value, list)
            shape.append((key, ("tables" if listed else "table",
                                _shape({} if listed else value, spec)), False))
        else:
            shape.append((key, spec.kind, spec.default is None and not spec.required))
    return tuple(shape)


def _child(name: str, key: str) -> str:
    """The class name of table ``key`` inside the table of class ``name``: PlantMotor."""
    return ("" if name == "Config" else name) + key.title().replace("_", "")


@lru_cache(maxsize=None)
def _table_class(name: str, shape: tuple) -> type:
    fields = []
    for key, kind, optional in shape:
        if isinstance(kind, tuple):
            how, sub = kind
            table = _table_class(_child(name, key), sub)
            annotation = tuple[table, ...] if how == "tables" else table
        else:
            annotation = Optional[ANNOTATIONS[kind]] if optional else ANNOTATIONS[kind]
        fields.append((key, annotation))
    return dataclasses.make_dataclass(
        name, fields, bases=(Config if name == "Config" else Table,), frozen=True,
        namespace={"_shape": shape, "__module__": __name__})


def _rebuild(value: dict, name: str, shape: tuple) -> Table:
    values = {}
    for key, kind, _ in shape:
        item = value[key]
        if isinstance(kind, tuple):
            how, sub = kind
            child = _child(name, key)
            values[key] = (tuple(_rebuild(v, child, sub) for v in item) if how == "tables"
                           else _rebuild(item, child, sub))
        else:
            values[key] = _frozen(item)
    return _table_class(name, shape)(**values)


def _frozen(value: Any) -> Any:
    return tuple(_frozen(item) for item in value) if isinstance(value, list) else value
