"""Per-tick cost of a user's compiled law against the built-in one, in `hil run`.

The 3RRR of configs/rrr3_pd.toml at 1 kHz, paced in real time, once with the built-in
PD (controller.type = "pd") and once with the user's PD of
examples/user_controller/my_laws.py (controller.law), in interleaved chunks so both see
the same host. Prints the median and tails of the controller phase (compute_control:
law + command limits) and of the whole tick (compute_tick), µs.

    python bench/bench_user_law.py [--seconds 20] [--chunks 4]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from hilrig.settings.config import load
from hilrig.rt.session import Session
from hilrig.timing.summary import summarize

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "user_controller"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per law, s")
    parser.add_argument("--chunks", type=int, default=4)
    args = parser.parse_args()
    sys.path.insert(0, str(EXAMPLE))          # the user's module, as `hil run` finds it
    chunk = args.seconds / args.chunks
    configs = {"built-in PD": load(ROOT / "configs" / "rrr3_pd.toml",
                                   [f"sim.duration={chunk}"]),
               "user PD": load(EXAMPLE / "rrr3_my_pd.toml", [f"sim.duration={chunk}"])}
    timings = {name: [] for name in configs}
    overruns = dict.fromkeys(configs, 0)
    for _ in range(args.chunks):
        for name, cfg in configs.items():
            with tempfile.TemporaryDirectory() as tmp:
                session = Session(cfg, Path(tmp) / "run.mcap")
                result = session.run()
            timings[name].append(session.timings[:result.ticks])
            overruns[name] += result.summary["overruns"]
    print(f"3RRR PD, 1 kHz, {args.seconds:g} s per law in {args.chunks} interleaved chunks (µs)")
    for name in configs:
        s = summarize(np.concatenate(timings[name]), overruns[name])
        for column in ("compute_control_us", "compute_tick_us"):
            c = s[column]
            print(f"  {name:<12} {column[:-3]:<16} median {c['median']:6.3f}  p99 "
                  f"{c['p99']:6.3f}  p99.9 {c['p99.9']:6.3f}  max {c['max']:7.2f}")
        print(f"  {name:<12} overruns {s['overruns']}")


if __name__ == "__main__":
    main()
