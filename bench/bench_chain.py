"""Cost of the flexible chain on the ground (paper 004; plant.flex_chain.integrators).

Prints medians and tails of: the derivative (one evaluation), one fixed-step 1 ms tick
in flight and in contact (RK4 substeps of 1e-4 s / 1e-5 s), and the wall time of the
1.5 s drop of each built-in mode set with event location (rtol 1e-10), with its steps
and impacts; with --accuracy, the fixed step against the event-located run (first impact
time, rebound apex, energy books); with --realtime, the per-tick compute of
``hil run chain_drop_ss_rt`` (1.5 s paced at 1 kHz, in flight and in contact). Compilation is done (and excluded) before timing. Run on a quiet machine:
    python bench/bench_chain.py [--repeat 5] [--accuracy] [--realtime]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from hilrig.plant.flex_chain import integrators as ci
from hilrig.plant.flex_chain import chain as fc
from hilrig.plant.flex_chain.contact import derivative, state_size
from hilrig.plant.flex_chain.model import paper_chain, paper_initial_state

MODE_SETS = ("ss-ss-ss", "cc-cc-cc", "sc-cc-cs", "cs-ss-sc")


def stats(samples) -> str:
    a = np.sort(np.asarray(samples))
    return (f"median {np.median(a) * 1e6:9.2f} us  p99 {a[int(0.99 * (len(a) - 1))] * 1e6:9.2f} us"
            f"  max {a[-1] * 1e6:9.2f} us")


def bench_derivative(p, y, repeat=20000) -> list:
    n = 3
    nz = fc.n_coordinates(n)
    dy, mass, rhs = np.zeros(len(y)), np.zeros((nz, nz)), np.zeros(nz)
    s, pt, force = np.zeros(fc.scratch_size(n)), np.zeros(4), np.zeros(2)
    modes, vminus, tau = np.zeros(n + 1), np.zeros(n + 1), np.zeros(n - 1)
    derivative(p, y, modes, vminus, tau, dy, mass, rhs, s, pt, force)
    batch = 100
    out = []
    for _ in range(repeat // batch):
        start = time.perf_counter()
        for _ in range(batch):
            derivative(p, y, modes, vminus, tau, dy, mass, rhs, s, pt, force)
        out.append((time.perf_counter() - start) / batch)
    return out


def bench_ticks(p, y0, modes0, ticks=300) -> list:
    n = 3
    nz = fc.n_coordinates(n)
    kst, mass, rhs = np.zeros((5, len(y0))), np.zeros((nz, nz)), np.zeros(nz)
    s, pt, force = np.zeros(fc.scratch_size(n)), np.zeros(4), np.zeros(2)
    events, counters = np.zeros((100, 3)), np.zeros(3)
    tau = np.zeros(n - 1)
    out = []
    for _ in range(ticks):
        y, modes, vminus = y0.copy(), modes0.copy(), np.where(modes0 > 0, 1.0, 0.0)
        start = time.perf_counter()
        ci.advance_fixed(p, y, modes, vminus, tau, 0.0, 1e-3, 1e-5, 1e-4, kst, mass, rhs, s,
                         pt, force, events, counters)
        out.append(time.perf_counter() - start)
    return out


def apex(p, run, after=0.44, before=0.6) -> tuple[float, float]:
    """Height (m) and time (s) of O_1's first rebound apex."""
    rows = (run.t > after) & (run.t <= before)
    heights = np.array([fc.end_points(p, y[:8])[0, 1] for y in run.y[rows]])
    return float(heights.max()), float(run.t[rows][heights.argmax()])


def accuracy() -> None:
    """The fixed-step variant at 1 ms ticks against the event-located run (ss-ss-ss)."""
    p = paper_chain("ss-ss-ss").block()
    z0, zd0 = paper_initial_state()
    ref = ci.simulate_events(p, z0, zd0, 0.6, dt_out=1e-3, rtol=1e-11, atol=1e-13)
    first = ref.events[ref.events[:, 2] == 1][0, 0]
    top, when = apex(p, ref)
    nz = 8
    energy = np.array([fc.energy(p, y[:nz], y[nz:2 * nz]) for y in ref.y])
    books = energy - energy[0] - (ref.y[:, 16] + ref.y[:, 17] - ref.y[:, 18])
    print(f"event-located (rtol 1e-11): first impact {first:.9f} s, O1 apex {top:.6f} m at "
          f"{when:.3f} s, energy books max error {np.abs(books).max():.2e} J")
    for fine in (2e-5, 1e-5, 5e-6):
        run = ci.simulate_fixed(p, z0, zd0, 0.6, dt=1e-3, h_fine=fine, h_coarse=1e-4)
        onset = run.events[run.events[:, 2] == 1][0, 0]
        top_f, _ = apex(p, run)
        energy = np.array([fc.energy(p, y[:nz], y[nz:2 * nz]) for y in run.y])
        books = energy - energy[0] - (run.y[:, 16] + run.y[:, 17] - run.y[:, 18])
        print(f"fixed 1 ms ticks, substeps {fine:.0e} s near contact / 1e-4 s: first impact "
              f"late by {(onset - first) * 1e6:.2f} us, O1 apex error {(top_f - top) * 1e3:+.4f} mm,"
              f" energy books max error {np.abs(books).max():.2e} J, {run.substeps} substeps")


def realtime() -> None:
    """``hil run chain_drop_ss_rt`` in process (rt.session, paced at 1 kHz, the config's
    loop settings: SCHED_FIFO where permitted): the per-tick compute (the contact tick dominates it) in flight and over
    the bounces (from the first impact on)."""
    import tempfile
    from pathlib import Path

    from hilrig.settings.config import load
    from hilrig.rt.session import Session

    cfg = load("chain_drop_ss_rt")
    with tempfile.TemporaryDirectory() as tmp:
        session = Session(cfg, Path(tmp) / "run.mcap")
        result = session.run()
    tick = session.timings[:result.ticks, 4] * 1e6
    flight = tick[:428][np.isfinite(tick[:428])]     # before the first impact (0.4284 s);
    ground = tick[428:][np.isfinite(tick[428:])]     # skipped (overrun) ticks are NaN
    print(f"hil run chain_drop_ss_rt, 1.5 s at 1 kHz: {result.ticks} ticks, "
          f"{result.summary['overruns']} overruns, {np.isnan(tick).sum()} skipped; compute per tick in flight: median "
          f"{np.median(flight):.1f} us, p99 {np.percentile(flight, 99):.1f}; from the first "
          f"impact on: median {np.median(ground):.1f} us, p99 {np.percentile(ground, 99):.1f}, "
          f"max {ground.max():.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="drops per mode set")
    parser.add_argument("--accuracy", action="store_true",
                        help="also compare the fixed step with the event-located run")
    parser.add_argument("--realtime", action="store_true",
                        help="also time the ticks of hil run chain_drop_ss_rt (1.5 s)")
    args = parser.parse_args()
    z0, zd0 = paper_initial_state()
    p = paper_chain("ss-ss-ss").block()
    ci.simulate_events(p, z0, zd0, 1e-3)          # compile or load the kernels
    ci.simulate_fixed(p, z0, zd0, 1e-3)
    y = np.zeros(state_size(3))
    y[:8] = z0
    print(f"derivative (3 links, 8 coordinates): {stats(bench_derivative(p, y))}")
    print(f"1 ms tick in flight (RK4, 1e-4 s substeps):  {stats(bench_ticks(p, y, np.zeros(4)))}")
    ground = y.copy()
    ground[4] = -1e-4                              # the outer joints 0.1 mm into the ground
    ground[8 + 4] = -4.2
    print(f"1 ms tick in contact (RK4, 1e-5 s substeps): "
          f"{stats(bench_ticks(p, ground, np.array([1.0, 0.0, 0.0, 1.0])))}")
    for modes in MODE_SETS:
        p = paper_chain(modes).block()
        walls, run = [], None
        for _ in range(args.repeat):
            start = time.perf_counter()
            run = ci.simulate_events(p, z0, zd0, 1.5, dt_out=1e-3, rtol=1e-10, atol=1e-12)
            walls.append(time.perf_counter() - start)
        onsets = int((run.events[:, 2] == 1).sum())
        wall = float(np.median(walls))
        print(f"drop {modes} 1.5 s, events located: median {wall * 1e3:7.1f} ms "
              f"(best {min(walls) * 1e3:7.1f}, max {max(walls) * 1e3:7.1f}), "
              f"{1.5 / wall:5.1f}x faster than real time (best {1.5 / min(walls):5.1f}x); "
              f"{run.steps} steps, {run.rejected} rejected, {run.evaluations} evaluations, "
              f"{onsets} impacts")
    if args.accuracy:
        accuracy()
    if args.realtime:
        realtime()


if __name__ == "__main__":
    main()
