"""``hil warmup``: compile ahead every kernel the runs of the shipped configs need.

Each config (default: every built-in config, ``hil configs``) runs for a few
steps through the same Python entry points as the commands, so exactly the
specialisations the real runs need are compiled into the cache (jit.compilation)
and later runs only load them:

- ``hil sim``: ``rt.sim.simulate`` and the metrics of its rows
  (``campaign.metrics.measure``); ``hil campaign``: a batch of one scenario
  (``campaign.batch.run_batch``: its compiled batch of runs and their metrics);
- ``hil run --fast`` and ``hil run``: ``rt.session.Session`` lockstep and paced (at
  normal scheduling priority), the paced one with its live parameters and status block
  (live.params, live.watch);
- ``hil sim --replay``: ``rt.replay.replay_log`` of the fast run's log;
- ``hil emulate``: ``devices.zmq_plant.Emulator`` on a private ipc endpoint, with its
  log (the emulated CAN and serial drives step the same PlantLink);
- ``hil control``: ``rt.loop.LinkLoop`` over the in-process link (every link shares
  the controller's kernels).

Logs and endpoints go to a temporary directory, removed afterwards.
"""
from __future__ import annotations

import io
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from hilrig.jit import compilation
from hilrig.settings import builtin_configs
from hilrig.settings.config import load

STEPS = 5                     # steps of each short run


@dataclass
class WarmupReport:
    """What ``warm_up`` did: configs run, kernels compiled and loaded, wall time (s)."""

    configs: list = field(default_factory=list)
    compiled: int = 0          # kernel specialisations compiled (cache misses)
    loaded: int = 0            # kernel specialisations loaded from the cache
    seconds: float = 0.0
    cache_dir: Path | None = None


def warm_up(configs=None, progress=None, jobs: int = 1) -> WarmupReport:
    """Run each config (paths or built-in names; default every built-in config,
    settings.builtin_configs) for STEPS steps through every command's entry point.
    ``progress(text)``, if given, is told each config. ``jobs`` > 1: in that many
    processes at once (``in_parallel``)."""
    names = [str(c) for c in configs] if configs else builtin_configs.names()
    if jobs > 1 and len(names) > 1:
        return in_parallel(names, jobs, progress is not None)
    return _warm_up(names, progress)


def in_parallel(names: list, jobs: int, verbose: bool) -> WarmupReport:
    """``warm_up`` of ``names`` in ``jobs`` worker processes (spawned), one config at a
    time to whichever worker is free (``queue_order``). Two workers that need the same
    kernel specialisation never both compile it: one compiles it under its claim while the
    other waits and loads it (jit.compilation). Returns the sum of the workers' reports,
    with this process's wall time."""
    started = time.perf_counter()
    queue = queue_order(names, [load(name).plant.model for name in names])
    report = WarmupReport(configs=names, cache_dir=compilation.cache_dir())
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(jobs, len(queue)), mp_context=context) as pool:
        for part in pool.map(_worker, queue, [verbose] * len(queue)):
            report.compiled += part.compiled
            report.loaded += part.loaded
    report.seconds = time.perf_counter() - started
    if report.cache_dir is not None:
        _note_warmed(report.cache_dir, names)
    return report


def queue_order(names: list, models: list) -> list:
    """``names`` in the order the workers take them: the first config of each plant model
    (``models``, one per name), the models with more configs first, then the others. A
    model's first config compiles most of what its family needs (its loops, its plant's
    kernels: 10-30 s each); its later configs mostly load them and compile little. So the
    costly firsts spread over the workers at once, and the cheap rest fill them up
    towards the end, instead of one worker finishing a family of configs while the other
    idles (a static share per model left one core idle for the last 22 s of 84)."""
    by_model: dict = {}
    for name, model in zip(names, models):
        by_model.setdefault(model, []).append(name)
    families = sorted(by_model.values(), key=len, reverse=True)
    return [family[0] for family in families] + [n for family in families for n in family[1:]]


def _worker(name: str, verbose: bool) -> WarmupReport:
    """One config's warm-up in one of ``in_parallel``'s processes."""
    return _warm_up([name], (lambda text: print(text, flush=True)) if verbose else None)


def _warm_up(names: list, progress) -> WarmupReport:
    """``warm_up`` in this process."""
    from hilrig.devices.zmq_plant import Emulator
    from hilrig.drivers.inprocess import PlantLink
    from hilrig.campaign.batch import BatchJob, run_batch
    from hilrig.campaign.metrics import MetricSettings, measure
    from hilrig.live.params import LiveParameters
    from hilrig.settings.live_changes import raw_config
    from hilrig.rt.loop import LinkLoop
    from hilrig.rt.replay import replay_log
    from hilrig.rt.session import Session
    from hilrig.rt.sim import SimulationError, simulate
    from hilrig.live.watch import Watch

    report = WarmupReport(configs=names, cache_dir=compilation.cache_dir())
    compiled_before = len(compilation.progress.compiled)
    loaded_before = compilation.loaded_kernels()       # a worker runs several calls
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="hil-warmup-"))
    try:
        for name in names:
            if progress is not None:
                progress(f"warmup: {name}")
            cfg = load(name, ["loop.fifo_priority=0", "loop.gc_freeze=false"])
            cfg = cfg.replace(sim=replace(cfg.sim, duration=STEPS * cfg.sim.dt))
            log = scratch / Path(name).stem
            measure(simulate(cfg).arrays, cfg, MetricSettings())
            run_batch(BatchJob(json.dumps(raw_config(cfg.to_dict())), MetricSettings(), {}),
                      [(0, [])])
            if cfg.sim.integrator == "accurate":
                continue                  # offline only: no real-time entry points
            Session(cfg, log.with_suffix(".fast.mcap"), fast=True).run()
            Session(cfg, log.with_suffix(".paced.mcap"), fast=False,
                    hooks=[LiveParameters(), Watch(io.StringIO())]).run()
            try:
                replay_log(log.with_suffix(".fast.mcap"))
            except SimulationError:
                pass                      # compiled all the same
            emulator = Emulator(cfg, f"ipc://{scratch}/emulator", log.with_suffix(".emu.mcap"))
            emulator.close("warmup")
            LinkLoop(cfg, PlantLink.from_config(cfg), log.with_suffix(".ctl.mcap")).run()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    report.compiled = len(compilation.progress.compiled) - compiled_before
    report.loaded = compilation.loaded_kernels() - loaded_before
    if report.cache_dir is not None:
        _note_warmed(report.cache_dir, names)
    return report


WARMED = "warmed.json"        # in a cache directory: the configs `hil warmup` ran


def _note_warmed(directory: Path, names: list) -> None:
    """Add ``names`` to the configs the cache directory says were warmed (WARMED)."""
    path = directory / WARMED
    try:
        warmed = json.loads(path.read_text()) if path.exists() else []
    except (OSError, ValueError):
        warmed = []
    scratch = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        scratch.write_text(json.dumps(sorted(set(warmed) | set(names))))
        os.replace(scratch, path)
    except OSError:
        pass                          # a read-only cache: nothing to note


def format_cache(directory: Path | None = None) -> str:
    """What ``hil warmup --list`` prints: the cache directory of this source version (or
    ``directory``), the configs `hil warmup` ran into it, then one line per kernel with
    its compiled specialisations and size, and the directories of other versions."""
    directory = compilation.cache_dir() if directory is None else Path(directory)
    if directory is None:
        return "no writable cache directory: kernels compile in every process"
    kernels = compilation.cached_kernels(directory)
    size = sum(k.size for k in kernels)
    lines = [f"cache {directory}: {len(kernels)} kernels, "
             f"{sum(k.specialisations for k in kernels)} specialisations, {size / 1e6:.1f} MB "
             f"(the fingerprint of {len(compilation.source_files())} kernel sources)"]
    try:
        warmed = json.loads((directory / WARMED).read_text())
    except (OSError, ValueError):
        warmed = []
    lines.append(f"warmed by hil warmup: {', '.join(warmed)}" if warmed else
                 "not warmed: only what runs compiled (hil warmup compiles every command's)")
    width = max((len(k.name) for k in kernels), default=0) - len("hilrig.")
    for k in kernels:
        lines.append(f"  {k.name.removeprefix('hilrig.'):{width}s} {k.specialisations:3d} "
                     f"{k.size / 1e3:7.0f} kB")
    others = [p for p in directory.parent.iterdir() if p != directory and _is_fingerprint(p)]
    if others:
        lines.append(f"{len(others)} directories of other source versions beside it "
                     f"(hil warmup --prune removes them)")
    return "\n".join(lines)


def _is_fingerprint(path: Path) -> bool:
    """A cache directory of some source version: named by 16 hex digits."""
    return path.is_dir() and len(path.name) == 16 and all(c in "0123456789abcdef"
                                                          for c in path.name)


def prune(keep: Path) -> list[Path]:
    """Remove the cache directories of other fingerprints beside ``keep`` (the current
    ``compilation.cache_dir()``); returns the removed ones. Only directories named like
    a fingerprint (16 hex digits) are touched."""
    removed = []
    for path in keep.parent.iterdir():
        if path != keep and _is_fingerprint(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def format_report(report: WarmupReport) -> str:
    """One line: configs, kernels compiled and loaded, seconds, where the cache is."""
    return (f"warmup: {len(report.configs)} configs (sim, run --fast, run, emulate, control): "
            f"{report.compiled} kernels compiled, {report.loaded} loaded from the cache (with "
            f"the kernels they call), {report.seconds:.1f} s; cache {report.cache_dir}")
