"""The one interface of a control law, built-in or the user's, and how the loops call it.

A compiled law is a function of this signature (numba-compilable, no allocation)::

    law(t, pos, vel, cur, params, state, u) -> None

    t       float64      time of the measurement, s (plant time for an emulated plant)
    pos     float64[::1] joint positions of the n actuated joints, rad (m for a prismatic one)
    vel     float64[::1] joint rates, rad/s (m/s)
    cur     float64[::1] motor currents, A (NaN where the link cannot measure them)
    params  float64[::1] the law's parameters (controller.params in the config), read only
    state   float64[::1] the law's own memory across ticks (controller.state_size values,
                         zeros at the start): integrators, filters, previous samples
    u       float64[::1] out: one command per joint in the link's unit, V (voltage-driven
                         motors) or N m (joint torques)

The loops call it through a function pointer (``LAW_SIGNATURE``, numba's first-class
function type), so the compiled real-time loop, the offline runs and ``hil control``
are compiled and cached once for every law: a new law costs only its own compilation.
``compile_law`` turns a plain function or an ``@numba.njit`` one into that form.

A Python controller (anything callable with the same arguments: a neural network, a call
into another library) runs through ``hil control`` only, where each tick leaves the
compiled code anyway.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from hilrig.jit.kernel import compile_pointer, kernel
from numba import types
from numba.core.ccallback import CFunc

ARRAY = types.float64[::1]
LAW_SIGNATURE = types.void(types.float64, ARRAY, ARRAY, ARRAY, ARRAY, ARRAY, ARRAY)


def compile_law(function: Callable) -> CFunc:
    """The law as a compiled function of ``LAW_SIGNATURE`` (jit.kernel.compile_pointer;
    ConfigError naming the function and numba's reason when it cannot compile)."""
    return compile_pointer(function, LAW_SIGNATURE,
                           "a law law(t, pos, vel, cur, params, state, u)")


@dataclass
class Controller:
    """A law with its arrays, as every loop takes it.

    law: a compiled law (``compile_law``), or any callable of the same arguments when
    ``compiled`` is False. params: its parameters; state: its memory (both float64, 1-D).
    feedback: False when u depends on nothing but time and params (open loop), which lets
    the accurate offline integrator take long steps. name: what the config named.
    builtin: the law is the built-in one (controllers.builtin.builtin_law), which the
    offline runs call directly instead of through its pointer (rt.lockstep.law_of).
    """

    law: Any
    params: np.ndarray
    state: np.ndarray
    compiled: bool = True
    feedback: bool = True
    name: str = ""
    builtin: bool = False

    def __call__(self, t: float, pos: np.ndarray, vel: np.ndarray, cur: np.ndarray,
                 u: np.ndarray) -> None:
        """One command into ``u`` from Python (tests, the accurate offline path)."""
        if self.compiled:
            call_law(self.law, t, pos, vel, cur, self.params, self.state, u)
        else:
            self.law(t, pos, vel, cur, self.params, self.state, u)


@kernel
def call_law(law, t, pos, vel, cur, params, state, u):
    """law(t, pos, vel, cur, params, state, u) from Python (compiled once for every law)."""
    law(t, pos, vel, cur, params, state, u)


@dataclass(frozen=True)
class ControllerSpec:
    """A family of controllers as the config and the registry see it (entry-point group
    ``hilrig.controllers``; its name is a ``controller.type``).

    build(cfg, unit) -> Controller for a link that takes ``unit`` ("V" or "N m").
    keys: the ``[controller]`` keys it owns besides type, law, params, state_size and
    output (hilrig.schema.Key). check(cfg, voltage_driven): its rules across keys on the
    validated config dict (raise hilrig.errors.ConfigError); voltage_driven: whether the
    link takes volts.
    """

    name: str
    build: Callable[..., Controller]
    keys: dict = field(default_factory=dict)
    check: Callable[[dict, bool], None] | None = None
