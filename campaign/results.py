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
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hilrig.errors import ConfigError
from hilrig.campaign.metrics import METRICS
from hilrig.campaign.spec import CampaignSpec, Scenario

MANIFEST = "campaign.json"
MANIFEST_BYTES = 65536         # a manifest is a few lines; more is not one
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


OWN = (MANIFEST, PARTS, RESULTS, "summary.txt", "summary.png", "failing.txt")  # all it writes


def check_out(out: Path, spec: CampaignSpec, resume: bool, force: bool = False) -> set:
    """The ids of the scenarios already done in ``out`` (none with ``force``), reading
    only. ConfigError (one line) for: a path that is not a folder; a folder of another
    campaign, or one that holds other files but not this campaign's manifest (unless
    ``force``); results of this campaign without ``resume`` or ``force``; a damaged
    manifest or part."""
    if resume and force:
        raise ConfigError("--resume keeps what --out holds, --force replaces it: not both")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is not a folder")
    if not out.exists() or force:
        return set()
    manifest = out / MANIFEST
    if not manifest.is_file():
        if any(out.iterdir()):
            raise ConfigError(f"--out {out}: holds files but no campaign; choose another "
                              "--out, or --force to write this campaign into it")
        return set()
    held = _manifest(manifest)
    if held.get("digest") != spec.digest:
        raise ConfigError(f"--out {out}: holds the campaign of {held.get('spec')!r} with "
                          "another spec or base config; choose another --out (or --force "
                          "to replace it)")
    done = done_ids(out, spec)
    written = [name for name in (RESULTS, "summary.txt") if (out / name).exists()]
    if (done or written) and not resume:
        what = f"{len(done)} of {spec.count} scenarios" if done else " and ".join(written)
        raise ConfigError(f"--out {out}: holds {what} of this campaign; --resume runs the "
                          "rest, --force starts afresh, or choose another --out")
    return done


def claim(out: Path, spec: CampaignSpec, resume: bool, force: bool = False) -> set:
    """Make ``out`` this campaign's directory (``check_out``; with ``force`` first
    removing what a campaign writes there: OWN) and return the ids already done in it."""
    done = check_out(out, spec, resume, force)
    try:
        if force and out.is_dir():
            for name in OWN:
                path = out / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.exists() or path.is_symlink():
                    path.unlink()
        (out / PARTS).mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).write_text(json.dumps({"spec": str(spec.path), "digest": spec.digest,
                                                "scenarios": spec.count}, indent=1) + "\n",
                                    encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    return done


def _manifest(path: Path) -> dict:
    """The manifest's fields; ConfigError if it is not what claim writes."""
    try:
        with open(path, "rb") as file:
            held = json.loads(file.read(MANIFEST_BYTES))
    except (OSError, ValueError) as exc:
        held = exc
    if not isinstance(held, dict) or not isinstance(held.get("digest"), str):
        raise ConfigError(f"--out {path.parent}: {path.name} is damaged; remove the folder "
                          "or choose another --out")
    return held


def part_paths(out: Path) -> list[Path]:
    return sorted((out / PARTS).glob("part-*.parquet"))


def done_ids(out: Path, spec: CampaignSpec | None = None) -> set:
    """The ids of the scenarios in the parts written so far. ConfigError naming the first
    part that cannot be read, or (given ``spec``) holds ids the campaign does not have."""
    done: set = set()
    for path in part_paths(out):
        try:
            ids = pq.read_table(path, columns=["id"])["id"].to_pylist()
        except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
            raise _damaged(path, exc) from None
        if spec is not None and not all(isinstance(i, int) and 0 <= i < spec.count
                                        for i in ids):
            raise _damaged(path, "ids outside the campaign")
        done.update(ids)
    return done


def _damaged(path: Path, why) -> ConfigError:
    reason = " ".join(str(why).split())[:120]
    return ConfigError(f"--out {path.parent.parent}: {PARTS}/{path.name} is damaged "
                       f"({reason}); delete it and --resume runs its scenarios again")


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
    parts = []
    for path in part_paths(out):
        try:
            parts.append(pq.read_table(path, schema=schema(spec)))
        except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
            raise _damaged(path, exc) from None
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
