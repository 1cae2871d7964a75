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


# The diagnostics of a row (plant.stepping.diagnostics fills three columns): names and
# widths as in a log's row, the chains' and serial arms' by default.
ENERGY_DIAGNOSTICS = (("energy", 1), ("com", (2,)))


@dataclass(frozen=True)
class RowMetric:
    """A campaign metric a model derives from one of its diagnostics over a run's rows.

    name: its column in a campaign's results. unit, doc: for the report and the docs.
    diagnostic: the diagnostics column it reduces. reduce: ``"peak"`` (the largest value,
    a NaN wins) or ``"sign_changes"`` (changes of sign; zeros skipped, a NaN counts as a
    change either side). A campaign's compiled batches take the same values from
    plant.stepping.row_metrics, in the order the model lists them.
    """

    name: str
    unit: str
    doc: str
    diagnostic: str
    reduce: str


@dataclass(frozen=True)
class PlantModel:
    """A plant model as the config, the loops and every other part see it: what it is,
    declared by the model itself, so that no code outside plant/ asks which model it holds.

    name: what ``plant.model`` says. keys: its ``[plant]`` keys (hilrig.schema.Key),
    besides the common ones (drive, q0, qd0, motor). sizes(plant_table): (nq, nact) from
    the raw ``[plant]`` table, before validation (raise ConfigError on a bad size).
    build(cfg): the Plant of a resolved config (hilrig.schema.Config: its keys are
    attributes, ``cfg.plant.q0``) in its initial state (q0, qd0).
    default_drive: plant.drive when the config gives none. jams: whether faults.jam
    applies (chains: any coordinate can jam).

    Traits, each with the default a chain has:

    - diagnostics: the names and widths of the three diagnostic columns of a row
      (plant.stepping.diagnostics): logs, ``hil sim``'s arrays and the live view use them.
    - coordinates(nq): (label, unit) of each coordinate q for plots and views; None:
      ``q1`` .. ``qn`` in rad.
    - metrics: the campaign metrics it derives from its diagnostics (RowMetric).
    - correction(cfg): the constraint correction run after each step and on the
      initial state (plant.stepping.correct: 0 none, 1 post-adjustment, 2 projection).
    - tick(cfg): the step method id the loops use instead of ``sim.integrator``'s (or
      None), raising ConfigError for a config its tick cannot run.
    - offline(cfg): its own ``hil sim`` (a SimRun, plant.offline) instead of the lockstep
      loop, or None.
    - stiff_step: whether ``sim.integrator = "rosenbrock"`` can step it.
    - provides: what controllers and tools may rely on (``"beam_feedforward"``: paper
      002's flexible inverse model; ``"planar_arm_regressor"``: a planar serial arm whose
      ``plant.length``, ``mass``, ``com``, ``inertia``, ``damping`` and ``gravity`` keys
      are paper 000's, linear in (m, h, I) per link: ``hil identify`` fits it with
      identify.regressor.Arm).
    - regressor(cfg): its rigid-body regressor for ``hil identify`` and ``hil excite`` (the
      protocol of identify.regressor.Arm: the joint torques linear in named parameters,
      their CONFIG values and how the fitted ones are written back;
      plant.urdf.regressor.UrdfRegressor), or None.
    - model_block(cfg): its rigid-body model for controllers (plant.model_kernels: the
      computed-torque feed-forward, a user's law with ``controller.with_model``), or None.
    - analyses: ``hil analyze`` commands of its own, name -> function(cfg) -> dict.
    - dissipation: the ``[plant]`` keys that take energy away (damping); with them zero
      and torque drives the model conserves energy, which ``check_plant`` checks over
      many states. ``()``: nothing takes energy away; None (the default of a PlantModel):
      not declared, and that check is skipped (a ChainModel always declares: ``()`` by
      default).
    - frames(cfg): the robot in 3D, a plant.frames.Skeleton (its frames at q and its
      shape: the live view's and the logs' 3D scene, off the critical path); None: no
      3D view.
    - friction: whether the ``[friction]`` table applies (plant.friction: a chain whose
      coordinates are joints: the serial arms, a user's chain, a URDF arm); a config that
      gives another model friction is refused.
    - friction_defaults(cfg): (viscous, coulomb) per coordinate where ``[friction]`` leaves
      them unset (a URDF's <dynamics damping friction>); None: zeros.
    - limits(cfg): the actuated joints' own (effort N m, velocity rad/s, lower, upper rad),
      each (nact,), inf where none (a URDF's <limit>): the defaults of the unset
      ``safety.*`` limits (controllers.limits, plant.factory.joint_limits); None: none.
    - actuator_faults: whether the actuator faults of ``[[faults.KIND]]`` (plant.faults:
      free_swing ... friction, but the brake, which follows the jam law and so needs
      ``jams``) act on its actuated joints, the first nact coordinates
      (plant.actuator_faults); None: as ``jams``.
    """

    name: str
    keys: dict
    sizes: Callable[[dict], tuple[int, int]]
    build: Callable[[Config], Any]
    default_drive: str = "torque"
    jams: bool = False
    diagnostics: tuple = ENERGY_DIAGNOSTICS
    coordinates: Callable[[int], tuple] | None = None
    metrics: tuple = ()
    correction: Callable[[Config], int] | None = None
    tick: Callable[[Config], int | None] | None = None
    offline: Callable[[Config], Any] | None = None
    stiff_step: bool = True
    provides: frozenset = frozenset()
    regressor: Callable[[Config], Any] | None = None
    analyses: dict = field(default_factory=dict)
    dissipation: tuple | None = None
    model_block: Callable[[Config], np.ndarray] | None = None
    frames: Callable[[Config], Any] | None = None
    friction: bool = False
    friction_defaults: Callable[[Config], tuple] | None = None
    limits: Callable[[Config], tuple] | None = None
    actuator_faults: bool | None = None

    def takes_actuator_faults(self) -> bool:
        """Whether actuator faults act on its actuated joints (``actuator_faults``)."""
        return self.jams if self.actuator_faults is None else self.actuator_faults

    def diagnostic_names(self) -> tuple[str, ...]:
        """The names of its diagnostic columns."""
        return tuple(name for name, _ in self.diagnostics)

    def split_diagnostics(self, diag: np.ndarray) -> dict:
        """Rows of the three diagnostic columns (rows x 3) as named arrays: a width-1
        column 1-D, a vector group 2-D."""
        out, column = {}, 0
        for name, width in self.diagnostics:
            n = width[0] if isinstance(width, tuple) else width
            out[name] = diag[:, column] if width == 1 else diag[:, column:column + n]
            column += n
        return out

    def coordinate_labels(self, nq: int) -> tuple[tuple[str, str], ...]:
        """(label, unit) of each of its nq coordinates."""
        if self.coordinates is not None:
            return tuple(self.coordinates(nq))
        return tuple((f"q{i + 1}", "rad") for i in range(nq))

    def correction_id(self, cfg: Config) -> int:
        """The constraint correction of ``cfg``'s runs (0: none)."""
        return 0 if self.correction is None else self.correction(cfg)


@dataclass(frozen=True)
class ChainModel:
    """A user's chain (see the module docstring), turned into a PlantModel by ``model()``.

    name: its plant.model name. mechanism: the function (plain, ``@numba.njit`` or a
    cfunc of MECHANISM_SIGNATURE). nq, nact: coordinates and actuated coordinates.
    keys: its ``[plant]`` keys. params(plant) -> the params array the mechanism reads,
    from the resolved ``[plant]`` table (typed: its keys are attributes, ``plant.gravity``).
    dissipation: the keys of ``keys`` that take energy away (PlantModel.dissipation); with
    them zero and torque drives the chain must conserve energy, so a damping term without
    a key of its own here (or a wrong Coriolis term) fails ``check_plant``.
    """

    name: str
    mechanism: Callable
    nq: int
    nact: int
    keys: dict = field(default_factory=dict)
    params: Callable[[Any], np.ndarray] = lambda plant: np.zeros(0)
    dissipation: tuple = ()


def compile_mechanism(function: Callable) -> CFunc:
    """The mechanism as a compiled function of MECHANISM_SIGNATURE (kernel.compile_pointer;
    ConfigError naming the function and numba's reason when it cannot compile)."""
    return compile_pointer(function, MECHANISM_SIGNATURE,
                           "a mechanism mechanism(q, qd, params, mass, bias) -> V")
