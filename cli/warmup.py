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
import shutil
import sys
import tempfile
import time
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


def warm_up(configs=None, progress=None) -> WarmupReport:
    """Run each config (paths or built-in names; default every built-in config,
    settings.builtin_configs) for STEPS steps through every command's entry point.
    ``progress(text)``, if given, is told each config."""
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

    names = [str(c) for c in configs] if configs else builtin_configs.names()
    report = WarmupReport(configs=names, cache_dir=compilation.cache_dir())
    compiled_before = len(compilation.progress.compiled)
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
    report.loaded = compilation.loaded_kernels()
    return report


def prune(keep: Path) -> list[Path]:
    """Remove the cache directories of other fingerprints beside ``keep`` (the current
    ``compilation.cache_dir()``); returns the removed ones. Only directories named like
    a fingerprint (16 hex digits) are touched."""
    removed = []
    for path in keep.parent.iterdir():
        name = path.name
        if path != keep and path.is_dir() and len(name) == 16 \
                and all(c in "0123456789abcdef" for c in name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def format_report(report: WarmupReport) -> str:
    """One line: configs, kernels compiled and loaded, seconds, where the cache is."""
    return (f"warmup: {len(report.configs)} configs (sim, run --fast, run, emulate, control): "
            f"{report.compiled} kernels compiled, {report.loaded} loaded from the cache (with "
            f"the kernels they call), {report.seconds:.1f} s; cache {report.cache_dir}")
