"""Per-tick cost of ``hil run`` for two checkouts of hilrig, side by side on one host.

    python bench/bench_tick.py --path before=/tmp/before-path --path after=/tmp/after-path \
        [--rounds 5] [--duration 20] [--configs rrr3_pd,serial3_free] [--paced 5]

Each ``--path`` is a PYTHONPATH under which ``import hilrig`` finds one checkout (its
kernels already compiled: run ``hil warmup`` or one run first). Round by round, the
checkouts run the same ``hil run CONFIG --fast --duration D`` (and, with ``--paced S``, a
paced run of S s) in turn, so both see the same host; each run's timing summary
(LOG.timing.json) gives the tick's compute time (wake-up to step done: measurement, law,
limits, row, plant step), and the log its mean below the run's p99. Printed per checkout
and config: the median over rounds of the runs' medians, p99s and means, µs, and for each
checkout after the first the paired difference of its mean from the first's, round by
round (the host's load changes between rounds more than between two runs of one round):
the median difference, ns, and in how many rounds it was positive. The order of the
checkouts turns by one each round, so that none always runs first.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def one_run(pythonpath: str, config: str, duration: float, fast: bool, log: Path) -> dict:
    """The timing summary of one ``hil run`` under ``pythonpath``."""
    cmd = [sys.executable, "-m", "hilrig.cli", "run", config, "--duration", str(duration),
           "--log", str(log)] + (["--fast"] if fast else [])
    env = dict(os.environ, PYTHONPATH=pythonpath)
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=3600)
    summary = json.loads(log.with_suffix(".timing.json").read_text())
    mean = subprocess.run([sys.executable, "-c", MEAN, str(log)], env=env, check=True,
                          capture_output=True, text=True, timeout=600).stdout
    summary["compute_tick_us"]["mean"] = float(mean)
    return summary


# the mean compute time of a log's ticks below its p99, µs: finer than the median, which
# takes the clock's steps (about 40 ns on this VM)
MEAN = """
import sys, numpy as np
from hilrig.telemetry.logfile import read_log
a = read_log(sys.argv[1])[0]["compute_tick"]
a = a[np.isfinite(a)]
print(a[a <= np.percentile(a, 99)].mean() * 1e6)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", action="append", required=True, help="LABEL=PYTHONPATH")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=20.0, help="--fast run, s")
    parser.add_argument("--paced", type=float, default=0.0, help="paced run, s (0: none)")
    parser.add_argument("--configs", default="rrr3_pd,serial3_free")
    args = parser.parse_args()
    paths = [p.split("=", 1) for p in args.path]
    modes = [("fast", True, args.duration)] + ([("paced", False, args.paced)]
                                                if args.paced > 0 else [])
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for config in args.configs.split(","):
                for mode, fast, duration in modes:
                    turn = r % len(paths)
                    for label, pythonpath in paths[turn:] + paths[:turn]:
                        summary = one_run(pythonpath, config, duration, fast,
                                          Path(tmp) / f"{label}-{config}-{mode}.mcap")
                        tick = summary["compute_tick_us"]
                        results.setdefault((config, mode, label), []).append(
                            (tick["median"], tick["p99"], tick["mean"]))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"compute_tick, µs: median over {args.rounds} rounds of each run's median, p99 and "
          "mean below its p99")
    for (config, mode, label), runs in results.items():
        medians, p99s, means = zip(*runs)
        print(f"  {config:<14} {mode:<6} {label:<10} median {statistics.median(medians):6.3f}"
              f"  p99 {statistics.median(p99s):6.3f}  mean {statistics.median(means):6.3f}"
              f"   (means {min(means):.3f}-{max(means):.3f})")
    for (config, mode, label), runs in results.items():
        base = results[(config, mode, paths[0][0])]
        if label == paths[0][0]:
            continue
        diffs = [(run[2] - ref[2]) * 1e3 for run, ref in zip(runs, base)]
        print(f"  {config:<14} {mode:<6} {label:<10} mean - {paths[0][0]}'s, paired by round: "
              f"median {statistics.median(diffs):+6.1f} ns, positive in "
              f"{sum(d > 0 for d in diffs)} of {len(diffs)} rounds")


if __name__ == "__main__":
    main()
