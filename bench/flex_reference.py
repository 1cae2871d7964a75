"""Paper 002's flexible feed-forward (controllers.flex_feedforward) against the
continuous-time reference of tests/test_flex_continuous.py (written from the paper,
scipy Radau): the maximum force and torque, and the largest error of the flexible
correction (flexible minus rigid) relative to the reference's, over the whole run and
after the start's 20 ms, on configs/flex_rp.toml at n = 5 and 10 elements, both branches
(the figures of docs/FLEX.md).
    python bench/flex_reference.py [--elements 5,10] [--dt 0.001]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_flex_continuous as reference  # noqa: E402  (the test's reference, not a copy)
from hilrig.controllers import flex_feedforward as ff  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", default="5,10")
    parser.add_argument("--dt", type=float, default=1e-3, help="sim.dt, s")
    args = parser.parse_args()
    print("| n | branch | max F ours / reference (N) | max tau ours / reference (N m) "
          "| correction error F, tau (all; after 20 ms) | correction max F, tau |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in (int(v) for v in args.elements.split(",")):
        for branch in ("positive", "negative"):
            result = ff.compute(reference.branch_config(n, branch, f"sim.dt={args.dt}"))
            rigid, flexible = reference.continuous_feedforward(
                n, 1.0 if branch == "positive" else -1.0, result.t)
            ours = np.max(np.abs(result.force_flexible), axis=0)
            theirs = np.max(np.abs(flexible), axis=0)
            error = np.abs((result.force_flexible - result.force_rigid) - (flexible - rigid))
            scale = np.max(np.abs(flexible - rigid), axis=0)
            late = np.max(error[result.t >= 0.02], axis=0) / scale
            rel = ours / theirs - 1.0
            print(f"| {n} | {branch} | {ours[0]:.4g} / {theirs[0]:.4g} ({rel[0]:+.0e}) | "
                  f"{ours[1]:.4g} / {theirs[1]:.4g} ({rel[1]:+.0e}) | "
                  f"{np.max(error[:, 0]) / scale[0]:.2f}, "
                  f"{np.max(error[:, 1]) / scale[1]:.2f}; {late[0]:.3f}, {late[1]:.3f} | "
                  f"{scale[0]:.2g} N, {scale[1]:.2g} N m |",
                  flush=True)


if __name__ == "__main__":
    main()
