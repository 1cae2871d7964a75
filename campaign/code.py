"""A campaign's own code on every Dask worker, and the proof, before any scenario runs,
that every worker can run the campaign.

A config names a user's code by ``controller.law = "package.module:function"`` and
``plant.model = "package.module:MODEL"``. The client sends the top-level package (or the
single module) of each such name, as the client imports it, to every worker with a Dask
worker plugin (``ShipCode``): the worker writes the files into a private folder of its
own, puts it first on its import path and forgets any older copy it had imported; a
worker that joins later (one that replaces a killed worker) gets them too. A package
larger than MAX_BYTES is not sent (install it on every worker).

Then ``check_worker`` runs as a task on each worker: it imports every name the campaign's
configs use, compares each package's files with the client's (``digest``), and builds
scenario 0's run as a batch would (the config, the plant, the law). The first worker that
cannot is named in one CampaignError line, and no scenario runs. A name registered by an
installed package (``plant.model = "cart_pole"``, a ``controller.type``) is not sent:
the check asks for the package on every worker.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin
from hilrig.errors import ConfigError
from hilrig.plugins import load_object
from hilrig.campaign.spec import CampaignSpec

CODE_KEYS = ("controller.law", "plant.model")     # keys that may name "module:attribute"
MAX_BYTES = 32 * 2**20        # a package sent to the workers: at most this many bytes
PLUGIN = "hilrig-campaign-code"


@dataclass(frozen=True)
class Package:
    """A user's top-level module or package: its name, its files (path relative to the
    folder that holds it, contents) and their digest."""

    name: str
    files: tuple
    digest: str

    @property
    def size(self) -> int:
        """Its files' bytes."""
        return sum(len(data) for _, data in self.files)


def references(spec: CampaignSpec) -> list[tuple[str, str]]:
    """(key, "module:attribute") of every user's code the campaign's configs name: the
    base config's (with [set]) and each value of an axis over such a key."""
    found = []
    for key in CODE_KEYS:
        table, name = key.split(".")
        value = spec.base_raw.get(table, {}).get(name)
        values = [value] + [v for axis in spec.axes if axis.key == key for v in axis.values]
        found += [(key, v) for v in values if isinstance(v, str) and ":" in v]
    return list(dict.fromkeys(found))


def user_packages(spec: CampaignSpec) -> list[Package]:
    """The user's packages of the campaign: the top-level module of each reference, as
    this process imports it (hilrig itself excepted). ConfigError if a reference does
    not load here."""
    packages = {}
    for key, reference in references(spec):
        load_object(reference, key)
        top = reference.partition(":")[0].split(".")[0]
        if top != "hilrig" and top not in packages:
            files = _files(sys.modules[top])
            packages[top] = Package(top, files, _digest(files))
    return list(packages.values())


def digest_of(name: str) -> str:
    """The digest of the files of top-level module ``name`` as this process imports it."""
    return _digest(_files(importlib.import_module(name)))


def _files(module) -> tuple:
    """(path relative to the folder holding the module, contents) of a top-level module's
    file, or of every file of its package but compiled caches, in order."""
    if hasattr(module, "__path__"):                 # a package: its whole folder
        root = Path(next(iter(module.__path__)))
        paths = sorted(p for p in root.rglob("*") if p.is_file()
                       and "__pycache__" not in p.relative_to(root).parts
                       and p.suffix not in (".pyc", ".nbi", ".nbc"))
        return tuple((f"{module.__name__}/{p.relative_to(root).as_posix()}", p.read_bytes())
                     for p in paths)
    path = Path(module.__file__)
    return ((path.name, path.read_bytes()),)


def _digest(files: tuple) -> str:
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


class ShipCode(WorkerPlugin):
    """The Dask worker plugin that writes the campaign's packages (those of at most
    MAX_BYTES) into a private folder on each worker and imports them from there; its
    teardown (at the campaign's end) removes them."""

    name = PLUGIN
    idempotent = False

    def __init__(self, packages: list[Package]):
        self.packages = [package for package in packages if package.size <= MAX_BYTES]
        self.folder = None

    def setup(self, worker=None) -> None:
        self.folder = tempfile.mkdtemp(prefix="hilrig-code-")      # mode 0700
        for package in self.packages:
            for name, data in package.files:
                path = Path(self.folder, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        self._forget()
        sys.path.insert(0, self.folder)
        importlib.invalidate_caches()

    def teardown(self, worker=None) -> None:
        if self.folder in sys.path:
            sys.path.remove(self.folder)
        self._forget()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _forget(self) -> None:
        """Drop the packages' modules this worker imported before (another campaign's
        copy), and the plant models found through them."""
        from hilrig.plant.factory import plant_model

        names = {package.name for package in self.packages}
        for module in [m for m in sys.modules if m.split(".")[0] in names]:
            del sys.modules[module]
        plant_model.cache_clear()


def check_worker(base_raw: str, values: tuple, refs: list, digests: dict) -> str | None:
    """Run as a task on one worker: None when it can run the campaign, else why not (one
    line). ``base_raw``: the campaign's base config (JSON); ``values``: scenario 0's;
    ``refs``: the campaign's (key, reference) pairs; ``digests``: name -> the client's
    digest of each package sent."""
    from hilrig.campaign.scenarios import ScenarioConfigs
    from hilrig.rt.sim import offline_run

    try:
        for key, reference in refs:
            load_object(reference, key)
        for name, digest in digests.items():
            if digest_of(name) != digest:
                where = getattr(sys.modules[name], "__file__", None) or name
                return (f"its {name} ({where}) differs from this process's; install the "
                        "same on every worker")
        offline_run(ScenarioConfigs(json.loads(base_raw)).config(values))
    except ConfigError as exc:
        return str(exc)
    except Exception as exc:     # noqa: BLE001 -- the user's code failing to load there
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return None
