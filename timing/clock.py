"""Monotonic time, absolute sleeps and atomic flags for compiled real-time code.

The real-time loops run inside numba kernels that never return to Python
between ticks, so they read the clock and sleep through libc directly:
``clock_gettime`` and ``clock_nanosleep`` are bound as external symbols (not
ctypes pointers), which keeps the kernels cacheable. Times are int64
nanoseconds of CLOCK_MONOTONIC, the clock ``time.monotonic_ns`` reads.

Arrays shared between a compiled loop and another thread (mailboxes, the
telemetry head) are read and written with acquire/release atomics, so the
compiler cannot cache a flag in a register or reorder a row's stores past
the index that publishes it.
"""
import time

import numpy as np
from hilrig.jit.kernel import kernel
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

CLOCK_MONOTONIC = 1
TIMER_ABSTIME = 1

_clock_gettime = types.ExternalFunction("clock_gettime", types.int32(types.int32, types.voidptr))
_clock_nanosleep = types.ExternalFunction(
    "clock_nanosleep", types.int32(types.int32, types.int32, types.voidptr, types.voidptr))


@intrinsic
def _data_pointer(typingctx, arr):
    """void* to the first element of an array (for passing to libc)."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(arr)(context, builder, args[0])
        return builder.bitcast(ary.data, cgutils.voidptr_t)
    return types.voidptr(arr), codegen


@intrinsic
def atomic_load(typingctx, arr, index):
    """arr[index] read with acquire ordering (int64 or float64 arrays)."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(arr)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arr, ary, [args[1]])
        return builder.load_atomic(ptr, "acquire", arr.dtype.bitwidth // 8)
    return arr.dtype(arr, index), codegen


@intrinsic
def atomic_store(typingctx, arr, index, value):
    """arr[index] = value with release ordering (int64 or float64 arrays)."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(arr)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arr, ary, [args[1]])
        val = context.cast(builder, args[2], signature.args[2], arr.dtype)
        builder.store_atomic(val, ptr, "release", arr.dtype.bitwidth // 8)
        return context.get_dummy_value()
    return types.void(arr, index, value), codegen


def timespec() -> np.ndarray:
    """The scratch array the clock kernels need: [seconds, nanoseconds] as int64."""
    return np.zeros(2, dtype=np.int64)


@kernel
def now_ns(ts):
    """CLOCK_MONOTONIC in ns. ``ts``: a ``timespec()`` scratch array."""
    _clock_gettime(CLOCK_MONOTONIC, _data_pointer(ts))
    return ts[0] * 1000000000 + ts[1]


@kernel
def sleep_until_ns(ts, deadline):
    """Sleep until CLOCK_MONOTONIC reaches ``deadline`` ns (returns at once if past)."""
    ts[0] = deadline // 1000000000
    ts[1] = deadline % 1000000000
    _clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, _data_pointer(ts), _data_pointer(ts))


@kernel
def wait_until_ns(ts, deadline, spin):
    """Sleep until ``spin`` ns before ``deadline``, then busy-wait to it; returns the wake time.

    The sleep keeps the CPU free; the spin absorbs the kernel's wake-up
    latency (tens of µs on a VM) so that lateness stays small.
    """
    if deadline - spin > now_ns(ts):
        sleep_until_ns(ts, deadline - spin)
    t = now_ns(ts)
    while t < deadline:
        t = now_ns(ts)
    return t


def monotonic_ns() -> int:
    """The same clock from Python."""
    return time.monotonic_ns()


def spin_window_ns(spin: float, period: float) -> int:
    """The busy-wait window in ns: ``spin`` s, at most half the period ``period`` s."""
    return int(min(spin, 0.5 * period) * 1e9)
