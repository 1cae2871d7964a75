"""``hil campaign``: thousands of scenarios of one spec on a Dask cluster, one table out.

The client (this process) checks the spec (campaign.spec), runs its first scenario
here (a check that it runs, which also fills the kernel cache that local workers load),
then hands batches of scenarios to the cluster: without ``--scheduler`` a LocalCluster
of one single-threaded worker process per core, with it the cluster at that address,
both over TLS (campaign.cluster). Before any batch, the user's code the configs name
goes to every worker and every worker shows it can run the campaign (campaign.code).
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
import sys
import time
import uuid
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hilrig.campaign.batch import BatchJob, run_batch
from hilrig.campaign.cluster import CampaignError, TlsFiles, open_client
from hilrig.campaign.spec import CampaignSpec

INSTALL_HINT = ('hil campaign needs Dask, pyarrow and cryptography: pip install '
                '"hilrig[campaign]" (or pip install "dask[distributed]" pyarrow cryptography)')
TASK_SECONDS = 2.0            # aim of a task's length: Dask's per-task cost stays far below it
TASKS_PER_WORKER = 4          # at least this many tasks per worker, to share the load
SMALLEST_SHARE = 8            # the last tasks shrink down to 1/8 of a batch (batches())
WINDOW_PER_WORKER = 3         # tasks in flight per worker thread (results come back as they end)


def require_dependencies() -> None:
    """CampaignError with the install line if Dask (distributed), pyarrow or cryptography
    (the local cluster's TLS certificates) is missing."""
    try:
        import cryptography  # noqa: F401
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
    try:
        found = client.run(environment)
    except Exception as exc:     # noqa: BLE001 -- raised in a worker: hilrig missing there
        raise CampaignError(f"the workers cannot run hilrig: {type(exc).__name__}: "
                            f"{' '.join(str(exc).split())}") from None
    if not found:
        raise CampaignError("the cluster has no workers (start some: dask worker ADDRESS)")
    for address, theirs in found.items():
        if tuple(theirs) != here:
            raise CampaignError(
                f"worker {address} runs hilrig {theirs[0]}, numpy {theirs[1]}, numba "
                f"{theirs[2]}; this process hilrig {here[0]}, numpy {here[1]}, numba "
                f"{here[2]}: install the same on every worker")
    return sum(client.nthreads().values())


@contextmanager
def code_on_workers(client, spec: CampaignSpec):
    """Within: the user's packages the campaign names are on every worker (a Dask worker
    plugin, campaign.code) and every worker has shown it builds the campaign's
    scenario 0 from them; CampaignError naming the first worker that cannot, before any
    scenario runs. At the end the packages are removed from the workers."""
    from hilrig.campaign import code

    packages = code.user_packages(spec)
    plugin = code.ShipCode(packages)
    if plugin.packages:
        client.register_plugin(plugin)
    try:
        job = job_of(spec)
        values = tuple(spec.scenario(0).values.items())
        digests = {package.name: package.digest for package in packages}
        token = uuid.uuid4().hex[:8]
        checks = {address: client.submit(code.check_worker, job.base_raw, values,
                                         code.references(spec), digests, workers=[address],
                                         allow_other_workers=False, pure=False,
                                         key=f"hilrig-check-{index}-{token}")
                  for index, address in enumerate(client.nthreads())}
        for address, check in checks.items():
            reason = check.result()
            if reason is not None:
                raise CampaignError(f"worker {address} cannot run the campaign: {reason}")
        yield
    finally:
        if plugin.packages:
            with suppress(Exception):    # a cluster gone takes the packages with it
                client.unregister_worker_plugin(plugin.name)


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
                 batch_done: Callable | None = None, force: bool = False) -> CampaignRun:
    """Run the spec's scenarios not yet in ``out`` on ``client``'s cluster and merge the
    table. ``resume``, ``force``: as campaign.results.claim takes them. ``batch``:
    scenarios per task (default ``batch_size``, the last tasks tapered: ``batches``);
    ``progress(done, total, seconds)`` after each batch; ``batch_done(ids)`` too (tests
    use it to kill a worker or interrupt). The workers get the user's code and are checked
    first (``code_on_workers``). Ctrl-C stops it, keeping the batches written."""
    from hilrig.campaign import results   # pyarrow

    out = Path(out)
    done = results.claim(out, spec, resume, force)
    pending = [sid for sid in range(spec.count) if sid not in done]
    run = CampaignRun(ran=[], skipped=len(done))
    if pending:
        threads = check_workers(client)
        seconds = probe(spec)     # here first: it fills the kernel cache local workers load
        with code_on_workers(client, spec):
            run.batch = batch or batch_size(spec, len(pending), threads, seconds)
            tasks = batches(pending, run.batch, threads,
                            taper=batch is None and spec.batch is None)
            _run_tasks(spec, out, client, tasks, threads, run, progress, batch_done)
    if not run.interrupted:
        run.table = results.merge(out, spec)
    return run


def _run_tasks(spec: CampaignSpec, out: Path, client, tasks: list, threads: int,
               run: CampaignRun, progress: Callable | None, batch_done: Callable | None):
    """Submit the tasks (lists of ids), a few per worker thread at a time, and write each
    one's part as it comes back; ``run`` records what ran (run_campaign)."""
    from dask.distributed import as_completed
    from hilrig.campaign import results

    total = sum(map(len, tasks))
    tasks = iter(tasks)
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
                progress(len(run.ran), total, run.seconds)
            if batch_done is not None:
                batch_done([s.id for s in scenarios])
            submit()
    except KeyboardInterrupt:
        run.interrupted = True
        client.cancel(list(in_flight.futures))


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
            resume: bool, force: bool = False, tls: TlsFiles = TlsFiles(),
            insecure: bool = False) -> int:
    """``hil campaign``: 0 when every scenario passed, 1 when some failed, 130 when
    interrupted (its batches kept for --resume). A mistake in the spec or the options is a
    ConfigError, a missing dependency or an unusable cluster a CampaignError, both before
    any scenario runs. ``tls``, ``insecure``: how to join ``scheduler``
    (campaign.cluster)."""
    from hilrig.errors import ConfigError
    from hilrig.campaign.spec import load_spec

    require_dependencies()
    from hilrig.campaign import results

    if scheduler is not None and workers is not None:
        raise ConfigError("--workers sizes the local cluster; a cluster given by --scheduler "
                          "has its own workers")
    if scheduler is None and (insecure or any(vars(tls).values())):
        raise ConfigError("--tls-* and --insecure are for a cluster given by --scheduler; "
                          "the local cluster makes its own certificates")
    spec = load_spec(spec_path)
    out_dir = Path(out) if out else Path("runs") / "campaigns" / spec.name
    if len(results.check_out(out_dir, spec, resume, force)) == spec.count:
        print(f"campaign {spec.name}: all {spec.count} scenarios are in {out_dir}")
        return _report(spec, out_dir, CampaignRun(table=results.merge(out_dir, spec),
                                                  skipped=spec.count))
    client, cluster = open_client(scheduler, workers, tls, insecure)
    try:
        threads = check_workers(client)
        where = scheduler or f"a local cluster of {threads} worker processes"
        print(f"campaign {spec.name}: {spec.count} scenarios of {spec.duration:g} s on {where}",
              flush=True)
        print(f"results in {out_dir}", flush=True)
        run = run_campaign(spec, out_dir, client, resume, progress=ProgressLine(), force=force)
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
    before = f" ({run.skipped} done before)" if run.skipped else ""
    print(f"ran {len(run.ran)} scenarios{before} in {run.seconds:.1f} s, batches of "
          f"{run.batch}: {len(run.ran) / max(run.seconds, 1e-9):.1f}/s, "
          f"{simulated / max(run.seconds, 1e-9):.0f} simulated s per s")
    text, failing = report.summary(run.table, spec, out_dir)
    print(text)
    (out_dir / "summary.txt").write_text(text + "\n", encoding="utf-8")
    (out_dir / "failing.txt").write_text("".join(line + "\n" for line in failing),
                                         encoding="utf-8")
    report.draw(run.table, spec, out_dir / "summary.png")
    print(f"wrote {results.RESULTS}, summary.txt, failing.txt, summary.png in {out_dir}")
    return 1 if failing else 0
