"""hilrig's own control laws (open loop, PD, computed-torque feed-forward) as one
compiled law of the public interface (controllers.interface), and their builder.

They enter the loops exactly as a user's law does: ``builtin_law()`` has the signature
``law(t, pos, vel, cur, params, state, u)``; its ``params`` are the ``ctrl`` array of
controllers.layout followed by the feed-forward model's plant params, its ``state``
is the scratch of controllers.law.command. ``OPEN_LOOP``, ``PD`` and ``FEEDFORWARD``
are ControllerSpecs with the ``[controller]`` keys they own (``KEYS``) and their rules
(``check``), registered in the entry-point group ``hilrig.controllers`` (pyproject.toml)
as a third-party package registers its own.
"""
from __future__ import annotations

import functools

import numpy as np
from hilrig.controllers.interface import LAW_SIGNATURE, Controller, ControllerSpec
from hilrig.controllers.law import (
    FEEDFORWARD,
    OPEN_LOOP,
    OUT_DIRECT,
    OUT_GAIN,
    OUT_MOTOR_MODEL,
    PD,
    WORK_MODEL,
    command,
)
from hilrig.controllers.layout import C_MODEL, C_WORK_COLS, make_ctrl
from hilrig.controllers.reference import FOURIER, HOLD, QUINTIC, SINUSOID, STEP
from hilrig.errors import ConfigError
from hilrig.jit.kernel import inline_kernel
from hilrig.plant import model_kernels
from hilrig.plant.factory import motor_params, plant_model
from hilrig.plant.packed import matrix_view
from hilrig.schema import Config, Key
from numba import cfunc
from numba.core.ccallback import CFunc

KINDS = {"open_loop": OPEN_LOOP, "pd": PD, "feedforward": FEEDFORWARD}

KEYS = {
    "kp": Key("floats", 0.0, length="nact", scalar_ok=True, minimum=0.0,
              doc="per rad (V/rad or N m/rad), >= 0"),
    "kd": Key("floats", 0.0, length="nact", scalar_ok=True, minimum=0.0,
              doc="per rad/s, >= 0"),
    "target": Key("floats", None, length="nact", doc="joint targets, rad"),
    "torque_to_voltage": Key("str", "gain", choices=("gain", "motor_model"),
                             doc="gain: u = tau / k (k = r K_m / R_a, the paper's reading); "
                                 "motor_model: inverse of the DC motor and gear"),
    "reference": Key("str", "hold", choices=("hold", "step", "quintic", "sinusoid", "fourier"),
                     doc="hold: target; step: start, then target at t_start; quintic: "
                         "start to target over duration; sinusoid: target + amplitude "
                         "sin(2 pi frequency (t - t_start) + phase); fourier (an exciting "
                         "trajectory, hil excite): target + sum_l a_l/(w l) sin(w l tau) "
                         "- b_l/(w l) cos(w l tau), w = 2 pi frequency, tau = t - t_start"),
    "start": Key("floats", None, length="nact",
                 doc="reference before t_start, rad (default: q0 of the actuated joints)"),
    "t_start": Key("float", 0.0, minimum=0.0, doc="s"),
    "duration": Key("float", 1.0, positive=True, doc="quintic transition time, s"),
    "amplitude": Key("floats", 0.0, length="nact", scalar_ok=True, doc="sinusoid, rad"),
    "frequency": Key("float", 0.0, minimum=0.0, doc="sinusoid; fourier: base frequency, Hz"),
    "harmonics": Key("int", 1, minimum=1, doc="fourier: number of harmonics L"),
    "fourier_a": Key("floats", None, doc="fourier: a_l, rad/s, nact x harmonics values, "
                                        "joint by joint (joint 1's L values first)"),
    "fourier_b": Key("floats", None, doc="fourier: b_l, rad/s, laid out as fourier_a"),
    "phase": Key("floats", 0.0, length="nact", scalar_ok=True, doc="sinusoid, rad"),
}
REFERENCES = {"hold": HOLD, "step": STEP, "quintic": QUINTIC, "sinusoid": SINUSOID,
              "fourier": FOURIER}


@inline_kernel
def builtin_command(t, pos, vel, cur, params, state, u):
    """controllers.law.command on the ctrl, model and work packed in params and state: the
    built-in law, which the offline runs call directly (rt.lockstep.law_of) and every
    other loop through its pointer, builtin_law."""
    start = int(params[C_MODEL])
    cols = int(params[C_WORK_COLS])
    work = matrix_view(state, 0, state.shape[0] // cols, cols)
    command(params[:start], params[start:], work, t, pos, vel, u)


@inline_kernel
def feedback_command(t, pos, vel, cur, params, state, u):
    """builtin_command without the feed-forward (open loop and PD; their params hold no
    model): controllers.law.command with the model None, the same arithmetic."""
    start = int(params[C_MODEL])
    cols = int(params[C_WORK_COLS])
    work = matrix_view(state, 0, state.shape[0] // cols, cols)
    command(params[:start], None, work, t, pos, vel, u)


def _builtin_law(t, pos, vel, cur, params, state, u):
    builtin_command(t, pos, vel, cur, params, state, u)


def _feedback_law(t, pos, vel, cur, params, state, u):
    feedback_command(t, pos, vel, cur, params, state, u)


def builtin_law(feed_forward: bool = True) -> CFunc:
    """The built-in law as a law of LAW_SIGNATURE (a cfunc): builtin_command, or with
    ``feed_forward`` False feedback_command (open loop and PD). Compiled, or loaded from
    the cache, at the first call for each, not when this module is imported: ``hil sim``
    (which calls builtin_command directly) compiles neither, and a PD run does not compile
    the feed-forward's model kernels (plant.model_kernels: about 3 s of a first run's
    compile time, bench/bench_compile.py). One cfunc for each, however asked."""
    return _law(bool(feed_forward))


@functools.lru_cache(maxsize=None)
def _law(feed_forward: bool) -> CFunc:
    return cfunc(LAW_SIGNATURE, cache=True, error_model="numpy", _nrt=False)(
        _builtin_law if feed_forward else _feedback_law)


def build(cfg: Config, unit: str) -> Controller:
    """The built-in controller of ``cfg.controller`` for a link that takes ``unit``
    ("V" or "N m"). A law that computes torques (controller.output = "torque") on a
    link that takes volts goes through controller.torque_to_voltage."""
    plant, c, inp = cfg.plant, cfg.controller, cfg.input
    nact = len(c.kp)     # one gain per actuated joint (the config checked its length)
    voltage_driven = unit == "V"
    if not voltage_driven and c.type != "open_loop" and c.output == "voltage":
        raise ValueError("controller.output: 'voltage', but the link takes joint torques "
                         "(N m); set controller.output = 'torque'")
    model = np.zeros(0)
    rows, cols = 3, nact
    if c.type == "open_loop":
        constant = inp.voltage if voltage_driven else inp.torque
        ctrl = make_ctrl(OPEN_LOOP, nact, u_const=0.0 if constant is None else np.array(constant))
        return _controller(ctrl, model, rows, cols, "open_loop", feedback=False)
    if c.type == "feedforward":
        model = model_kernels.block(cfg)
        rows = WORK_MODEL + 1       # the feed-forward torque (controllers.law.command)
    output, blocks = OUT_DIRECT, {}
    if voltage_driven and c.output == "torque":
        m = motor_params(cfg)
        if c.torque_to_voltage == "gain":
            output, blocks = OUT_GAIN, {"scale": 1.0 / m.torque_per_volt()}
        else:
            ratio = m.gear_ratio
            output = OUT_MOTOR_MODEL
            blocks = {"motor_resistance": m.resistance / (ratio * m.torque_constant),
                      "motor_emf": m.back_emf_constant * ratio,
                      "motor_inertia": ratio ** 2 * m.rotor_inertia,
                      "motor_friction": ratio ** 2 * m.viscous_friction}
    start = c.start if c.start is not None else plant.q0[:nact]
    fourier = (c.fourier_a, c.fourier_b) if c.reference == "fourier" else None
    ctrl = make_ctrl(KINDS[c.type], nact, REFERENCES[c.reference], output, fourier=fourier,
                     t_start=c.t_start, duration=c.duration, frequency=c.frequency,
                     kp=np.array(c.kp), kd=np.array(c.kd), target=np.array(c.target),
                     start=np.array(start), amplitude=np.array(c.amplitude),
                     phase=np.array(c.phase), **blocks)
    return _controller(ctrl, model, rows, cols, c.type)


def _controller(ctrl: np.ndarray, model: np.ndarray, rows: int, cols: int, name: str,
                feedback: bool = True) -> Controller:
    ctrl[C_MODEL] = len(ctrl)
    ctrl[C_WORK_COLS] = cols
    return Controller(builtin_law(feed_forward=len(model) > 0), np.concatenate([ctrl, model]),
                      np.zeros(rows * cols),
                      feedback=feedback, name=name, builtin=True)


def check(cfg: dict, voltage_driven: bool) -> None:
    """The built-in laws' rules across keys: a target for PD and feed-forward, volt gains
    only where the link takes volts, feed-forward only with a plant that has a rigid-body
    model (PlantModel.model_block, plant.model_kernels)."""
    ctrl = cfg["controller"]
    if ctrl["type"] in ("pd", "feedforward"):
        if ctrl["target"] is None:
            raise ConfigError(f"controller.target: missing (needed by controller.type = "
                              f"{ctrl['type']!r})")
        if ctrl["reference"] == "fourier":
            _check_fourier(ctrl)
        if not voltage_driven and ctrl["output"] == "voltage":
            raise ConfigError("controller.output: 'voltage' needs a voltage-driven plant "
                              "(plant.drive = 'voltage' or 'voltage_full')")
    if ctrl["type"] == "feedforward" and \
            plant_model(cfg["plant"]["model"]).model_block is None:
        raise ConfigError(f"controller.type: 'feedforward' needs a plant model with a rigid "
                          f"arm's inverse dynamics; plant.model = {cfg['plant']['model']!r} "
                          "has none (use 'pd')")


def _check_fourier(ctrl: dict) -> None:
    """The Fourier reference's keys: a positive base frequency and nact x harmonics
    coefficients in fourier_a and fourier_b."""
    if ctrl["frequency"] <= 0.0:
        raise ConfigError("controller.frequency: must be > 0 (the base frequency, Hz) for "
                          "controller.reference = 'fourier'")
    needed = len(ctrl["kp"]) * ctrl["harmonics"]
    for name in ("fourier_a", "fourier_b"):
        values = ctrl[name]
        if values is None or len(values) != needed:
            got = "missing" if values is None else f"{len(values)} values"
            raise ConfigError(f"controller.{name}: {got}; controller.reference = 'fourier' "
                              f"needs {needed} (nact x controller.harmonics, joint by joint)")


OPEN_LOOP_SPEC = ControllerSpec("open_loop", build, KEYS, check)
PD_SPEC = ControllerSpec("pd", build, KEYS, check)
FEEDFORWARD_SPEC = ControllerSpec("feedforward", build, KEYS, check)
