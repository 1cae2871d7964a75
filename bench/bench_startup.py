"""Start-up cost of the compiled kernels: wall time of whole ``hil`` processes, s.

    python bench/bench_startup.py [--config configs/rrr3_pd.toml] [--repeat 3]

Each figure is one fresh process with HILRIG_CACHE_DIR in a new temporary directory
(jit.compilation), so nothing is shared with the cache of the source tree:

- cold, no warmup: ``hil run CONFIG --fast`` with an empty cache (compiles what it needs);
- warmup: ``hil warmup`` with an empty cache (compiles every command's kernels);
- cold after warmup: the first ``hil run CONFIG --fast`` after it;
- warm: the median of ``--repeat`` more such runs.

The run's own stepping (3 s of plant time at 1 kHz, fast) is a few ms of each figure.
Takes a few minutes (two full compilations).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(args: list, cache: Path, scratch: Path) -> float:
    """Wall time of one ``python -m hilrig.cli ARGS`` process, s (its output dropped)."""
    env = dict(os.environ, HILRIG_CACHE_DIR=str(cache))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hilrig.cli", *args], cwd=scratch, env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "rrr3_pd.toml"))
    parser.add_argument("--repeat", type=int, default=3, help="warm runs (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hil-bench-startup-") as tmp:
        tmp = Path(tmp)
        run = ["run", str(Path(args.config).resolve()), "--fast", "--no-plot",
               "--log", str(tmp / "run.mcap")]
        cold = timed(run, tmp / "cache-cold", tmp)
        print(f"cold start, no warmup:     {cold:7.1f} s  (hil run --fast, empty cache)",
              flush=True)
        warmup = timed(["warmup"], tmp / "cache-warmup", tmp)
        print(f"hil warmup, empty cache:   {warmup:7.1f} s", flush=True)
        after = timed(run, tmp / "cache-warmup", tmp)
        print(f"cold start after warmup:   {after:7.2f} s", flush=True)
        warm = statistics.median(timed(run, tmp / "cache-warmup", tmp)
                                 for _ in range(args.repeat))
        print(f"warm start (median of {args.repeat}): {warm:7.2f} s")


if __name__ == "__main__":
    main()
