"""Where hilrig's compiled kernels are cached, when that cache is stale, and what a
compilation prints.

**The cache key.** numba's own on-disk cache stamps a kernel with the hash of the one
file that defines it, so a kernel that calls or inlines a kernel from another file
keeps its cached machine code after that other file changes (and computes with the
old physics). hilrig's kernels are instead keyed by one *fingerprint*: the SHA-256 of
the *kernel sources* (``source_files``), each with its path relative to the package,
in sorted order. The kernel sources are the modules that can define a kernel (every
module of hilrig that imports ``numba`` or ``hilrig.jit.kernel`` at its top level: a
kernel is a function under one of their decorators), and every hilrig module they import, at
any depth and also inside functions, with the ``__init__.py`` of each package on the
way (found by reading the import statements: ``kernel_modules``). A compiled kernel
can only depend on code in those files (and on numba, Python and the CPU, which
numba's index already checks), so any edit that could change a compiled kernel
changes the fingerprint, and the kernels are looked up in a directory of their own for
it: such an edit makes them compile afresh, never load stale code. An edit elsewhere
(the CLI, the campaign runner, analysis, docs) keeps the cache. Reading and scanning
the ~130 files costs a few ms, once per process, at the first kernel compiled or
loaded.

**The cache directory**, ``<root>/<fingerprint>/<package>/`` (``<package>``: ``plant``,
``plant/flex_chain``, ``rt``, ...), with ``<root>`` the first that is writable of:

- ``$HILRIG_CACHE_DIR`` when set (then only it);
- ``__pycache__/numba`` inside the installed package (a source checkout, or a wheel in
  a writable site-packages);
- ``$XDG_CACHE_HOME/hilrig/numba`` (default ``~/.cache/hilrig/numba``);
- ``<tmp>/hilrig-<uid>/numba``.

Directories of older fingerprints stay until ``hil warmup --prune`` removes them
(about 10 MB each). ``NUMBA_CACHE_DIR`` does not move hilrig's kernels.

**A user's kernels** (a control law, a chain's mechanism, the functions they call; tests
and bench scripts too) keep numba's locators, beside their own file, but their stamp
also holds the fingerprint (``UserCodeLocator``): such a kernel that calls one of
hilrig's (the plant's model kernels in a computed-torque law) carries that kernel's
machine code in its own cache entry, and numba's stamp alone (its own file's) kept it
after hilrig changed: an upgraded hilrig ran the user's law with the old kernel, e.g.
reading the model block in its old layout (NaN commands). Code installed in a
site-packages folder (other libraries) keeps numba's stamp.

**Processes at once.** numba saves a specialisation by reading the kernel's index,
naming a data file and writing both; hilrig makes that one step under a file lock
(``LockedIndexDataCacheFile``), so that processes compiling into one cache at the same
time (a test and the `hil` it started, campaign workers) keep every entry with its own
machine code. And a process compiles a specialisation of one of hilrig's kernels holding
its *claim* (``claimed``: a lock on a claim file beside the kernel's index, one per
specialisation): another process that needs the same specialisation meanwhile waits for
it and loads it from the cache instead of compiling it a second time. `hil run`'s two
processes (rt.loop_ahead) share their compiling that way.

**Progress.** When a hilrig kernel compiles (a cache miss), one line goes to stderr
per compiled kernel, after a one-line header; loading from the cache prints nothing.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import pickle
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from numba.core import caching, event
from numba.core.caching import _CacheLocator
from numba.core.dispatcher import Dispatcher

# Older numba releases name it _CacheImpl.
_CACHE_IMPL = getattr(caching, "CacheImpl", None) or caching._CacheImpl

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV = "HILRIG_CACHE_DIR"
NOT_CODE = ("configs",)     # packages of data only


@functools.lru_cache(maxsize=None)
def kernel_packages() -> tuple[str, ...]:
    """hilrig's code packages as folders relative to the package (``plant``,
    ``plant/flex_chain``, ``rt``, ...): the folders with an ``__init__.py`` reached from
    the package through such folders only (not a ``build/`` copy), but data."""
    found, todo = [], [PACKAGE_ROOT]
    while todo:
        folder = todo.pop()
        for child in folder.iterdir():
            if child.is_dir() and (child / "__init__.py").is_file() \
                    and child.name not in NOT_CODE:
                found.append(child.relative_to(PACKAGE_ROOT).as_posix())
                todo.append(child)
    return tuple(sorted(found))


def package_modules() -> dict[str, Path]:
    """Every module of hilrig by dotted name (``hilrig.plant.rrr3``; a package by its
    ``__init__.py``): the top-level modules and those of ``kernel_packages``."""
    modules = {}
    for folder in ("",) + kernel_packages():
        prefix = "hilrig" + ("." + folder.replace("/", ".") if folder else "")
        for path in sorted((PACKAGE_ROOT / folder).glob("*.py")):
            name = prefix if path.name == "__init__.py" else f"{prefix}.{path.stem}"
            modules[name] = path
    return modules


# A top-level (unindented) import of numba or of hilrig.jit.kernel (the decorators): the
# module can define kernels.
_DEFINES_KERNELS = re.compile(r"^(?:(?:from|import)[ \t]+(?:numba|hilrig\.jit\.kernel)\b"
                              r"|from[ \t]+hilrig\.jit[ \t]+import[ \t]+[(\w ,]*\bkernel\b)", re.M)
# Every import statement, also indented (inside a function), spanning lines in brackets or
# after a backslash.
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|(?:[^\n\\]|\\[\s\S])*)"
                     r"|import[ \t]+((?:[^\n\\]|\\[\s\S])*))", re.M)
_COMMENT = re.compile(r"#[^\n]*")


def imported_modules(text: str, modules: dict[str, Path]) -> set[str]:
    """The hilrig modules (keys of ``modules``) that the source ``text`` imports, with the
    packages they are in (importing hilrig.a.b runs hilrig/__init__.py and
    hilrig/a/__init__.py). Read from the import statements' text: a statement in a
    string or a comment counts too, which can only add modules."""
    found = set()
    for match in _IMPORT.finditer(text):
        source, names, plain = match.groups()
        items = _COMMENT.sub("", plain if plain is not None else names)
        items = [item.split()[0] for item in items.strip().strip("()").replace("\\", " ")
                 .split(",") if item.split()]
        targets = items if plain is not None else [source] + [f"{source}.{i}" for i in items]
        for target in targets:
            parts = target.split(".")
            for end in range(1, len(parts) + 1):
                name = ".".join(parts[:end])
                if name in modules:
                    found.add(name)
    return found


@functools.lru_cache(maxsize=None)
def kernel_modules() -> tuple[str, ...]:
    """The kernel sources by module name (module docstring): the modules that can
    define a kernel, and the transitive closure of their hilrig imports."""
    modules = package_modules()
    texts = {name: path.read_text(encoding="utf-8") for name, path in modules.items()}
    todo = [name for name, text in texts.items() if _DEFINES_KERNELS.search(text)]
    closure = set(todo)
    while todo:
        for name in imported_modules(texts[todo.pop()], modules):
            if name not in closure:
                closure.add(name)
                todo.append(name)
    for name in list(closure):            # the packages they are in run on import too
        parts = name.split(".")
        closure.update(".".join(parts[:end]) for end in range(1, len(parts)))
    return tuple(sorted(closure))


def source_files() -> list[Path]:
    """The files the fingerprint covers (the kernel sources), in hashing order."""
    modules = package_modules()
    return sorted((modules[name] for name in kernel_modules()),
                  key=lambda path: path.relative_to(PACKAGE_ROOT).as_posix())


@functools.lru_cache(maxsize=None)
def fingerprint() -> str:
    """The cache key: 16 hex digits of the SHA-256 over (relative path, size, contents)
    of every ``source_files()`` entry."""
    return _digest(source_files())


@functools.lru_cache(maxsize=None)
def package_fingerprint() -> str:
    """The same over every module of hilrig (``package_modules``), kernel source or not:
    what two processes compare to know they run the same hilrig (campaign.runner)."""
    return _digest(sorted(package_modules().values(),
                          key=lambda path: path.relative_to(PACKAGE_ROOT).as_posix()))


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        data = path.read_bytes()
        digest.update(f"{path.relative_to(PACKAGE_ROOT).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def cache_roots() -> list[Path]:
    """The candidate roots of the cache, in order of preference (module docstring)."""
    if os.environ.get(CACHE_ENV):
        return [Path(os.environ[CACHE_ENV])]
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [PACKAGE_ROOT / "__pycache__" / "numba", user / "hilrig" / "numba",
            Path(tempfile.gettempdir()) / f"hilrig-{os.getuid()}" / "numba"]


@functools.lru_cache(maxsize=None)
def cache_dir() -> Path | None:
    """This fingerprint's directory under the first writable root (created), or None
    when none is writable (numba then picks its own place for hilrig's kernels)."""
    for root in cache_roots():
        path = root / fingerprint()
        try:
            path.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
        except OSError:
            continue
        return path
    return None


def kernel_package(py_file: str) -> str | None:
    """The hilrig package folder (``plant``, ``plant/flex_chain``, ``rt``, ...) whose
    fingerprinted file is ``py_file``, or None for any other file."""
    path = Path(py_file).resolve()
    try:
        folder = path.parent.relative_to(PACKAGE_ROOT).as_posix()
    except ValueError:
        return None
    return folder if folder in kernel_packages() else None


class FingerprintLocator(_CacheLocator):
    """numba cache locator for the kernels of hilrig's packages: their cache lives in
    ``cache_dir()/<package>`` and its stamp is the fingerprint (module docstring)."""

    def __init__(self, py_func, py_file: str, package: str):
        self._py_file = py_file        # numba's warning about a kernel it cannot cache names it
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(cache_dir() / package)

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        return fingerprint()

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        package = kernel_package(py_file)
        if package is None or cache_dir() is None:
            return None
        locator = cls(py_func, py_file, package)
        try:
            locator.ensure_cache_path()
        except OSError:
            return None
        return locator


class UserCodeLocator(_CacheLocator):
    """numba's own locator for a kernel outside hilrig (``inner``: where numba would
    cache it, beside its file or in the user-wide cache), with hilrig's fingerprint in
    its stamp (module docstring, "A user's kernels")."""

    def __init__(self, inner: _CacheLocator):
        self._inner = inner
        self._py_file = getattr(inner, "_py_file", "")

    def ensure_cache_path(self) -> None:
        self._inner.ensure_cache_path()

    def get_cache_path(self) -> str:
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return self._inner.get_source_stamp(), fingerprint()

    def get_disambiguator(self) -> str:
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        if kernel_package(py_file) is not None or _installed(py_file):
            return None
        for locator_class in _CACHE_IMPL._locator_classes:
            if locator_class in (FingerprintLocator, UserCodeLocator):
                continue
            inner = locator_class.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner)
        return None


def _installed(py_file: str) -> bool:
    """Whether ``py_file`` belongs to an installed distribution (a site-packages folder)."""
    return any(part in ("site-packages", "dist-packages") for part in Path(py_file).parts)


def is_hilrig_kernel(dispatcher) -> bool:
    """Whether a numba dispatcher compiles one of hilrig's kernels."""
    py_func = getattr(dispatcher, "py_func", None)
    parts = getattr(py_func, "__module__", "").split(".")
    return len(parts) > 2 and parts[0] == "hilrig" and "/".join(parts[1:-1]) in kernel_packages()


def loaded_kernels() -> int:
    """Kernel specialisations this process loaded from the cache: the cache hits of
    every hilrig dispatcher in the loaded modules."""
    seen, hits = set(), 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("hilrig."):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Dispatcher) and is_hilrig_kernel(value) and id(value) not in seen:
                seen.add(id(value))
                hits += len(value.stats.cache_hits)
    return hits


@dataclass
class CachedKernel:
    """One kernel in a cache directory: ``name`` (module.qualname, e.g.
    hilrig.rt.realtime.run_loop), its compiled ``specialisations`` and their bytes."""

    name: str
    specialisations: int
    size: int


def cached_kernels(directory: Path | None = None) -> list[CachedKernel]:
    """What a cache directory (default: this fingerprint's, ``cache_dir()``) holds, by
    kernel, from numba's index files (``<package>/<module>.<qualname>-<line>.py*.nbi``,
    which numba writes and reads itself, next to one ``.nbc`` per specialisation)."""
    directory = cache_dir() if directory is None else Path(directory)
    if directory is None or not directory.is_dir():
        return []
    found = []
    for index in sorted(directory.rglob("*.nbi")):
        package = index.parent.relative_to(directory).as_posix().replace("/", ".")
        name = index.name.rsplit("-", 1)[0]
        try:
            with index.open("rb") as f:
                pickle.load(f)                           # numba's version
                _, overloads = pickle.loads(f.read())    # (stamp, {key: data file})
        except (OSError, EOFError, pickle.UnpicklingError, ValueError):
            continue
        files = [index.parent / data for data in overloads.values()]
        found.append(CachedKernel(f"hilrig.{package}.{name}", len(overloads),
                                  sum(f.stat().st_size for f in files if f.exists())))
    return found


def kernel_name(dispatcher) -> str:
    """``module.qualname`` of a dispatcher's function, e.g. hilrig.rt.realtime.run_loop."""
    return f"{dispatcher.py_func.__module__}.{dispatcher.py_func.__qualname__}"


class CompileProgress(event.Listener):
    """Prints each hilrig kernel numba compiles (numba's "numba:compile" event, which
    fires on a cache miss only) to stderr, and keeps ``compiled``: (name, seconds). With a
    ``label`` (a second process compiling for the first: rt.loop_ahead), its lines end
    with it and the header line is left to the first process. ``on_compile``: callables
    called (with no argument) as each kernel starts compiling, in the compiling thread
    (rt.loop_ahead starts its process at the first)."""

    def __init__(self):
        self.label = ""
        self.on_compile: list = []
        self.compiled: list[tuple[str, float]] = []
        self.first_start = None       # perf_counter() at the first compilation, s
        self._started: dict = {}      # id(event data) -> perf_counter() at its start, s

    def on_start(self, ev) -> None:
        if not is_hilrig_kernel(ev.data["dispatcher"]):
            return
        now = time.perf_counter()
        if self.first_start is None:
            self.first_start = now
            if not self.label:
                print(f"hilrig: compiling numba kernels into {cache_dir()} (once per "
                      f"source version; `hil warmup` compiles them all ahead)",
                      file=sys.stderr, flush=True)
        self._started[id(ev.data)] = now
        for hook in list(self.on_compile):
            hook()

    def on_end(self, ev) -> None:
        started = self._started.pop(id(ev.data), None)
        if started is None:
            return
        now = time.perf_counter()
        name = kernel_name(ev.data["dispatcher"])
        self.compiled.append((name, now - started))
        label = f" [{self.label}]" if self.label else ""
        print(f"hilrig: compiled {len(self.compiled):3d} {name} in {now - started:.1f} s "
              f"({now - self.first_start:.1f} s so far){label}", file=sys.stderr, flush=True)


progress = CompileProgress()


class LockedIndexDataCacheFile(caching.IndexDataCacheFile):
    """numba's index and data files of one kernel's cache, saved under an exclusive lock
    (``fcntl.flock`` of ``<index>.lock``). numba saves a specialisation by reading the
    index, naming a data file and writing both: two processes that compile two
    specialisations of one kernel at once (a test and the `hil` process it started,
    campaign workers, `hil warmup --jobs`) could otherwise drop each other's entry, or
    give both one data file, so that a later process loads the other's machine code."""

    def save(self, key, data):
        with open(self._index_path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            super().save(key, data)


_claims: dict[str, int] = {}    # the claim files this process holds: path -> descriptor


def _claim_path(dispatcher, args: tuple) -> str | None:
    """The claim file of the specialisation ``args`` (numba types) of a cached kernel,
    beside its index file; None for a kernel that is not cached on disk."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if cache_file is None:
        return None
    key = hashlib.sha256(repr(tuple(str(a) for a in args)).encode()).hexdigest()[:16]
    return f"{cache_file._index_path}.{key}.claim"


@contextmanager
def claimed(dispatcher, args: tuple, wait: bool = True):
    """Hold the claim on compiling the specialisation ``args`` of ``dispatcher`` among
    the processes that share this cache (an exclusive ``fcntl.flock`` of its claim file):
    yields True once held, or False at once when ``wait`` is False and another process
    holds it (it is compiling that specialisation, which will then be in the cache).
    Re-entrant in this process; a kernel without a disk cache is never claimed (True).

    A process that compiles a kernel holds its claim while it compiles it: another that
    needs the same specialisation meanwhile waits, then loads it from the cache instead of
    compiling it a second time (jit.kernel.Kernel.compile). Claims nest along calls (a
    kernel's callees compile while it is typed), and calls never form a cycle, so no two
    processes can each wait for the other's claim."""
    path = _claim_path(dispatcher, args)
    if path is None or path in _claims:
        yield True
        return
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:               # an unwritable cache: compile unclaimed
        yield True
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        _claims[path] = descriptor
        try:
            yield True
        finally:
            del _claims[path]
    finally:
        os.close(descriptor)      # (which releases the lock)


def install() -> None:
    """Put FingerprintLocator, then UserCodeLocator, first among numba's locators, save
    every cache entry under a lock (LockedIndexDataCacheFile) and listen for compilations
    (idempotent; done by jit.kernel before any kernel is defined)."""
    if FingerprintLocator not in _CACHE_IMPL._locator_classes:
        _CACHE_IMPL._locator_classes[:0] = [FingerprintLocator, UserCodeLocator]
        caching.IndexDataCacheFile = LockedIndexDataCacheFile
        event.register("numba:compile", progress)
