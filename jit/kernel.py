"""The decorators numba kernels in hilrig are compiled with: ``kernel`` for every
kernel, and variants for the fused steps and for the loops that allocate (below).

- ``cache=True``: compiled code is stored on disk, so later runs start without
  compiling. jit.compilation (installed below, before any kernel is defined)
  keys hilrig's cache by a fingerprint of all of hilrig's kernel sources, so
  editing any kernel, also one that others call or inline from another file,
  recompiles them instead of loading stale code; it prints each compilation to
  stderr. ``hil warmup`` compiles every kernel the shipped configs use ahead.
- ``nogil=True``: kernels release the GIL, so a worker thread (the 3RRR
  correction, the telemetry writer) runs beside the real-time loop.
- ``error_model="numpy"``: a float division by zero gives inf/NaN instead of
  raising. This removes a checked branch from every division (measured: ~20 ns
  per call of a small kernel); invalid states are caught by the NaN checks
  after each step instead.
- ``_nrt=False``: no numba runtime (the reference counts of arrays). With it, a
  compiled kernel increments the count of each array argument on entry and
  decrements it on exit, and counts every slice it makes: each an atomic
  operation, which also stops the CPU from overlapping the memory accesses
  around it. A plant step (plant.integrators.step, six arrays) paid about 14 of
  them. Kernels without the runtime cannot allocate (np.zeros, .copy(), array
  expressions, slice assignment) nor return a new array view to Python: they
  work on caller-owned arrays, copy with element loops and return scalars.
- one specialisation per argument type, not per value (``Kernel``): a constant int a
  kernel passes to another (an event kind, a params index, a counter's first value 0)
  compiles the callee for int64; only ``mech`` (the plant family, plant.family) and the
  sizes a ``sized_kernel`` names are specialised on their value.
"""
import os
from typing import Callable

from hilrig.errors import ConfigError
from hilrig.jit import compilation
from numba import cfunc, config, njit, types
from numba.core import sigutils
from numba.core.ccallback import CFunc
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher

compilation.install()

LITERAL_ARGS = frozenset({"mech"})   # the arguments a kernel is specialised on by value


class Kernel(CPUDispatcher):
    """numba's dispatcher, but a call from another kernel that passes a constant int (a
    named constant such as an event kind or a params index, or a counter's first value)
    compiles the callee for int64, not once for each value (``Literal[int](v)``), except
    for the arguments named in ``literal_args`` (default LITERAL_ARGS: ``mech``, the
    plant family a kernel is compiled for, plant.family).

    numba types a loop counter started at 0 first as the literal 0 and then as int64, and
    compiles every kernel it passes the counter to for both: rt.realtime.run_loop compiled
    its rehearsal twice (2.7 s) and 24 specialisations of small kernels it never ran
    (bench/bench_compile.py). The machine code of a kernel that LLVM inlines into its
    caller is the same: the constant propagates there."""

    literal_args = LITERAL_ARGS

    def get_call_template(self, args, kws):
        names = list(self._compiler.pysig.parameters)
        args = tuple(a if i < len(names) and names[i] in self.literal_args else _plain(a)
                     for i, a in enumerate(args))
        kws = {name: a if name in self.literal_args else _plain(a) for name, a in kws.items()}
        return super().get_call_template(args, kws)

    def compile(self, sig):
        """numba's compile (or load from the cache) of the specialisation ``sig``, holding
        its claim among the processes that share the cache (jit.compilation.claimed): a
        process that needs a specialisation another one is compiling waits for it and
        loads it."""
        args = tuple(sigutils.normalize_signature(sig)[0])
        if args in self.overloads:
            return super().compile(sig)
        with global_compiler_lock, compilation.claimed(self, args):
            return super().compile(sig)

    def compile_unclaimed(self, arguments: tuple) -> bool:
        """Compile (or load) the specialisation for ``arguments`` (values, typed as a call
        from Python types them) unless another process has claimed it (it is compiling it
        into the shared cache); returns whether this process has it now."""
        args = tuple(self.typeof_pyval(a) for a in arguments)
        with global_compiler_lock, compilation.claimed(self, args, wait=False) as mine:
            if mine:
                self.compile(args)
            return mine


def _plain(typ):
    """An int literal's type as int64 (Kernel); any other type as it is."""
    return types.unliteral(typ) if isinstance(typ, types.IntegerLiteral) else typ


def _decorator(literal_args=LITERAL_ARGS, **options):
    """A decorator that compiles a function as a cached ``Kernel`` in nopython mode with
    numba's target ``options`` (what ``numba.njit(cache=True, **options)`` does, with
    Kernel for numba's dispatcher class). ``literal_args``: Kernel.literal_args."""
    options = dict(options, nopython=True, boundscheck=None)

    def decorate(function):
        if config.DISABLE_JIT:
            return function
        dispatcher = Kernel(py_func=function, locals={}, targetoptions=dict(options))
        dispatcher.literal_args = frozenset(literal_args)
        dispatcher.enable_caching()
        return dispatcher
    return decorate


# forceinline=False is said explicitly: numba lets a kernel that sets no value inherit the
# flag from the kernel being compiled when it is first typed (fused_helper below), and a
# kernel's cached code must not depend on which caller came first.
KERNEL_OPTIONS = dict(nogil=True, error_model="numpy", forceinline=False, _nrt=False)
kernel = _decorator(**KERNEL_OPTIONS)


def sized_kernel(*names: str):
    """``kernel``, specialised also on the values of the int arguments ``names`` (a matrix
    size: its loops unrolled), as numba does by default (Kernel)."""
    return _decorator(LITERAL_ARGS | set(names), **KERNEL_OPTIONS)

# For the per-evaluation helpers of the fused steps (plant.rk4_arm3,
# plant.rrr3_scalar), inlined in numba's IR. LLVM inlines small compiled callees
# by itself but not larger ones such as serial_arm.accel3_scalar (a real call
# spills a dozen arguments per evaluation), and the fused steps measured 10-20 %
# faster with their helpers inlined here. Each inlined call site costs compile
# time: keep it to scalar helpers with few call sites (inlining the whole
# derivative took compile time to 99 s).
inline_kernel = njit(cache=True, nogil=True, error_model="numpy", inline="always", _nrt=False)


# The fused steps (plant.rk4_arm3, plant.rrr3_scalar): also let LLVM contract
# a * b + c into one fused multiply-add (one rounding instead of two; no other
# fast-math license). Results move in the last bit only; measured ~8 % faster.
fused_kernel = _decorator(nogil=True, error_model="numpy", fastmath={"contract"},
                          forceinline=False, _nrt=False)

# The helpers of a fused step (plant.rrr3_scalar): compiled once each, as functions that
# LLVM always inlines into their callers (``forceinline``, LLVM's alwaysinline), with the
# fused steps' ``contract``: the same operations as inlined in numba's IR (``inline_kernel``,
# which types and lowers the helper again at every call site), the multiply-adds LLVM fuses
# may differ (results move in the last bits). The 3RRR's fused step with its helpers inlined
# in the IR took 9 s of compile time (bench/bench_compile.py), most of it numba's inlining
# pass and the typing of the copies.
fused_helper = _decorator(nogil=True, error_model="numpy", fastmath={"contract"},
                          forceinline=True, _nrt=False)

# A kernel that allocates (the flexible chain's event-located integrator,
# plant.flex_chain.integrators): with the runtime. A loop of ticks never is one: with
# the runtime, the plant step inlined into it counted references to every array it
# passes on, every tick (rt.realtime.run_loop takes its scratch from its caller).
allocating_kernel = _decorator(nogil=True, error_model="numpy", forceinline=False)


def compile_pointer(function: Callable, signature, role: str) -> CFunc:
    """A user's function as a numba cfunc of ``signature``: what the loops call through a
    function pointer (a control law, a chain's mechanism), so that they are compiled once
    for every such function. Cached beside its source file (none for a function typed in
    a shell).

    ``function``: a cfunc of that signature (returned as it is), an ``@numba.njit``
    function or a plain Python function numba compiles in nopython mode. ``role``: what it
    is for the messages, e.g. "a law law(t, pos, vel, cur, params, state, u)". Raises
    ConfigError naming the function and numba's reason when it cannot serve.
    """
    if isinstance(function, CFunc):
        if function._sig != signature:
            raise ConfigError(f"{_name(function)}: compiled with signature {function._sig}, "
                              f"{role} needs {signature}")
        return function
    python = function.py_func if isinstance(function, CPUDispatcher) else function
    source = getattr(getattr(python, "__code__", None), "co_filename", "")
    try:
        return cfunc(signature, cache=os.path.isfile(source), error_model="numpy")(python)
    except Exception as exc:   # numba's typing and lowering errors have no common base
        lines = [line.strip() for line in str(exc).splitlines()
                 if line.strip() and not line.startswith("Failed in")]
        raise ConfigError(f"{_name(function)} does not compile as {role}: "
                          f"{lines[0] if lines else type(exc).__name__}") from exc


def _name(function) -> str:
    module = getattr(function, "__module__", None) or "?"
    return f"{module}:{getattr(function, '__qualname__', getattr(function, '__name__', function))}"
