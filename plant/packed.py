"""One plant step per call from Python at the lowest call cost: every argument in one array.

Calling a numba kernel from Python costs mostly the dispatch: numba types and
unboxes every argument, ~100-150 ns per array (plant.stepping.advance takes 10
arguments, 6 of them arrays). ``PackedStep`` puts the plant's arrays, the held
input, the time, the step and the method ids into one float64 block; its
kernel ``advance_packed`` takes that block alone and rebuilds the arrays as
views inside numba (``vector_view``, ``matrix_view``). ``PackedStep.step`` calls
``advance_packed_for``, compiled for the plant's family (plant.family), through its
entry point for the one signature it can have (the family, a 1-D C-contiguous float64
array), which skips numba's type dispatch as well (bench/bench_plant.py prints each
variant's cost). The 2-D views are built by ``matrix_view``: numba's
reshape goes through a general routine that cost ~25 ns per view here.

Block layout (float64): a header of HEADER entries, then params, jams (nq x JAM_COLUMNS),
x, u (n_act), work, stages (5 x nx), each C-contiguous.
"""
from __future__ import annotations

import functools

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.plant.family import Family, for_plant
from hilrig.plant.layout import JAM_COLUMNS
from hilrig.plant.model import Plant
from hilrig.plant.stepping import advance
from numba import typeof, types
from numba.core import cgutils
from numba.core.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

# header entries
P_T = 0           # plant time, s (advanced by h by each valid step)
P_H = 1           # step, s
P_METHOD = 2      # integrator id (plant.integrators)
P_CORRECTION = 3  # constraint correction id (rt.lockstep)
P_PARAMS = 4      # offset of params; its length follows
P_JAMS = 6        # offset of jams; nq follows
P_X = 8           # offset of x; nx follows
P_U = 10          # offset of u; n_act follows
P_WORK = 12       # offset of work; its rows and columns follow
P_STAGES = 15     # offset of stages (5 x nx)
HEADER = 16

SIGNATURE = (types.float64[::1],)


def _view_codegen(view):
    """Code building ``view`` (a C-contiguous array type) from (block, start, *shape):
    the elements block[start:start + prod(shape)], without a reference count."""
    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, value=args[0])
        first, *shape = (context.cast(builder, a, t, types.intp)
                         for a, t in zip(args[1:], sig.args[1:]))
        strides = [src.itemsize] if len(shape) == 1 else \
            [builder.mul(shape[1], src.itemsize), src.itemsize]
        out = make_array(view)(context, builder)
        populate_array(out, data=builder.gep(src.data, [first]),
                       shape=cgutils.pack_array(builder, shape),
                       strides=cgutils.pack_array(builder, strides),
                       itemsize=src.itemsize, meminfo=None)
        return out._getvalue()
    return codegen


def _is_flat(block):
    return isinstance(block, types.Array) and block.ndim == 1 and block.layout == "C"


@intrinsic
def vector_view(typingctx, block, start, n):
    """block[start:start + n] as a view that borrows the block's memory without a
    reference count. ``block``: 1-D C-contiguous, long enough (not checked); it is
    the caller's argument, alive throughout. (numba's slice costs ~10 ns here.)"""
    if not _is_flat(block):
        return None
    return block(block, start, n), _view_codegen(block)


@intrinsic
def matrix_view(typingctx, block, start, rows, cols):
    """The (rows, cols) C-contiguous view of block[start:start + rows * cols], borrowed
    like vector_view's. (numba's slice + reshape costs ~35 ns here.)"""
    if not _is_flat(block):
        return None
    matrix = block.copy(ndim=2)
    return matrix(block, start, rows, cols), _view_codegen(matrix)


@kernel
def advance_packed(block):
    """plant.stepping.advance on the arrays packed in ``block`` (see module docstring);
    advances block[P_T] by h. Returns False if the state became invalid."""
    return advance_packed_for(None, block)


@kernel
def advance_packed_for(mech, block):
    """advance_packed in a kernel compiled for ``mech`` (plant.family: a built-in family,
    a user's chain's mechanism)."""
    op, n_p = int(block[P_PARAMS]), int(block[P_PARAMS + 1])
    oj, nq = int(block[P_JAMS]), int(block[P_JAMS + 1])
    ox, nx = int(block[P_X]), int(block[P_X + 1])
    ou, nact = int(block[P_U]), int(block[P_U + 1])
    ow, rows, cols = int(block[P_WORK]), int(block[P_WORK + 1]), int(block[P_WORK + 2])
    ost = int(block[P_STAGES])
    ok = advance(vector_view(block, op, n_p), matrix_view(block, oj, nq, JAM_COLUMNS), block[P_T],
                 vector_view(block, ox, nx), vector_view(block, ou, nact), block[P_H],
                 int(block[P_METHOD]), int(block[P_CORRECTION]), matrix_view(block, ow, rows, cols),
                 matrix_view(block, ost, 5, nx), mech)
    if ok:
        block[P_T] += block[P_H]
    return ok


class PackedStep:
    """The plant step of a real-time loop: ``step()`` advances ``plant`` by h with the
    input ``u`` (a view into the block: write the command there) held, applies the
    correction and checks the state.

    Packing rebinds the plant's arrays (params, jams, x, work, stages) to views of
    the block, so the plant object and the packed kernel share one state and the
    plant's own methods (start_jam, inspection) keep working on it; ``step()``
    keeps plant.t equal to the block's time. ``call(block)`` is the bare compiled
    call (what ``step()`` makes, without updating plant.t), the cheapest from Python.

    Args:
        plant: the plant, in its initial state (plant.t: its time, s).
        h: step, s.
        method: integrator id (plant.integrators).
        correction: constraint correction id (rt.lockstep).
    """

    def __init__(self, plant: Plant, h: float, method: int, correction: int = 0):
        parts = (plant.params, plant.jams, plant.x, np.zeros(plant.nact), plant.work,
                 plant.stages)
        offsets = np.cumsum([HEADER] + [a.size for a in parts])
        self.block = np.zeros(offsets[-1])
        views = []
        for start, part in zip(offsets, parts):
            view = self.block[start:start + part.size].reshape(part.shape)
            view[...] = part
            views.append(view)
        plant.params, plant.jams, plant.x, self.u, plant.work, plant.stages = views
        header = self.block[:HEADER]
        header[P_T], header[P_H], header[P_METHOD], header[P_CORRECTION] = \
            plant.t, h, method, correction
        header[P_PARAMS:P_PARAMS + 2] = offsets[0], plant.params.size
        header[P_JAMS:P_JAMS + 2] = offsets[1], plant.nq
        header[P_X:P_X + 2] = offsets[2], plant.x.size
        header[P_U:P_U + 2] = offsets[3], plant.nact
        header[P_WORK:P_WORK + 3] = offsets[4], plant.work.shape[0], plant.work.shape[1]
        header[P_STAGES] = offsets[5]
        self.plant = plant
        self.h = float(h)
        mech = for_plant(plant, method)
        if isinstance(mech, Family):     # its entry point: no type dispatch per call
            signature = (typeof(mech), *SIGNATURE)
            advance_packed_for.compile(signature)
            self.call = functools.partial(advance_packed_for.get_overload(signature), mech)
        else:   # a user's chain: its mechanism goes with every call
            self.call = functools.partial(advance_packed_for, mech)

    def step(self) -> bool:
        """One step from plant.t with ``u`` held. Returns False (the state is then
        invalid, the time not advanced) on NaN or a singular mass matrix.

        plant.t is the one plant clock (a caller may set it, e.g. to k h); the block's
        time is loaded from it before the call and read back after.
        """
        self.block[P_T] = self.plant.t
        if self.call(self.block):
            self.plant.t = self.block[P_T]
            return True
        return False
