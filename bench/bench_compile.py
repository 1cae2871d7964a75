"""Where a command's compile time goes: seconds per kernel on an empty cache, and the total.

    python bench/bench_compile.py [CONFIG|all] [--command run|fast|sim|warmup] [--duration 1]
                                  [--top 40] [--cache DIR] [--ahead on|off|both]

Runs one fresh ``python -m hilrig.cli`` process (default: ``hil run CONFIG --duration 1``,
CONFIG default ``configs/rrr3_pd.toml``) with HILRIG_CACHE_DIR in a new temporary
directory (or ``--cache DIR``, to see what a filled cache still compiles), its output in
that directory too (``--command warmup``: ``hil warmup --jobs 1 CONFIG``, every built-in
config with ``all``), and listens in it to numba's compile events (``numba:compile``, one
per kernel specialisation compiled, and ``numba:run_pass``, one per compiler pass). It
prints, per compiled kernel specialisation (a kernel whose callee compiles during its
typing counts only its own time; ``inline`` kernels are part of their callers):

- ``own``: its own compile time, CPU s of the compiling thread, of which ``typing``
  (numba's type inference) and ``lower`` (lowering to LLVM, and LLVM's optimisation and
  code generation of its module with every callee's code linked in: numba re-optimises
  the callees' code inside each caller); the rest is numba's other passes (inlining,
  rewrites, SSA), listed by pass for the whole run;
- the total over all kernels; then, for the process: wall and CPU seconds (user + sys,
  all threads) to the first tick of a real-time run (``rt.session.Session.warm_up``
  returned) and to the end. The machine is shared: the CPU seconds are the steadier figure.

``hil run`` on an empty cache compiles its loop in a second process (rt.loop_ahead), whose
kernels the table does not list; the CPU seconds count it. ``--ahead off`` measures the run
without it (HILRIG_LOOP_AHEAD=0), ``--ahead both`` with and then without, one after the
other, each on an empty cache.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYPING_PASSES = ("nopython_type_inference", "partial_type_inference")
LOWER_PASSES = ("native_lowering", "native_parfor_lowering")


def _cpu() -> float:
    """CPU s of this process and of the processes it has waited for (hil run's second
    process compiling the loop, rt.loop_ahead, has ended by the first tick)."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _child(out: str, argv: list[str]) -> int:
    """In the measured process: record compile events and the first tick, run ``hil``."""
    from numba.core import event

    stack: list[list] = []           # [key, start, children's seconds]
    own: dict = defaultdict(lambda: defaultdict(float))
    moments: dict = {}

    class Recorder(event.Listener):
        def on_start(self, ev):
            if ev.kind == "numba:compile":
                d = ev.data["dispatcher"].py_func
                key = ("kernel", f"{d.__module__}.{d.__qualname__}",
                       ",".join(str(a) for a in ev.data["args"]))
            else:
                key = ("pass", ev.data["name"].split(" [")[0])
            stack.append([key, time.thread_time(), 0.0])

        def on_end(self, ev):
            key, start, children = stack.pop()
            took = time.thread_time() - start
            if stack:
                stack[-1][2] += took
            kernel = next((k for k, _, _ in reversed(stack) if k[0] == "kernel"), None) \
                if key[0] == "pass" else key
            if kernel is None:
                return
            own[kernel][key[1] if key[0] == "pass" else "(outside passes)"] += took - children

    recorder = Recorder()
    event.register("numba:compile", recorder)
    event.register("numba:run_pass", recorder)

    import hilrig.rt.session as session

    warm_up = session.Session.warm_up

    def first_tick(self):
        warm_up(self)
        moments.setdefault("first_tick", (time.time(), _cpu()))

    session.Session.warm_up = first_tick
    from hilrig.cli.main import main

    try:
        code = main(argv)
    finally:
        moments["end"] = (time.time(), _cpu())
        Path(out).write_text(json.dumps({
            "moments": moments,
            "kernels": [[k[1], k[2], dict(parts)] for k, parts in own.items()]}))
    return code


def measure(config: str, command: str, duration: float, cache: Path | None,
            scratch: Path, jobs: int = 1, ahead: bool = True) -> dict:
    """Run one measured ``hil`` process; returns its record (see _child) with the
    wall and CPU seconds of the whole process ("process": with its worker processes).
    ``jobs``: ``hil warmup --jobs``; ``ahead`` False: hil run without its second process
    compiling the loop (rt.loop_ahead)."""
    cfg = str(Path(config).resolve()) if Path(config).exists() else config
    args = {"run": ["run", cfg, "--duration", str(duration), "--no-plot"],
            "fast": ["run", cfg, "--fast", "--duration", str(duration), "--no-plot"],
            "sim": ["sim", cfg, "--duration", str(duration), "--out", "sim.npz"],
            "warmup": ["warmup", "--jobs", str(jobs)] + ([] if config == "all" else [cfg])
            }[command]
    out = scratch / "compile.json"
    env = dict(os.environ, HILRIG_CACHE_DIR=str(cache or scratch / "cache"),
               **({} if ahead else {"HILRIG_LOOP_AHEAD": "0"}))
    started = time.time()
    proc = subprocess.Popen([sys.executable, __file__, "--child", str(out), "--", *args],
                            cwd=scratch, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    errors = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"hil {' '.join(args)} failed ({proc.returncode}):\n{errors}")
    record = json.loads(out.read_text())
    record["process"] = (time.time() - started, usage.ru_utime + usage.ru_stime)
    record["started"] = started
    return record


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        raise SystemExit(_child(sys.argv[2], sys.argv[4:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(ROOT / "configs" / "rrr3_pd.toml"))
    parser.add_argument("--command", choices=("run", "fast", "sim", "warmup"), default="run")
    parser.add_argument("--duration", type=float, default=1.0, help="sim.duration, s")
    parser.add_argument("--top", type=int, default=40, help="kernels listed (by own time)")
    parser.add_argument("--cache", type=Path, help="cache root (default: an empty one)")
    parser.add_argument("--ahead", choices=("on", "off", "both"), default="on",
                        help="hil run with its second process compiling the loop "
                             "(rt.loop_ahead), without it, or both, one after the other")
    args = parser.parse_args()
    for ahead in {"on": (True,), "off": (False,), "both": (True, False)}[args.ahead]:
        with tempfile.TemporaryDirectory(prefix="hil-bench-compile-") as tmp:
            record = measure(args.config, args.command, args.duration, args.cache, Path(tmp),
                             ahead=ahead)
        if args.ahead == "both":
            print(f"-- {'with' if ahead else 'without'} the second process compiling the loop")
        _report(record, args)


def _report(record: dict, args) -> None:
    """Print one measured process's kernels and times (module docstring)."""
    kernels = sorted(record["kernels"], key=lambda k: -sum(k[2].values()))
    total = sum(sum(parts.values()) for _, _, parts in kernels)
    print(f"hil {args.command} {args.config}: {len(kernels)} kernel specialisations compiled "
          f"in this process (CPU s of the compiling thread)")
    print(f"{'own s':>7} {'typing':>7} {'lower':>7}  kernel (argument types, shortened)")
    for name, sig, parts in kernels[:args.top]:
        short = sig if len(sig) < 60 else sig[:57] + "..."
        typing = sum(parts.get(p, 0.0) for p in TYPING_PASSES)
        lower = sum(parts.get(p, 0.0) for p in LOWER_PASSES)
        print(f"{sum(parts.values()):7.2f} {typing:7.2f} {lower:7.2f}  "
              f"{name.removeprefix('hilrig.')} ({short})")
    if len(kernels) > args.top:
        rest = sum(sum(p.values()) for _, _, p in kernels[args.top:])
        print(f"{rest:7.2f}                  {len(kernels) - args.top} more")
    print(f"{total:7.2f}                  total compile time (s)")
    by_pass: dict = defaultdict(float)
    for _, _, parts in kernels:
        for name, seconds in parts.items():
            by_pass[name] += seconds
    print("by compiler pass: " + ", ".join(
        f"{name} {seconds:.1f}" for name, seconds in sorted(by_pass.items(), key=lambda i: -i[1])
        if seconds >= 0.05 * total))
    wall, cpu = record["process"]
    first = record["moments"].get("first_tick")
    if first:
        print(f"first tick: {first[0] - record['started']:6.1f} s wall, {first[1]:6.1f} s CPU")
    print(f"process:    {wall:6.1f} s wall, {cpu:6.1f} s CPU (user + sys; the host is shared)")


if __name__ == "__main__":
    main()
