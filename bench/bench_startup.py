"""Start-up of ``hil``: the README's first command's first tick and ``hil warmup``, s.

    python bench/bench_startup.py [--config configs/rrr3_pd.toml] [--jobs 2] [--repeat 3]

Each figure is one fresh process with HILRIG_CACHE_DIR in a new temporary directory
(jit.compilation), so nothing is shared with the cache of the source tree. Wall time,
and CPU time (user + sys of the process and its workers), the steadier figure on a
shared host; the first tick is the moment ``rt.session.Session.warm_up`` returned
(bench/bench_compile.py records it):

- cold first tick: ``hil run CONFIG --duration 1`` (the README's first command, paced)
  on an empty cache: it compiles what it needs, then ticks;
- ``hil warmup --jobs JOBS`` on an empty cache (every built-in config, every command);
- first tick after the warm-up: the same run on that cache (loads only);
- warm: the median of ``--repeat`` more such runs.

Takes several minutes (two full compilations).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench_compile import measure

ROOT = Path(__file__).resolve().parent.parent


def first_tick(record: dict) -> tuple[float, float]:
    """(wall, CPU) seconds from a measured process's start to its first tick."""
    wall, cpu = record["moments"]["first_tick"]
    return wall - record["started"], cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "rrr3_pd.toml"))
    parser.add_argument("--jobs", type=int, default=2, help="hil warmup --jobs")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hil-bench-startup-") as tmp:
        tmp = Path(tmp)
        cold = measure(args.config, "run", 1.0, tmp / "cache-cold", tmp)
        wall, cpu = first_tick(cold)
        print(f"cold first tick, empty cache: {wall:7.1f} s wall {cpu:7.1f} s CPU "
              f"({len(cold['kernels'])} kernel specialisations compiled)", flush=True)
        warm_cache = tmp / "cache-warmup"
        warmup = measure("all", "warmup", 1.0, warm_cache, tmp, jobs=args.jobs)
        wall, cpu = warmup["process"]
        print(f"hil warmup --jobs {args.jobs}, empty cache: {wall:7.1f} s wall {cpu:7.1f} s CPU",
              flush=True)
        wall, cpu = first_tick(measure(args.config, "run", 1.0, warm_cache, tmp))
        print(f"first tick after warmup:      {wall:7.2f} s wall {cpu:7.2f} s CPU", flush=True)
        warm = [first_tick(measure(args.config, "run", 1.0, warm_cache, tmp))
                for _ in range(args.repeat)]
        print(f"warm first tick (median of {args.repeat}): "
              f"{statistics.median(w for w, _ in warm):7.2f} s wall "
              f"{statistics.median(c for _, c in warm):7.2f} s CPU")


if __name__ == "__main__":
    main()
