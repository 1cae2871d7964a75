"""Layout of the flat controller array ``ctrl`` that the control-law kernels read.

A header (C_*; HEADER entries), then one block of n_act values per name in
BLOCKS, in that order. ``at(ctrl, b, n, j)`` reads entry j of block b. The Fourier
reference's coefficients follow the blocks (``fourier_coefficient``): ``ctrl[C_HARMONICS]``
harmonics, the a block (n_act x harmonics, joint-major) then the b block, rad/s.

As the ``params`` of the built-in law (controllers.builtin), ``ctrl`` is followed by the
feed-forward model's plant params from offset ``ctrl[C_MODEL]`` on, and the law's
``state`` is its 2-D scratch ``work`` with ``ctrl[C_WORK_COLS]`` columns, row-major.
"""
import numpy as np
from hilrig.jit.kernel import kernel

C_KIND, C_NACT, C_REF, C_OUTPUT, C_T_START, C_DURATION, C_FREQUENCY, C_MODEL, \
    C_WORK_COLS, C_HARMONICS = range(10)
HEADER = 10
BLOCKS = ("kp", "kd", "target", "start", "amplitude", "phase", "scale", "u_const",
          "motor_resistance", "motor_emf", "motor_inertia", "motor_friction")
B_KP, B_KD, B_TARGET, B_START, B_AMPLITUDE, B_PHASE, B_SCALE, B_U_CONST, \
    B_MOTOR_RESISTANCE, B_MOTOR_EMF, B_MOTOR_INERTIA, B_MOTOR_FRICTION = range(len(BLOCKS))


def make_ctrl(kind: int, nact: int, reference_kind: int = 0, output: int = 0,  # OUT_DIRECT
              t_start: float = 0.0, duration: float = 1.0, frequency: float = 0.0,
              fourier: tuple | None = None, **blocks) -> np.ndarray:
    """Pack a ``ctrl`` array; ``blocks`` are named as in BLOCKS (scalars broadcast);
    ``fourier``: the Fourier reference's (a, b), each n_act x harmonics (rad/s)."""
    unknown = set(blocks) - set(BLOCKS)
    if unknown:
        raise ValueError(f"unknown controller blocks {sorted(unknown)}")
    a, b = (np.zeros((nact, 0)), np.zeros((nact, 0))) if fourier is None else fourier
    a = np.asarray(a, dtype=float).reshape(nact, -1)
    b = np.asarray(b, dtype=float).reshape(nact, -1)
    out = np.zeros(HEADER + len(BLOCKS) * nact + a.size + b.size)
    out[C_KIND], out[C_NACT], out[C_REF], out[C_OUTPUT] = kind, nact, reference_kind, output
    out[C_T_START], out[C_DURATION], out[C_FREQUENCY] = t_start, duration, frequency
    out[C_HARMONICS] = a.shape[1]
    tail = HEADER + len(BLOCKS) * nact
    out[tail:tail + a.size] = a.ravel()
    out[tail + a.size:] = b.ravel()
    for name, value in blocks.items():
        b = BLOCKS.index(name)
        out[HEADER + b * nact:HEADER + (b + 1) * nact] = value
    return out


@kernel
def at(ctrl, b, n, j):
    """Entry j (joint j, 0-based) of block b of a ``ctrl`` for n actuated joints."""
    return ctrl[HEADER + b * n + j]


@kernel
def fourier_coefficient(ctrl, n, which, j, harmonic):
    """The Fourier reference's coefficient a (which = 0) or b (which = 1) of joint j
    (0-based) for harmonic ``harmonic`` (1-based) of a ``ctrl`` for n actuated joints, rad/s."""
    h = int(ctrl[C_HARMONICS])
    return ctrl[HEADER + len(BLOCKS) * n + which * n * h + j * h + harmonic - 1]
