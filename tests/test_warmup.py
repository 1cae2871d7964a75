"""The kernel cache keyed by the source fingerprint (jit.compilation) and `hil warmup`.

Every run is a fresh subprocess with HILRIG_CACHE_DIR in tmp_path, so the cache it
sees is the one the test made.
"""
import ast
import importlib
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from hilrig.cli.warmup import queue_order
from hilrig.jit import compilation
from numba.core.ccallback import CFunc
from numba.core.dispatcher import Dispatcher
from numba.core.extending import _Intrinsic
from rt_helpers import ROOT, hil

CALLEE = """
from hilrig.jit.kernel import kernel


@kernel
def gain():
    return {gain}
"""

CALLER = """
from hilrig.jit.kernel import kernel
from hilrig.plant.wt_callee import gain


@kernel
def scaled(x):
    return gain() * x
"""


def _run(args, cache, pythonpath=None, cwd=ROOT):
    env = dict(os.environ, HILRIG_CACHE_DIR=str(cache))
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _package_copy(tmp_path, gain):
    """The fingerprinted sources of hilrig in tmp_path/src/hilrig, plus a kernel in
    plant/wt_caller.py that calls one in plant/wt_callee.py returning ``gain``."""
    src = tmp_path / "src" / "hilrig"
    for path in compilation.source_files():
        target = src / path.relative_to(compilation.PACKAGE_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    (src / "plant" / "wt_callee.py").write_text(CALLEE.format(gain=gain))
    (src / "plant" / "wt_caller.py").write_text(CALLER)
    return src


@pytest.mark.system
def test_a_kernel_recompiles_when_a_kernel_it_calls_from_another_file_changes(tmp_path):
    src = _package_copy(tmp_path, gain=2.0)
    cache = tmp_path / "cache"
    call = [sys.executable, "-c", "from hilrig.plant.wt_caller import scaled; print(scaled(1.5))"]

    first = _run(call, cache, src.parent, cwd=tmp_path)
    assert first.stdout.strip() == "3.0"
    assert "hilrig: compiling numba kernels into" in first.stderr
    assert "hilrig.plant.wt_caller.scaled" in first.stderr
    (fingerprint,) = [p.name for p in cache.iterdir()]
    indexes = [p.name for p in (cache / fingerprint / "plant").glob("wt_*.nbi")]
    assert sorted(name.split("-")[0] for name in indexes) == ["wt_callee.gain",
                                                              "wt_caller.scaled"]

    again = _run(call, cache, src.parent, cwd=tmp_path)
    assert again.stdout.strip() == "3.0"
    assert "compil" not in again.stderr            # loaded from the cache

    # Only the callee's file changes: numba's own stamp (the caller's file) would keep
    # the caller's stale machine code, which has gain() = 2 inlined.
    (src / "plant" / "wt_callee.py").write_text(CALLEE.format(gain=4.0))
    edited = _run(call, cache, src.parent, cwd=tmp_path)
    assert edited.stdout.strip() == "6.0"
    assert "hilrig.plant.wt_caller.scaled" in edited.stderr
    assert len(list(cache.iterdir())) == 2           # a new fingerprint directory


USER_LAW = """
from hilrig.plant.wt_callee import gain
from numba import njit


@njit(cache=True)
def law(x):
    return gain() * x
"""


@pytest.mark.system
def test_a_users_kernel_that_calls_hilrigs_recompiles_when_hilrig_changes(tmp_path):
    """A user's cached kernel (a law calling the plant's model kernels, say) holds the
    machine code of the hilrig kernel it calls: numba stamps it with its own file only,
    so after hilrig changed it kept computing with the old kernel (an upgraded hilrig
    gave the example laws' NaN commands). Its stamp now holds hilrig's fingerprint."""
    src = _package_copy(tmp_path, gain=2.0)
    user = tmp_path / "user"
    user.mkdir()
    (user / "user_law.py").write_text(USER_LAW)
    cache = tmp_path / "cache"
    call = [sys.executable, "-c", "from user_law import law; print(law(1.5), "
            "law.stats.cache_hits[law.signatures[0]])"]
    path = os.pathsep.join([str(user), str(src.parent)])
    assert _run(call, cache, path, cwd=user).stdout.split() == ["3.0", "0"]
    assert _run(call, cache, path, cwd=user).stdout.split() == ["3.0", "1"]   # its cache
    assert list((user / "__pycache__").glob("user_law.law-*.nbi"))          # beside it
    (src / "plant" / "wt_callee.py").write_text(CALLEE.format(gain=4.0))
    assert _run(call, cache, path, cwd=user).stdout.split() == ["6.0", "0"]


FINGERPRINT = [sys.executable, "-c",
               "from hilrig.jit import compilation; print(compilation.fingerprint())"]


@pytest.mark.system
def test_only_an_edit_a_kernel_can_see_changes_the_fingerprint(tmp_path):
    """The fingerprint covers the kernel sources (the modules that can define kernels and
    what they import): an edit of the CLI, the campaign runner or a module of analysis
    keeps the cache; an edit of a kernel's module, or of a module a kernel's module
    imports (a layout constant), moves it to a new directory."""
    src = tmp_path / "src" / "hilrig"
    for path in compilation.package_modules().values():
        target = src / path.relative_to(compilation.PACKAGE_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    cache = tmp_path / "cache"
    base = _run(FINGERPRINT, cache, src.parent, cwd=tmp_path).stdout.strip()
    assert len(base) == 16

    def edited(module: str) -> str:
        path = src / module
        original = path.read_text()
        path.write_text(original + "\n# an edit\n")
        try:
            return _run(FINGERPRINT, cache, src.parent, cwd=tmp_path).stdout.strip()
        finally:
            path.write_text(original)

    for module in ("cli/main.py", "campaign/runner.py", "analysis/plot.py", "rt/session.py"):
        assert edited(module) == base, module
    built = src / "build" / "lib" / "hilrig" / "plant"    # what building a wheel leaves
    built.mkdir(parents=True)
    (built / "__init__.py").write_text("")
    shutil.copyfile(src / "plant" / "rrr3.py", built / "rrr3.py")
    assert _run(FINGERPRINT, cache, src.parent, cwd=tmp_path).stdout.strip() == base
    shutil.rmtree(src / "build")
    for module in ("plant/rrr3_scalar.py", "plant/layout.py", "rt/realtime.py",
                   "controllers/builtin.py", "jit/kernel.py", "__init__.py"):
        assert edited(module) != base, module


def _imports(tree: ast.AST, modules: dict) -> set:
    """The hilrig modules an ast imports (what the fingerprint's text scan must find)."""
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import: jit.compilation reads absolute ones"
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            found.update(".".join(parts[:end]) for end in range(1, len(parts) + 1)
                         if ".".join(parts[:end]) in modules)
    return found


def test_the_import_scan_finds_every_import_the_parser_finds():
    modules = compilation.package_modules()
    for name, path in modules.items():
        text = path.read_text()
        missed = _imports(ast.parse(text), modules) - compilation.imported_modules(text, modules)
        assert not missed, f"{name}: the fingerprint's scan misses {sorted(missed)}"


@pytest.mark.parametrize("name", [n for n in compilation.package_modules()
                                  if n != "hilrig.cli.__main__"])
def test_every_module_that_defines_a_kernel_is_a_kernel_source(name):
    """The seeds of the fingerprint (a top-level import of numba or hilrig.jit.kernel)
    catch every module that defines a numba kernel, cfunc or intrinsic."""
    module = importlib.import_module(name)
    defined = [attr for attr, value in vars(module).items()
               if isinstance(value, (Dispatcher, CFunc, _Intrinsic))
               and getattr(getattr(value, "py_func", None) or getattr(value, "_pyfunc", None)
                           or getattr(value, "_defn", None), "__module__", None) == name]
    if defined:
        assert name in compilation.kernel_modules(), (name, defined)


# One process of test_processes_saving_specialisations_of_one_kernel_at_once_lose_none: saves SAVES specialisations of one kernel.
SAVER = """
import os, sys, time
import hilrig.jit.kernel                   # installs hilrig's cache plumbing
from numba.core import caching
folder, tag = sys.argv[1], sys.argv[2]
cache = caching.IndexDataCacheFile(folder, "kernel.f-1", "stamp")
open(os.path.join(folder, "ready-" + tag), "w").close()
while not os.path.exists(os.path.join(folder, "go")):
    time.sleep(0.01)
for i in range({saves}):
    cache.save((tag, i), (tag, i))
"""
SAVES = 300


@pytest.mark.system
def test_processes_saving_specialisations_of_one_kernel_at_once_lose_none(tmp_path):
    """numba saves a specialisation by reading the kernel's index, naming a data file and
    writing both: jit.compilation locks that, so that two processes compiling into one
    cache (a test and its `hil` subprocess, campaign workers) keep every entry, each
    with its own data."""
    code = SAVER.format(saves=SAVES)
    savers = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), tag])
              for tag in ("a", "b")]
    try:
        deadline = time.monotonic() + 300
        while not all((tmp_path / f"ready-{tag}").exists() for tag in ("a", "b")):
            assert all(p.poll() is None for p in savers), "a saver failed to start"
            assert time.monotonic() < deadline, "the savers never got ready"
            time.sleep(0.01)
        (tmp_path / "go").touch()        # both save at once from here
        assert [p.wait(timeout=300) for p in savers] == [0, 0]
    finally:
        for p in savers:
            p.kill()
    from numba.core import caching
    cache = caching.IndexDataCacheFile(str(tmp_path), "kernel.f-1", "stamp")
    for tag in ("a", "b"):
        assert [cache.load((tag, i)) for i in range(SAVES)] == [(tag, i) for i in range(SAVES)]


CLAIMER = """
import sys
from hilrig.jit import compilation
from hilrig.timing.pacing import deadline_ns

args = tuple(deadline_ns.typeof_pyval(v) for v in (1, 2, 3))
if sys.argv[1] == "holder":        # claims it, and compiles it when told to
    with compilation.claimed(deadline_ns, args):
        print("held", flush=True)
        sys.stdin.readline()
        deadline_ns.compile(args)
elif sys.argv[1] == "asker":       # would compile it unless claimed
    print(deadline_ns.compile_unclaimed((1, 2, 3)), flush=True)
else:                              # calls it
    print(deadline_ns(1, 2, 3), flush=True)
"""


def _waits_for_a_lock(pid: int) -> bool:
    """Whether process ``pid`` is blocked on a file lock (a ``->`` line of /proc/locks)."""
    with open("/proc/locks") as f:
        return any(line.split()[1] == "->" and line.split()[5] == str(pid) for line in f)


@pytest.mark.system
def test_a_process_that_needs_a_kernel_another_compiles_waits_and_loads_it(tmp_path):
    """jit.compilation.claimed: while one process holds the claim on a specialisation
    (it compiles it), another that needs it waits, then loads it from the cache: it is
    compiled once. One that would only compile it ahead (compile_unclaimed) leaves it."""
    env = dict(os.environ, HILRIG_CACHE_DIR=str(tmp_path / "cache"))

    def start(role, **kw):
        return subprocess.Popen([sys.executable, "-c", CLAIMER, role], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    holder = start("holder", stdin=subprocess.PIPE)
    needer = None
    try:
        assert holder.stdout.readline() == "held\n", holder.stderr.read()
        asker = start("asker")
        out, err = asker.communicate(timeout=300)
        assert (out, "hilrig: compiled" in err) == ("False\n", False), err
        needer = start("needer")
        deadline = time.monotonic() + 300
        while not _waits_for_a_lock(needer.pid):
            assert needer.poll() is None, needer.communicate()
            assert time.monotonic() < deadline, "the second process never waited"
            time.sleep(0.01)
        _, held_err = holder.communicate("go\n", timeout=300)
        out, err = needer.communicate(timeout=300)
    finally:
        for process in (holder, needer):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    assert holder.returncode == 0 and "hilrig.timing.pacing.deadline_ns" in held_err, held_err
    assert needer.returncode == 0 and out == "7\n", err
    assert "hilrig: compiled" not in err, err


@pytest.mark.system
def test_kernels_outside_hilrig_keep_numbas_own_cache(tmp_path):
    (tmp_path / "user_kernels.py").write_text(textwrap.dedent("""
        import hilrig.jit.kernel
        from numba import njit


        @njit(cache=True)
        def twice(x):
            return 2 * x
    """))
    cache = tmp_path / "cache"
    call = [sys.executable, "-c", "from user_kernels import twice; print(twice(4))"]
    env_path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    proc = _run(call, cache, env_path, cwd=tmp_path)
    assert proc.stdout.strip() == "8"
    assert "hilrig:" not in proc.stderr
    assert list((tmp_path / "__pycache__").glob("user_kernels.twice-*.nbi"))
    assert not list(cache.rglob("user_kernels*"))


@pytest.mark.system
def test_after_hil_warmup_the_commands_compile_nothing(tmp_path):
    """`hil warmup` into an empty directory beside the current one: it starts from a
    copy of the current cache (so the test does not pay the whole compilation when the
    suite's own runs filled it), fills what is missing and prunes other fingerprints."""
    cache = tmp_path / "cache"
    current = compilation.cache_dir()
    shutil.copytree(current, cache / current.name)
    (cache / "0123456789abcdef").mkdir()             # an older fingerprint's directory
    (cache / "notes").mkdir()                        # not a fingerprint: left alone
    config = str(ROOT / "configs" / "rig_inprocess.toml")

    warmup = _run(hil("warmup", config, "rrr3_pd", "--prune", "--jobs", "2"), cache)
    assert "warmup: 2 configs" in warmup.stdout
    assert f"cache {cache / current.name}" in warmup.stdout
    assert sorted(p.name for p in cache.iterdir()) == sorted([current.name, "notes"])
    for package in ("plant", "controllers", "rt", "telemetry", "timing"):
        assert list((cache / current.name / package).glob("*.nbi")), package

    for command in (["sim", config, "--duration", "0.01", "--out", str(tmp_path / "s.npz")],
                    ["run", config, "--fast", "--duration", "0.01", "--no-plot",
                     "--log", str(tmp_path / "r.mcap")]):
        proc = _run(hil(*command), cache)
        assert "hilrig: compil" not in proc.stderr, command

    listing = _run(hil("warmup", "--list"), cache).stdout
    assert listing.startswith(f"cache {cache / current.name}: ")
    assert "warmed by hil warmup:" in listing
    assert "rig_inprocess" in listing and "rrr3_pd" in listing
    kernels = {line.split()[0]: int(line.split()[1]) for line in listing.splitlines()
               if line.startswith("  ")}
    assert kernels["rt.realtime.run_loop"] >= 1 and kernels["rt.lockstep.run"] >= 1
    empty = _run(hil("warmup", "--list"), tmp_path / "empty").stdout
    assert ": 0 kernels, 0 specialisations" in empty and "not warmed" in empty


def test_parallel_workers_take_each_models_first_config_first():
    """The queue of `hil warmup --jobs N`: the first config of each model (the costly
    ones: they compile the model's loops), models with more configs first, then the rest;
    every config once."""
    names = ["a1", "b1", "a2", "c1", "a3", "b2"]
    models = ["a", "b", "a", "c", "a", "b"]
    assert queue_order(names, models) == ["a1", "b1", "c1", "a2", "a3", "b2"]


def test_hil_warmup_refuses_no_process_in_one_line(capsys):
    from hilrig.cli.main import main

    assert main(["warmup", "--jobs", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--jobs: must be at least 1, got 0" in err
