"""The one interface of a plant model, built-in or the user's, and its registry.

A model is a ``PlantModel``: its name, the ``[plant]`` config keys it owns, the rule that
gives its sizes, and ``build(cfg) -> Plant``. Models are found by name in the entry-point
group ``hilrig.plants`` (hilrig's own, ``serial_arm`` and ``rrr3``, are registered there
in pyproject.toml, as a user's package registers its own), or named directly in a config
as ``plant.model = "package.module:MODEL"`` (plant.factory.plant_model finds them).

The simplest model of one's own is a **chain**: a mechanism of nq generalised
coordinates q (the first nact of them actuated) given by one numba-compilable function

    mechanism(q, qd, params, mass, bias) -> V

    q, qd   float64[::1]   coordinates and rates (rad or m; rad/s or m/s)
    params  float64[::1]   the model's own parameters (``ChainModel.params(cfg.plant)``)
    mass    float64[:, :]  out: the mass matrix M(q), nq x nq (kg, kg m, kg m^2)
    bias    float64[::1]   out: c(q, qd) + g(q) + damping and spring forces, so that
                           M qdd + bias = the generalised forces (N, N m)
    returns V(q), the potential energy (J), for the energy diagnostics

Everything else comes from hilrig: torque or DC-motor drives with gears on the
actuated coordinates (plant.motor), jammed joints restructured with E_k (plant.jam),
the RK4 and semi-implicit Euler steps, the real-time loop, telemetry and faults. The
loops call the mechanism through a function pointer (``MECHANISM_SIGNATURE``), so they
are compiled and cached once for every chain.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from hilrig.jit.kernel import compile_pointer
from hilrig.schema import Config
from numba import types
from numba.core.ccallback import CFunc

VECTOR = types.float64[::1]
MECHANISM_SIGNATURE = types.float64(VECTOR, VECTOR, VECTOR, types.float64[:, :], VECTOR)


@dataclass(frozen=True)
class PlantModel:
    """A plant model as the config and the loops see it.

    name: what ``plant.model`` says. keys: its ``[plant]`` keys (hilrig.schema.Key),
    besides the common ones (drive, q0, qd0, motor). sizes(plant_table): (nq, nact) from
    the raw ``[plant]`` table, before validation (raise ConfigError on a bad size).
    build(cfg): the Plant of a resolved config (hilrig.schema.Config: its keys are
    attributes, ``cfg.plant.q0``) in its initial state (q0, qd0).
    default_drive: plant.drive when the config gives none. jams: whether faults.jam
    applies (chains: any coordinate can jam).
    """

    name: str
    keys: dict
    sizes: Callable[[dict], tuple[int, int]]
    build: Callable[[Config], Any]
    default_drive: str = "torque"
    jams: bool = False


@dataclass(frozen=True)
class ChainModel:
    """A user's chain (see the module docstring), turned into a PlantModel by ``model()``.

    name: its plant.model name. mechanism: the function (plain, ``@numba.njit`` or a
    cfunc of MECHANISM_SIGNATURE). nq, nact: coordinates and actuated coordinates.
    keys: its ``[plant]`` keys. params(plant) -> the params array the mechanism reads,
    from the resolved ``[plant]`` table (typed: its keys are attributes, ``plant.gravity``).
    """

    name: str
    mechanism: Callable
    nq: int
    nact: int
    keys: dict = field(default_factory=dict)
    params: Callable[[Any], np.ndarray] = lambda plant: np.zeros(0)


def compile_mechanism(function: Callable) -> CFunc:
    """The mechanism as a compiled function of MECHANISM_SIGNATURE (kernel.compile_pointer;
    ConfigError naming the function and numba's reason when it cannot compile)."""
    return compile_pointer(function, MECHANISM_SIGNATURE,
                           "a mechanism mechanism(q, qd, params, mass, bias) -> V")
