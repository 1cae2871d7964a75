"""Which plant code a compiled loop holds: the plant's *family*, fixed in Python before the
loop starts, so that a loop compiles the code of its plant's family and no other.

Every kernel that steps a plant or reads its model takes, as its last argument ``mech``,
what it is compiled for:

- ``None`` (the default): every built-in model, each call choosing by the params' header
  (``H_MODEL``), as a direct call from Python (tests, bench) does;
- a built-in family, ``SERIAL_ARM``, ``RRR3`` or ``CONTACT`` (the flexible chain on the
  ground, stepped by ``plant.flex_chain.tick``): a ``Family``, an int that numba types as
  a literal (``Literal[int](2)``), so that each loop is compiled once per family;
- a user's chain's mechanism (a compiled function, plant.interface): the chain's code.

``for_plant(plant, method)`` gives a plant's; the loops' Python callers pass it.

At each model's own calls (its fused step, its mass matrix, its correction, ...) the
stepping code calls ``compiled(mech, MODEL, kernel, otherwise, *args)``: ``kernel(*args)``
in a kernel compiled for ``mech`` when ``mech`` holds ``MODEL`` (a model id, or
``CHAINS``: the serial arms and a user's chains), else the constant ``otherwise``. numba
resolves it while typing the caller (it is an ``@intrinsic``), so the other families'
kernels are neither typed nor compiled: a 3RRR run compiles no serial arm, Rosenbrock or
contact code (bench/bench_compile.py lists what a run compiles). The run-time test of
``H_MODEL`` stays around each such call, so the arithmetic is the same as with
``None``, bit for bit; a plant stepped by a kernel of another family (which the callers
never do) meets ``otherwise``, an invalid step (health -1, False), not a silent one.
"""
from __future__ import annotations

from hilrig.plant.layout import MODEL_CHAIN, MODEL_RRR3, MODEL_SERIAL_ARM
from numba import types
from numba.core.typing import signature
from numba.extending import intrinsic, typeof_impl

FAMILY_CONTACT = 4     # beside plant.layout's model ids: the flexible chain on the ground
CHAINS = 5             # for ``compiled``: the serial arms and a user's chains
GROUPS = {CHAINS: (MODEL_SERIAL_ARM, MODEL_CHAIN)}


class Family(int):
    """A built-in plant family's id (plant.layout's model id, or FAMILY_CONTACT), typed by
    numba as a literal, so that each loop compiles once for each family it steps."""

    def __repr__(self) -> str:
        return f"Family({int(self)})"


@typeof_impl.register(Family)
def _typeof_family(value, context):
    return types.IntegerLiteral(int(value))


SERIAL_ARM = Family(MODEL_SERIAL_ARM)
RRR3 = Family(MODEL_RRR3)
CONTACT = Family(FAMILY_CONTACT)
BUILT_IN = (MODEL_SERIAL_ARM, MODEL_RRR3, FAMILY_CONTACT)   # what None compiles


def for_plant(plant, method: int | None = None):
    """What the kernels that step ``plant`` (a plant.model.Plant) with integrator
    ``method`` are compiled for: its mechanism for a user's chain, else its family
    (``CONTACT`` for plant.flex_chain.tick's METHOD_CONTACT)."""
    from hilrig.plant.flex_chain.tick import METHOD_CONTACT

    if method == METHOD_CONTACT:
        return CONTACT
    if plant.mechanism is not None:
        return plant.mechanism
    return Family(plant.model)


def holds(mech_type, model: int) -> bool:
    """Whether a kernel compiled for an argument ``mech`` of numba type ``mech_type``
    holds the code of ``model`` (a plant.layout model id, FAMILY_CONTACT, or a group of
    them: CHAINS)."""
    if model in GROUPS:
        return any(holds(mech_type, member) for member in GROUPS[model])
    if isinstance(mech_type, types.Omitted):
        mech_type = types.none if mech_type.value is None else mech_type
    if isinstance(mech_type, types.NoneType):
        return model in BUILT_IN
    if isinstance(mech_type, types.IntegerLiteral):   # (a chain's code needs its mechanism)
        return mech_type.literal_value == model and model != MODEL_CHAIN
    return model == MODEL_CHAIN           # a user's chain's mechanism


@intrinsic(prefer_literal=True)
def compiled(typingctx, mech, model, kernel, otherwise, *args):
    """``kernel(*args)`` where a kernel compiled for ``mech`` holds ``model``, else
    ``otherwise`` (module docstring). ``model``: a constant; ``kernel``: a kernel.

    Resolved while typing the caller, as numba's own calls are: the call is the same
    direct call to ``kernel`` as written out, and where ``model`` is not held, ``kernel``
    is neither typed nor compiled. The arguments come one by one, not in a tuple: a
    tuple of arrays in a kernel with numba's runtime (rt.realtime.run_loop) counts a
    reference to each array, twice per call (measured: 40 ns a tick of the arm)."""
    args = args[0] if len(args) == 1 and isinstance(args[0], types.StarArgTuple) else args
    if not (isinstance(model, types.IntegerLiteral) and isinstance(kernel, types.Dispatcher)):
        return None
    if not holds(mech, model.literal_value):
        def otherwise_codegen(context, builder, sig, llargs):
            return context.cast(builder, llargs[3], sig.args[3], sig.return_type)
        return signature(types.unliteral(otherwise), mech, model, kernel, otherwise,
                         types.StarArgTuple.from_types(args)), otherwise_codegen
    call = typingctx.resolve_function_type(kernel, tuple(args), {})
    if call is None:
        return None

    def codegen(context, builder, sig, llargs):
        given = [builder.extract_value(llargs[4], i) for i in range(len(args))]
        values = [context.cast(builder, given[i], args[i], to)
                  if i < len(args) else context.get_constant_generic(builder, to, to.value)
                  for i, to in enumerate(call.args)]     # then the kernel's defaults
        return context.get_function(kernel, call)(builder, values)
    return signature(call.return_type, mech, model, kernel, otherwise,
                     types.StarArgTuple.from_types(args)), codegen
