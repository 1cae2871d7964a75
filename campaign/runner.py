"""``hil campaign``: thousands of scenarios of one spec on a Dask cluster, one table out.

The client (this process) checks the spec (campaign.spec), runs its first scenario
here (a check that it runs, which also fills the kernel cache that local workers load),
then hands batches of scenarios to the cluster: without ``--scheduler`` a LocalCluster
of one single-threaded worker process per core, with it the cluster at that address.
A task runs one batch (campaign.batch.run_batch) and returns its rows; the client
writes each batch's rows as one Parquet part as it comes back (campaign.results), so
what is on disk is always whole batches. A worker that dies takes its tasks with it and
Dask runs them again elsewhere; each task's result arrives once, so each scenario is
written once. An interrupted campaign keeps its parts and ``--resume`` runs only the
scenarios that have none. At the end the parts are merged into results.parquet and the
summary is printed and drawn (campaign.report).
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hilrig.campaign.batch import BatchJob, run_batch
from hilrig.campaign.spec import CampaignSpec

INSTALL_HINT = ('hil campaign needs Dask and pyarrow: pip install "hilrig[campaign]" '
                '(or pip install "dask[distributed]" pyarrow)')
TASK_SECONDS = 2.0            # aim of a task's length: Dask's per-task cost stays far below it
TASKS_PER_WORKER = 4          # at least this many tasks per worker, to share the load
SMALLEST_SHARE = 8            # the last tasks shrink down to 1/8 of a batch (batches())
WINDOW_PER_WORKER = 3         # tasks in flight per worker thread (results come back as they end)


class CampaignError(RuntimeError):
    """The campaign cannot run: its dependencies, or its cluster (printed as one line)."""


def require_dependencies() -> None:
    """CampaignError with the install line if Dask (distributed) or pyarrow is missing."""
    try:
        import distributed  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise CampaignError(f"{INSTALL_HINT} ({exc})") from None


@dataclass
class CampaignRun:
    """What ``run_campaign`` did: the merged table (None if interrupted), the ids it ran,
    how many were done before (``--resume``), and its wall time from the first task
    submitted to the last result written (s)."""

    table: object = None
    ran: list = field(default_factory=list)
    skipped: int = 0
    interrupted: bool = False
    seconds: float = 0.0
    batch: int = 0


def open_client(scheduler: str | None = None, workers: int | None = None):
    """A Dask client: of the cluster at ``scheduler``, or of a new LocalCluster of
    ``workers`` single-threaded processes (default: one per core this process may use),
    on the loopback interface (its dashboard, if bokeh is installed, on a free port).
    Returns (client, cluster or None)."""
    from dask.distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.WARNING)   # not each worker's start
    if scheduler is not None:
        try:
            return Client(scheduler, timeout=10), None
        except OSError as exc:
            raise CampaignError(f"--scheduler {scheduler}: cannot connect: {exc}") from None
    count = workers or len(os.sched_getaffinity(0))
    cluster = LocalCluster(n_workers=count, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address="127.0.0.1:0")
    return Client(cluster), cluster


def environment() -> tuple:
    """What must match between the client and every worker for a worker's rows to equal
    ``hil sim`` here: hilrig's sources (their fingerprint) and numpy's and numba's versions."""
    import numba
    import numpy
    from hilrig.jit.compilation import package_fingerprint

    return package_fingerprint(), numpy.__version__, numba.__version__


def check_workers(client) -> int:
    """The cluster's worker threads; CampaignError if it has none or a worker runs other
    hilrig sources or numpy/numba versions than this process."""
    here = environment()
    found = client.run(environment)
    if not found:
        raise CampaignError("the cluster has no workers (start some: dask worker ADDRESS)")
    for address, theirs in found.items():
        if tuple(theirs) != here:
            raise CampaignError(
                f"worker {address} runs hilrig {theirs[0]}, numpy {theirs[1]}, numba "
                f"{theirs[2]}; this process hilrig {here[0]}, numpy {here[1]}, numba "
                f"{here[2]}: install the same on every worker")
    return sum(client.nthreads().values())


def probe(spec: CampaignSpec) -> float:
    """Run scenario 0 here as a task runs it (campaign.batch.run_batch: the first call
    loads or compiles the kernels the workers then load), three times; the shorter wall
    time of the other two, s."""
    job = job_of(spec)
    task = [(0, tuple(spec.scenario(0).values.items()))]
    run_batch(job, task)
    return min(run_batch(job, task)["wall_s"][0] for _ in range(2))


def job_of(spec: CampaignSpec) -> BatchJob:
    """What every task of the spec's campaign shares."""
    return BatchJob(json.dumps(spec.base_raw), spec.settings, spec.criteria)


def batch_size(spec: CampaignSpec, pending: int, threads: int, scenario_seconds: float) -> int:
    """campaign.batch, or as many scenarios as take TASK_SECONDS, but no more than give
    every worker thread TASKS_PER_WORKER tasks."""
    if spec.batch is not None:
        return spec.batch
    by_time = max(1, int(TASK_SECONDS / max(scenario_seconds, 1e-6)))
    by_share = max(1, math.ceil(pending / (TASKS_PER_WORKER * max(threads, 1))))
    return min(by_time, by_share)


def batches(ids: list, size: int, threads: int, taper: bool = True) -> list:
    """``ids`` cut into tasks of ``size`` scenarios. ``taper``: the tasks that start last
    are shorter, each at most the scenarios left over twice the worker threads (but not
    under size / SMALLEST_SHARE), so the workers end together: the last task started
    leaves the others idle for its length, and a batch of the usual size would be up to
    a quarter of a small campaign's time."""
    out, start = [], 0
    while start < len(ids):
        left = len(ids) - start
        count = size if not taper else \
            min(size, max(math.ceil(left / (2 * max(threads, 1))), size // SMALLEST_SHARE, 1))
        out.append(ids[start:start + count])
        start += count
    return out


def run_campaign(spec: CampaignSpec, out: Path, client, resume: bool = False,
                 batch: int | None = None, progress: Callable | None = None,
                 batch_done: Callable | None = None) -> CampaignRun:
    """Run the spec's scenarios not yet in ``out`` on ``client``'s cluster and merge the
    table. ``batch``: scenarios per task (default ``batch_size``, the last tasks tapered:
    ``batches``); ``progress(done, total, seconds)`` after each batch; ``batch_done(ids)``
    too (tests use it to kill a worker or interrupt). Ctrl-C stops it, keeping the batches
    written."""
    from dask.distributed import as_completed
    from hilrig.campaign import results as results   # pyarrow

    out = Path(out)
    done = results.claim(out, spec, resume)
    pending = [sid for sid in range(spec.count) if sid not in done]
    threads = check_workers(client)
    size = batch or batch_size(spec, len(pending), threads, probe(spec) if pending else 0.0)
    tasks = iter(batches(pending, size, threads, taper=batch is None and spec.batch is None))
    run = CampaignRun(ran=[], skipped=len(done), batch=size)
    job = job_of(spec)      # a few kB, sent with each task: nothing a dead worker can lose
    token = uuid.uuid4().hex[:8]
    in_flight = as_completed()
    submitted = {}

    def submit() -> bool:
        ids = next(tasks, None)
        if ids is None:
            return False
        scenarios = [spec.scenario(sid) for sid in ids]
        future = client.submit(run_batch, job, [(s.id, tuple(s.values.items()))
                                                for s in scenarios],
                               key=f"hilrig-batch-{ids[0]}-{ids[-1]}-{token}", pure=False)
        submitted[future.key] = scenarios
        in_flight.add(future)
        return True

    started = time.perf_counter()
    try:
        for _ in range(WINDOW_PER_WORKER * threads):
            if not submit():
                break
        for future in in_flight:
            scenarios = submitted.pop(future.key)
            results.write_part(out, spec, scenarios, future.result())
            future.release()
            run.ran += [s.id for s in scenarios]
            run.seconds = time.perf_counter() - started
            if progress is not None:
                progress(len(run.ran), len(pending), run.seconds)
            if batch_done is not None:
                batch_done([s.id for s in scenarios])
            submit()
    except KeyboardInterrupt:
        run.interrupted = True
        client.cancel(list(in_flight.futures))
        return run
    run.table = results.merge(out, spec)
    return run


class ProgressLine:
    """The progress line: scenarios done of those to run, rate, time left. Rewritten in
    place on a terminal; elsewhere one line at most every ``every`` seconds."""

    def __init__(self, stream=None, every: float = 10.0):
        self.stream = stream or sys.stderr
        self.every = every
        self.last = -math.inf
        self.tty = self.stream.isatty()

    def __call__(self, done: int, total: int, seconds: float) -> None:
        rate = done / seconds if seconds > 0 else 0.0
        left = (total - done) / rate if rate > 0 else math.inf
        text = (f"campaign: {done}/{total} scenarios ({100.0 * done / max(total, 1):.0f} %), "
                f"{rate:.1f}/s, {_clock(left)} left")
        if self.tty:
            self.stream.write("\r" + text + ("\n" if done == total else ""))
            self.stream.flush()
        elif done == total or seconds - self.last >= self.every:
            self.last = seconds
            print(text, file=self.stream, flush=True)


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def command(spec_path: str, scheduler: str | None, workers: int | None, out: str | None,
            resume: bool) -> int:
    """``hil campaign``: 0 when every scenario passed, 1 when some failed, 130 when
    interrupted (its batches kept for --resume). A mistake in the spec or the options is a
    ConfigError, a missing dependency or an unusable cluster a CampaignError, both before
    any task runs."""
    from hilrig.errors import ConfigError
    from hilrig.campaign.spec import load_spec

    require_dependencies()
    from hilrig.campaign import results

    if scheduler is not None and workers is not None:
        raise ConfigError("--workers sizes the local cluster; a cluster given by --scheduler "
                          "has its own workers")
    spec = load_spec(spec_path)
    out_dir = Path(out) if out else Path("runs") / "campaigns" / spec.name
    if len(results.claim(out_dir, spec, resume)) == spec.count:
        print(f"campaign {spec.name}: all {spec.count} scenarios are in {out_dir}")
        return _report(spec, out_dir, CampaignRun(table=results.merge(out_dir, spec),
                                                  skipped=spec.count))
    client, cluster = open_client(scheduler, workers)
    try:
        threads = check_workers(client)
        where = scheduler or f"a local cluster of {threads} worker processes"
        print(f"campaign {spec.name}: {spec.count} scenarios of {spec.duration:g} s on {where}"
              f"; results in {out_dir}", flush=True)
        if client.dashboard_link:
            print(f"Dask dashboard: {client.dashboard_link}", flush=True)
        run = run_campaign(spec, out_dir, client, resume, progress=ProgressLine())
    except KeyboardInterrupt:
        run = CampaignRun(interrupted=True)
    finally:
        client.close()
        if cluster is not None:
            # a worker slow to stop at the end is killed, which the nanny warns of: no news
            logging.getLogger("distributed.nanny").setLevel(logging.ERROR)
            cluster.close()
    if run.interrupted:
        print(f"\ninterrupted: {len(results.done_ids(out_dir))} of {spec.count} scenarios "
              f"are in {out_dir}; `hil campaign {spec_path} --out {out_dir} --resume` runs "
              "the rest", file=sys.stderr)
        return 130
    return _report(spec, out_dir, run)


def _report(spec: CampaignSpec, out_dir: Path, run: CampaignRun) -> int:
    """Print and write the summary of a finished campaign; the exit code."""
    from hilrig.campaign import report
    from hilrig.campaign import results

    ran = set(run.ran)
    simulated = sum(s for sid, s in zip(run.table["id"].to_pylist(),
                                        run.table["simulated_s"].to_pylist()) if sid in ran)
    print(f"ran {len(run.ran)} scenarios ({run.skipped} done before) in {run.seconds:.1f} s, "
          f"batches of {run.batch}: {len(run.ran) / max(run.seconds, 1e-9):.1f} scenarios/s, "
          f"{simulated / max(run.seconds, 1e-9):.0f} simulated s per s")
    text, failing = report.summary(run.table, spec, out_dir)
    print(text)
    (out_dir / "summary.txt").write_text(text + "\n", encoding="utf-8")
    (out_dir / "failing.txt").write_text("".join(line + "\n" for line in failing),
                                         encoding="utf-8")
    report.draw(run.table, spec, out_dir / "summary.png")
    print(f"wrote {out_dir / results.RESULTS}, {out_dir / 'summary.txt'}, "
          f"{out_dir / 'summary.png'}")
    return 1 if failing else 0
