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

A law may declare the lengths of its arrays (``declare_sizes``: params, state, outputs);
the config is then checked against them when it is loaded, before any kernel compiles
(``check_declared_sizes``, from settings.config through controllers.factory.check_law).
Every compiled law is also called once in Python on the config's sizes then
(``trial_call``): a law that reads past its params or state fails there, in one line,
instead of inside the compiled loop, where numba can only print the exception
("Exception ignored in: <numba.core.cpu.CPUContext>", a cfunc cannot raise) on every
tick and go on with the command unwritten; a law that does not return from it within
``TRIAL_CPU_S`` of CPU (a loop that never ends) is refused there too, in one line,
instead of holding the command before anything has started.

**A detected fault.** A law reports a fault it has detected through one entry of its own
``state``: with ``controller.detection_slot = i`` it writes ``state[i]`` = 0 (nothing
detected) or a nonzero code (the 1-based joint it blames, or any code of its own). Every
loop that calls the law looks at that entry after each call (``note_detection``) and keeps
the first tick it turned nonzero in the controller's ``detection`` record (``D_*``
entries): that tick is the ``fault_detected`` event of a log and of ``hil sim``'s
``fault_detected`` array, and the campaigns' detection metrics. Without the key the
record is empty and a tick pays one comparison of its length.
"""
from __future__ import annotations

import contextlib
import functools
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from hilrig.errors import ConfigError
from hilrig.jit.kernel import compile_pointer, inline_kernel, kernel
from numba import types
from numba.core import event
from numba.core.ccallback import CFunc

ARRAY = types.float64[::1]
LAW_SIGNATURE = types.void(types.float64, ARRAY, ARRAY, ARRAY, ARRAY, ARRAY, ARRAY)
SIZES_ATTRIBUTE = "hilrig_sizes"   # where declare_sizes puts a law's LawSizes

# a detection record (``detection_record``): the slot watched, then the first detection's
# tick (-1: none yet), plant time (s; NaN: none yet) and code (what the law wrote there)
D_SLOT, D_TICK, D_TIME, D_CODE = 0, 1, 2, 3


def detection_record(slot: int | None) -> np.ndarray:
    """The detection record of a law whose ``state[slot]`` reports a detected fault
    (controller.detection_slot): [slot, -1, NaN, 0] (D_* entries); ``slot`` None: empty,
    nothing is watched."""
    if slot is None:
        return np.zeros(0)
    return np.array([float(slot), -1.0, np.nan, 0.0])


def detection_event(code: float) -> dict:
    """The ``fault_detected`` event of a first detection with ``code`` (what the law wrote):
    {"kind", "joint" (the code as a 1-based joint when it is a whole number > 0, else 0),
    "code"}; the loops add its tick and t (s)."""
    code = float(code)
    joint = int(code) if code == int(code) and code > 0 else 0
    return {"kind": "fault_detected", "joint": joint, "code": code}


def first_detection(record: np.ndarray) -> np.ndarray:
    """The first detection of a detection record as rows [tick, t (s), code]: one row, or
    none (nothing watched, or nothing detected)."""
    if record.shape[0] == 0 or record[D_TICK] < 0:
        return np.zeros((0, 3))
    return np.array([[record[D_TICK], record[D_TIME], record[D_CODE]]])


@dataclass(frozen=True)
class LawSizes:
    """The lengths a law declares for its arrays; None: any length.

    params: len(params) (``controller.params``); state: len(state)
    (``controller.state_size``); outputs: len(u), the plant's actuated joints. params and
    state are an int or a function of the number of outputs n (``lambda n: 3 + n``: three
    gains, then one target per joint).
    """

    params: int | Callable[[int], int] | None = None
    state: int | Callable[[int], int] | None = None
    outputs: int | None = None

    def wanted(self, n_outputs: int) -> dict:
        """What it asks for with ``n_outputs`` outputs: {"params": int, ...}, declared only."""
        wanted = {}
        for label in ("params", "state", "outputs"):
            value = getattr(self, label)
            if value is not None:
                wanted[label] = int(value(n_outputs) if callable(value) else value)
        return wanted


def declare_sizes(params=None, state=None, outputs=None) -> Callable:
    """Decorator: declare the lengths of a law's arrays (LawSizes), above or below
    ``@numba.njit``::

        @declare_sizes(params=lambda n: 3 + n, state=0)
        @njit
        def pd_torque(t, pos, vel, cur, params, state, u): ...
    """
    sizes = LawSizes(params, state, outputs)

    def attach(function):
        setattr(function, SIZES_ATTRIBUTE, sizes)
        return function
    return attach


def declared_sizes(law: Any) -> LawSizes | None:
    """The LawSizes a law (a plain, ``@numba.njit`` or cfunc function, or a class)
    declares, or None."""
    for holder in (law, getattr(law, "py_func", None), getattr(law, "_pyfunc", None)):
        sizes = getattr(holder, SIZES_ATTRIBUTE, None)
        if isinstance(sizes, LawSizes):
            return sizes
    return None


def check_declared_sizes(law: Any, name: str, n_params: int, state_size: int,
                         n_outputs: int) -> None:
    """ConfigError (one line, naming the law and the key) when the config's sizes differ
    from what the law declares: ``n_params`` values in controller.params,
    ``state_size`` (controller.state_size), ``n_outputs`` actuated joints of the plant."""
    sizes = declared_sizes(law)
    if sizes is None:
        return
    given = {"params": (n_params, "controller.params has {} values"),
             "state": (state_size, "controller.state_size = {}"),
             "outputs": (n_outputs, "the plant has {} actuated joints")}
    for label, wanted in sizes.wanted(n_outputs).items():
        value, says = given[label]
        if value != wanted:
            raise ConfigError(f"controller.law: {name!r} declares {label} = {wanted} "
                              f"(for {n_outputs} outputs), but {says.format(value)}")


TRIAL_CPU_S = 5.0       # s of CPU time a law's trial call may take (in Python: slow)


class _TrialTimeout(Exception):
    """The trial call ran out of its TRIAL_CPU_S."""


class _CompilePause(event.Listener):
    """Stops the trial's CPU clock while numba compiles: a helper the law calls compiles
    at its first call, which is not the law's own time (and no exception may be raised
    inside numba's compiler)."""

    def __init__(self):
        self.depth = 0
        self.left = 0.0      # s of the bound left when the outermost compilation began

    def on_start(self, ev) -> None:
        if self.depth == 0:
            self.left = signal.setitimer(signal.ITIMER_VIRTUAL, 0.0)[0]
        self.depth += 1

    def on_end(self, ev) -> None:
        self.depth -= 1
        if self.depth == 0 and self.left > 0.0:
            signal.setitimer(signal.ITIMER_VIRTUAL, self.left)


@contextlib.contextmanager
def _cpu_time_bound(seconds: float):
    """Raise _TrialTimeout inside once this process has spent ``seconds`` of user CPU
    time in it (ITIMER_VIRTUAL, so that a busy host does not shorten it), numba's
    compilations not counted (_CompilePause); no bound outside the main thread, where no
    signal handler runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise _TrialTimeout

    pause = _CompilePause()
    previous = signal.signal(signal.SIGVTALRM, expire)
    event.register("numba:compile", pause)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0.0)
        event.unregister("numba:compile", pause)
        signal.signal(signal.SIGVTALRM, previous)


def trial_call(law: Any, name: str, params: np.ndarray, state: np.ndarray,
               n_outputs: int) -> None:
    """Call a compiled law's Python function once on copies of its arrays (t = 0, pos, vel
    and currents zero), where numpy checks every index and shape: ConfigError in one line
    when it reads or writes past an array (IndexError) or mixes lengths (a ValueError
    about shapes or broadcasting).
    Compiled, the same law would raise inside the loop's kernel, where numba only prints
    the exception and the tick goes on with the command unwritten. Other exceptions are
    left to the compiled law (its Python function may use what only numba runs). A call
    that has not returned after TRIAL_CPU_S of CPU is a ConfigError too: compiled, it
    would hold the run's warm-up, or its first tick, for ever."""
    python = getattr(law, "py_func", None) or getattr(law, "_pyfunc", None) or law
    zeros = np.zeros(n_outputs)
    try:
        with np.errstate(all="ignore"), _cpu_time_bound(TRIAL_CPU_S):
            python(0.0, zeros.copy(), zeros.copy(), zeros.copy(), params.copy(), state.copy(),
                   zeros.copy())
    except _TrialTimeout:
        raise ConfigError(
            f"controller.law: {name!r} did not return within {TRIAL_CPU_S:g} s of CPU on a "
            f"trial call in Python (t = 0, pos, vel and cur zero): does it loop for "
            f"ever?") from None
    except (IndexError, ValueError) as exc:
        if isinstance(exc, ValueError) and not any(word in str(exc)
                                                   for word in ("shape", "broadcast")):
            return      # e.g. a math domain error, which the compiled law turns into NaN
        raise ConfigError(
            f"controller.law: {name!r} raised {type(exc).__name__} ({exc}) on a trial call "
            f"with {len(params)} params, controller.state_size = {len(state)} and "
            f"{n_outputs} outputs: does it read past its params or state?") from None
    except Exception:   # noqa: BLE001 - not a size mistake: the compiled run decides
        pass


def bad_command_reason(name: str, t: float, pos: np.ndarray, vel: np.ndarray,
                       cur: np.ndarray, u: np.ndarray) -> str:
    """What a run that a law's non-finite command stopped reports: the law's name, the
    command u (V or N m) and the inputs it was computed from (t s, pos rad, vel rad/s,
    cur A)."""
    def show(array):
        return np.array2string(np.asarray(array), precision=6, separator=", ")
    return (f"controller produced a non-finite command: law {name!r} gave u = {show(u)} "
            f"for t = {t:.6f} s, pos = {show(pos)}, vel = {show(vel)}, cur = {show(cur)}")


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
    detection: its detection record (``detection_record``; empty: the law reports none).
    """

    law: Any
    params: np.ndarray
    state: np.ndarray
    compiled: bool = True
    feedback: bool = True
    name: str = ""
    builtin: bool = False
    detection: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __call__(self, t: float, pos: np.ndarray, vel: np.ndarray, cur: np.ndarray,
                 u: np.ndarray) -> None:
        """One command into ``u`` from Python (tests, the accurate offline path)."""
        if self.compiled:
            call_law(self.law, t, pos, vel, cur, self.params, self.state, u)
        else:
            self.law(t, pos, vel, cur, self.params, self.state, u)

    def detected(self, k: int, t: float) -> bool:
        """After the law's call of tick ``k`` at plant time ``t`` (s), from Python (``hil
        control``): note_detection on its record; True when this call is the first
        detection."""
        return bool(note_detection(self.detection, self.state, k, t))


@inline_kernel
def note_detection(record, state, k, t):
    """After a law's call of tick ``k`` at plant time ``t`` (s): the first tick its
    ``state[record[D_SLOT]]`` is nonzero goes into the detection ``record`` (tick, t, code);
    True on that tick only. An empty record: nothing (False)."""
    if record.shape[0] == 0 or record[D_TICK] >= 0.0:
        return False
    code = state[int(record[D_SLOT])]
    if code == 0.0 or not np.isfinite(code):
        return False
    record[D_TICK] = k
    record[D_TIME] = t
    record[D_CODE] = code
    return True


@kernel
def call_law(law, t, pos, vel, cur, params, state, u):
    """law(t, pos, vel, cur, params, state, u) from Python (compiled once for every law)."""
    law(t, pos, vel, cur, params, state, u)


def _commands_nothing(t, pos, vel, cur, params, state, u):
    pass


@functools.lru_cache(maxsize=1)
def placeholder_controller() -> Controller:
    """A controller whose law commands nothing, with one-element arrays: what a loop is
    compiled for before the configured law is built (rt.loop_ahead). A loop's machine code
    depends only on its arguments' types, the same for every law of LAW_SIGNATURE (one
    numba type for all such pointers) and for every controller's arrays (float64, 1-D)."""
    return Controller(compile_law(_commands_nothing), np.zeros(1), np.zeros(1),
                      name="placeholder")


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
