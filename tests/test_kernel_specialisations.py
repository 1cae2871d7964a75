"""jit.kernel.Kernel: a kernel called from another with a constant int compiles once for
int64, not once per value; ``mech`` (plant.family) and a sized_kernel's sizes keep theirs.

The kernels here are Kernels with hilrig's options but no disk cache, so that each test
process compiles (and counts) their specialisations itself."""
from hilrig.jit.kernel import KERNEL_OPTIONS, LITERAL_ARGS, Kernel
from hilrig.plant.family import RRR3, SERIAL_ARM


def uncached(function, literal_args=LITERAL_ARGS):
    """``function`` as jit.kernel's ``kernel`` (or ``sized_kernel``) compiles it, uncached."""
    dispatcher = Kernel(py_func=function, locals={},
                        targetoptions=dict(KERNEL_OPTIONS, nopython=True))
    dispatcher.literal_args = frozenset(literal_args)
    return dispatcher


def _event(kind, tick):
    return 10 * kind + tick


def _loop(n):
    """A counter started at 0 (numba types it first as the literal 0, then as int64) and
    named constants, as rt.realtime.run_loop passes them."""
    total = 0
    k = 0
    while k < n:
        total += _event(3, k) + _event(4, k)
        k += 1
    return total + _event(7, k)


def _of_family(x, mech):
    return x + mech


def _families(x, mech):
    return _of_family(x, mech) + _of_family(x, 7)


def _sized(a, n):
    total = 0.0
    for i in range(n):
        total += a * i
    return total


def _sizes(a):
    return _sized(a, 3) + _sized(a, 6)


_event, _loop, _of_family, _families, _sizes = (
    uncached(f) for f in (_event, _loop, _of_family, _families, _sizes))
_sized = uncached(_sized, LITERAL_ARGS | {"n"})


def _signatures(dispatcher) -> list:
    return sorted(str(sig) for sig in dispatcher.signatures)


def test_constant_ints_and_a_counter_compile_a_callee_once():
    assert _loop(5) == sum(30 + k + 40 + k for k in range(5)) + 75
    assert _signatures(_event) == ["(int64, int64)"]


def test_the_family_and_a_size_keep_their_values():
    assert _families(1, SERIAL_ARM) == 2 * 1 + int(SERIAL_ARM) + 7
    assert _families(1, RRR3) == 2 * 1 + int(RRR3) + 7
    assert _signatures(_of_family) == [f"(int64, Literal[int]({int(SERIAL_ARM)}))",
                                       f"(int64, Literal[int]({int(RRR3)}))",
                                       "(int64, Literal[int](7))"]
    assert _sizes(2.0) == 2.0 * (0 + 1 + 2) + 2.0 * (0 + 1 + 2 + 3 + 4 + 5)
    assert _signatures(_sized) == ["(float64, Literal[int](3))", "(float64, Literal[int](6))"]
