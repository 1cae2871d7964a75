"""One plant step as the loops take it: step, constraint correction, scheduled faults,
and the model's diagnostics.

Every loop that steps a plant calls these: the offline and ``--fast`` runs
(rt.lockstep), the real-time loop (rt.realtime), and the emulated devices
(devices/). Nothing here knows about controllers, links or time.

Diagnostics per row (3 columns): 3RRR: residual max|f_i| (m^2), det Phi_theta,
det Phi_x; serial arm: total energy (J), x_C, y_C of the overall centre of mass (m);
a user's chain: total energy (J) from its mechanism, NaN, NaN.
"""
import numpy as np
from hilrig.plant import rrr3, rrr3_scalar, serial_arm
from hilrig.plant.flex_chain.tick import METHOD_CONTACT, contact_step
from hilrig.plant.dynamics import chain_mechanism
from hilrig.plant.family import FAMILY_CONTACT, compiled
from hilrig.plant.integrators import is_fused_rrr3, step
from hilrig.plant.faults import apply_faults, faults_due
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.layout import H_MODEL, H_NQ, MODEL_CHAIN, MODEL_RRR3, MODEL_SERIAL_ARM

CORRECTION_NONE = 0
CORRECTION_POST_ADJUST = 1
CORRECTION_PROJECTION = 2

@kernel
def correct(p, x, correction, work):
    """Apply the configured constraint correction to x in place (3RRR only).

    ``work``: a plant's work array (its scratch rows are overwritten).
    """
    if correction == CORRECTION_POST_ADJUST:
        rrr3.post_adjust(p, x, work[int(p[H_NQ]) + 2:])
    elif correction == CORRECTION_PROJECTION:
        rrr3_scalar.project(p, x, work)


def correct_initial_state(plant, correction: int) -> None:
    """``correct`` of a plant.model.Plant's initial state, from Python. A plant without a
    correction (``correction`` CORRECTION_NONE: all but the 3RRR, plant.factory.correction_id)
    has nothing to correct, and ``correct`` is not compiled for it: called from Python, it
    is compiled for every correction (the 3RRR's projection and post-adjustment, about 8 s
    of a serial arm's first run, bench/bench_compile.py)."""
    if correction != CORRECTION_NONE:
        correct(plant.params, plant.x, correction, plant.work)


@inline_kernel   # inlined, as is plant.integrators.step: see there
def advance(p, jams, t, x, u, h, method, correction, work, stages, mech=None):
    """One plant step from t with u held over h, then the constraint correction
    (the 3RRR's RK4 step and projection fused in one call where it can, its actuator
    faults included: no jams on a 3RRR, so nothing of plant.integrators.step's jam
    handling is skipped).

    Returns False (x then holds the invalid state) if the state became invalid:
    NaN or a singular mass matrix. ``mech``: what the kernel is compiled for
    (plant.family: None, a built-in family, a user's chain's mechanism).
    ``method = METHOD_CONTACT``: the flexible chain on the ground (plant.flex_chain.tick:
    RK4 substeps with contact state, its actuator faults, no jams, no correction).
    """
    if method == METHOD_CONTACT:
        return compiled(mech, FAMILY_CONTACT, contact_step, False, p, jams, t, x, u, h, work)
    if correction == CORRECTION_PROJECTION and is_fused_rrr3(p, method) \
            and compiled(mech, MODEL_RRR3, rrr3_scalar.rk4, -1.0, p, x, u, h, work, 1.0,
                         jams) > 0.0:
        health = 3.0   # the rank of S, as plant.integrators.step reports it
    else:
        health = step(p, jams, t, x, u, h, work, stages, method, mech)
        if correction != CORRECTION_NONE:   # a 3RRR's (plant.factory.correction_id)
            compiled(mech, MODEL_RRR3, correct, None, p, x, correction, work)
    if not health > 0.0:
        return False
    for i in range(x.shape[0]):
        if not np.isfinite(x[i]):
            return False
    return True


@inline_kernel   # inlined: a run without faults pays the check, not a call
def apply_schedule(p, jams, schedule, t, x, tol):
    """Start and end the faults of the fault table ``schedule`` (plant.faults) that are
    due at this step boundary t (s); nothing while it holds no fault, nor before its
    next start or end (plant.faults.faults_due)."""
    if faults_due(schedule, t, tol):
        apply_faults(p, jams, schedule, t, x, tol)


@kernel
def _rrr3_diagnostics(p, x, out, scratch):
    """The 3RRR's diagnostics into out[0:3] (module docstring); ``scratch``: work rows."""
    out[0] = rrr3.residual(p, x, scratch)
    out[1] = rrr3.det_phi_theta(p, x)
    out[2] = rrr3.det_phi_x(p, x, scratch)


@kernel
def _serial_arm_potential(p, x, mass, bias, scratch, centre):
    """A serial arm's potential energy (J); M(q) and the bias into ``mass`` and ``bias``,
    the centre of mass (x_C, y_C, m) into ``centre``."""
    nq = int(p[H_NQ])
    serial_arm.mass_and_bias(p, x[:nq], x[nq:2 * nq], mass, bias, scratch)
    potential = serial_arm.potential_energy(p, x)
    serial_arm.centre_of_mass(p, x, centre)
    return potential


@kernel
def diagnostics(p, x, out, work, mech=None):
    """Fill out[0:3] with the model's diagnostics (see module docstring).

    ``work``: a plant's work array (its matrix and scratch rows are overwritten).
    ``mech``: what the kernel is compiled for (plant.family).
    """
    nq = int(p[H_NQ])
    model = int(p[H_MODEL])
    scratch = work[nq + 2:]
    if model == MODEL_RRR3:
        compiled(mech, MODEL_RRR3, _rrr3_diagnostics, None, p, x, out, scratch)
    else:
        mass = work[:nq, :nq]
        bias = work[nq, :nq]
        if model == MODEL_SERIAL_ARM:
            potential = compiled(mech, MODEL_SERIAL_ARM, _serial_arm_potential, np.nan, p, x,
                                 mass, bias, scratch, out[1:3])
        else:   # a user's chain: its mechanism's potential energy, no centre of mass
            potential = compiled(mech, MODEL_CHAIN, chain_mechanism, np.nan, p, x[:nq],
                                 x[nq:2 * nq], mass, bias, mech)
            out[1] = np.nan
            out[2] = np.nan
        kinetic = 0.0
        for i in range(nq):
            for j in range(nq):
                kinetic += 0.5 * x[nq + i] * mass[i, j] * x[nq + j]
        out[0] = kinetic + potential


ROW_METRICS = 3          # the most row metrics a model declares (PlantModel.metrics)
ROW_SCRATCH = (3, 6)     # the shape of row_metrics' scratch


@kernel
def row_metrics(p, q, scratch, out):
    """The model's row metrics of a run's rows q (one row of coordinates per step) into
    out[:len(PlantModel.metrics)], in the order the model declares them: the 3RRR's
    (rrr3.row_metrics; ``scratch`` of ROW_SCRATCH); a model that declares none leaves ``out``."""
    if int(p[H_MODEL]) == MODEL_RRR3:
        rrr3.row_metrics(p, q, scratch, out)


@kernel
def diagnose_rows(p, rec_x, rec_diag, work, mech=None):
    """The model's diagnostics of recorded rows, computed after a run (off the stepping
    path; the currents are recorded by the tick: rt.tick.Records)."""
    for k in range(rec_x.shape[0]):
        diagnostics(p, rec_x[k], rec_diag[k], work, mech)


