"""A campaign's output directory: one Parquet part per finished batch, merged into one table.

Layout of ``--out DIR``::

    campaign.json       which campaign the directory holds (spec, digest, scenario count)
    parts/part-FIRST-LAST.parquet   the rows of one batch (scenario ids FIRST..LAST),
                        written whole (to a temporary name, then renamed) once the batch
                        is back, so a part is either complete or absent
    results.parquet     every scenario once, sorted by id (``merge``)

Columns of a row: ``id``; one per axis, named by its key, holding the scenario's value;
the metrics (campaign.metrics.METRICS, NaN where one does not apply) and ``q_end``;
``passed`` and ``failed`` (the criteria it fails, comma-separated); ``status`` and
``error``; ``simulated_s``, ``stepping_s`` (the compiled run), ``wall_s`` (the whole
scenario in its worker) and ``worker`` (host:pid); ``overrides`` (its ``--set`` items
after the spec's fixed ones). Everything but the four timing and worker columns is a
function of the scenario alone.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hilrig.errors import ConfigError
from hilrig.campaign.metrics import METRICS
from hilrig.campaign.spec import CampaignSpec, Scenario

MANIFEST = "campaign.json"
PARTS = "parts"
RESULTS = "results.parquet"


def schema(spec: CampaignSpec) -> pa.Schema:
    """The table's columns and types (the same for every part of a campaign)."""
    fields = [pa.field("id", pa.int64())]
    for axis in spec.axes:
        fields.append(pa.field(axis.key, _axis_type(axis)))
    fields += [pa.field(name, pa.float64()) for name in METRICS]
    fields += [pa.field("q_end", pa.list_(pa.float64())), pa.field("passed", pa.bool_()),
               pa.field("failed", pa.string()), pa.field("status", pa.string()),
               pa.field("error", pa.string()), pa.field("simulated_s", pa.float64()),
               pa.field("stepping_s", pa.float64()), pa.field("wall_s", pa.float64()),
               pa.field("worker", pa.string()), pa.field("overrides", pa.list_(pa.string()))]
    return pa.schema(fields, metadata={"hilrig.campaign": spec.path.name,
                                       "hilrig.digest": spec.digest})


def _axis_type(axis) -> pa.DataType:
    if axis.kind == "uniform":
        return pa.float64()
    if axis.kind == "relative":
        return pa.list_(pa.float64()) if isinstance(axis.base, list) else pa.float64()
    return pa.array(list(axis.values)).type


def claim(out: Path, spec: CampaignSpec, resume: bool) -> set:
    """Make ``out`` this campaign's directory and return the ids already done in it.

    A directory of another campaign (another spec or base config) is refused; so is one
    that holds results of this campaign unless ``resume``.
    """
    manifest = out / MANIFEST
    if manifest.exists():
        held = json.loads(manifest.read_text(encoding="utf-8"))
        if held.get("digest") != spec.digest:
            raise ConfigError(f"--out {out}: holds the campaign of {held.get('spec')!r} with "
                              "another spec or base config; choose another --out")
    done = done_ids(out)
    if done and not resume:
        raise ConfigError(f"--out {out}: holds {len(done)} of {spec.count} scenarios of this "
                          "campaign; --resume runs the rest, or choose another --out")
    (out / PARTS).mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"spec": str(spec.path), "digest": spec.digest,
                                    "scenarios": spec.count}, indent=1) + "\n",
                        encoding="utf-8")
    return done


def part_paths(out: Path) -> list[Path]:
    return sorted((out / PARTS).glob("part-*.parquet"))


def done_ids(out: Path) -> set:
    """The ids of the scenarios in the parts written so far."""
    done: set = set()
    for path in part_paths(out):
        done.update(pq.read_table(path, columns=["id"])["id"].to_pylist())
    return done


def write_part(out: Path, spec: CampaignSpec, scenarios: list[Scenario], columns: dict) -> Path:
    """Write one batch's rows (run_batch's columns joined with the scenarios' values) as
    parts/part-FIRST-LAST.parquet, atomically; writing the same batch again replaces it
    with the same rows."""
    ids = [scenario.id for scenario in scenarios]
    if columns["id"] != ids:
        raise RuntimeError(f"batch {ids[0]}..{ids[-1]}: the worker returned ids "
                           f"{columns['id'][:3]}...")
    data = dict(columns)
    for axis in spec.axes:
        data[axis.key] = [scenario.values[axis.key] for scenario in scenarios]
    data["overrides"] = [list(scenario.overrides) for scenario in scenarios]
    table = pa.Table.from_pydict({f.name: data[f.name] for f in schema(spec)}, schema(spec))
    path = out / PARTS / f"part-{ids[0]:09d}-{ids[-1]:09d}.parquet"
    temporary = path.with_suffix(".tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, path)
    return path


def merge(out: Path, spec: CampaignSpec) -> pa.Table:
    """Every part in one table, one row per scenario sorted by id, written to
    results.parquet. A scenario in two parts (identical rows) is kept once; a missing
    one is an error."""
    parts = [pq.read_table(path, schema=schema(spec)) for path in part_paths(out)]
    table = pa.concat_tables(parts) if parts else schema(spec).empty_table()
    ids = table["id"].to_numpy()
    _, first = np.unique(ids, return_index=True)     # each id's first row, by id
    table = table.take(pa.array(first))
    if len(table) != spec.count:
        missing = sorted(set(range(spec.count)) - set(table["id"].to_pylist()))
        raise RuntimeError(f"{out}: {len(missing)} scenarios missing (first: {missing[:5]})")
    temporary = out / (RESULTS + ".tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, out / RESULTS)
    return table
