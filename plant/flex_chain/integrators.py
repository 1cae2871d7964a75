"""Two integrators of the flexible chain on the ground (plant.flex_chain.contact's state y):

- ``run_events``: offline, adaptive steps of Dormand and Prince's 8(5,3) pair (DOP853,
  scipy's tableau, error estimate and 7th-order dense output) with **event location**:
  after every accepted step, the end points' heights are checked; a point in flight that
  is at or below the ground (onset) or a point in contact that is at or above it
  (separation) ends the step at the first such instant, located by bisection on the
  dense output to ``t_tol`` (s). The contact mode of every point that crossed at that
  instant switches (so mirror points switch together), the onset's indentation rate is
  kept for the Hu-Guo damping, and the integration restarts there. The derivative is
  smooth inside every step, as in the paper's flight/contact phases.
- ``advance_fixed``: one tick of ``dt`` for a fixed-rate loop, in RK4 substeps: ``h_fine``
  while a point is in contact or within reach of the ground, ``h_coarse`` otherwise.
  Modes switch at substep boundaries only (no event location): the onset is late by up
  to one fine substep and the impact speed is the one at that boundary.

Event rows are [t (s), point (0-based: O_1 = 0), kind (1 onset, 0 separation)].
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hilrig.plant.flex_chain.contact import CONTACT, FLIGHT, WORK_TERMS, derivative
from hilrig.plant.flex_chain.chain import P_N, assemble, point_heights, point_state, scratch_size
from hilrig.jit.kernel import allocating_kernel, kernel


def _dop853_tableau():
    """scipy's DOP853 tableau (scipy/integrate/_ivp/dop853_coefficients.py, which needs
    only numpy), loaded by itself: importing it as a submodule would first import all of
    scipy.integrate, 0.4 s at the start of every `hil` command."""
    path = Path(importlib.util.find_spec("scipy").origin).parent / "integrate" / "_ivp" \
        / "dop853_coefficients.py"
    spec = importlib.util.spec_from_file_location("hilrig_dop853_coefficients", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dop = _dop853_tableau()

# DOP853: 12 stages (+ the derivative at the step's end), 3 more for the dense output
STAGES = dop.N_STAGES
RK_A = np.ascontiguousarray(dop.A, dtype=float)          # (16, 16), extra stages below
RK_B = np.ascontiguousarray(dop.B, dtype=float)
RK_E3 = np.ascontiguousarray(dop.E3, dtype=float)
RK_E5 = np.ascontiguousarray(dop.E5, dtype=float)
RK_D = np.ascontiguousarray(dop.D, dtype=float)           # (4, 16)
DENSE_POWER = dop.INTERPOLATOR_POWER                      # 7

# counters of run_events
C_ROWS, C_EVENTS, C_STEPS, C_REJECTED, C_EVALS, C_FAILED = range(6)
COUNTERS = 6


@kernel
def _stage(p, y, h, st, rk_a, kst, ytmp, modes, vminus, tau, mass, rhs, s, pt, force):
    """Stage ``st`` of an explicit Runge-Kutta step of size h (s) from y: its state
    y + h sum_j a[st, j] k_j into ``ytmp``, its derivative into ``kst[st]``."""
    for a in range(y.shape[0]):
        acc = 0.0
        for j in range(st):
            acc += rk_a[st, j] * kst[j, a]
        ytmp[a] = y[a] + h * acc
    derivative(p, ytmp, modes, vminus, tau, kst[st], mass, rhs, s, pt, force)


@allocating_kernel
def _prepare_dense(p, y, ynew, kst, h, modes, vminus, tau, rk_a, rk_d, dense, ytmp, mass,
                   rhs, s, pt, force):
    """The 7 coefficient rows of DOP853's dense output of the step y -> ynew (3 more
    derivative evaluations)."""
    ny = y.shape[0]
    for st in range(STAGES + 1, STAGES + 4):
        _stage(p, y, h, st, rk_a, kst, ytmp, modes, vminus, tau, mass, rhs, s, pt, force)
    for a in range(ny):
        delta = ynew[a] - y[a]
        dense[0, a] = delta
        dense[1, a] = h * kst[0, a] - delta
        dense[2, a] = 2.0 * delta - h * (kst[STAGES, a] + kst[0, a])
        for m in range(rk_d.shape[0]):
            acc = 0.0
            for j in range(kst.shape[0]):
                acc += rk_d[m, j] * kst[j, a]
            dense[3 + m, a] = h * acc


@allocating_kernel
def _dense(y, dense, theta, out):
    """The state at the fraction ``theta`` of the step (DOP853's interpolant)."""
    ny = y.shape[0]
    rows = dense.shape[0]
    for a in range(ny):
        acc = 0.0
        for i in range(rows):
            acc += dense[rows - 1 - i, a]
            acc *= theta if i % 2 == 0 else 1.0 - theta
        out[a] = y[a] + acc


@allocating_kernel
def _crossed(modes, heights, k):
    """Whether point k's height has crossed the ground for its current mode."""
    if modes[k] == FLIGHT:
        return heights[k] <= 0.0
    return heights[k] >= 0.0


@allocating_kernel
def run_events(p, y0, modes, vminus, tau, t_end, dt_out, rtol, atol, t_tol, h_max,
               rk_a, rk_b, rk_e3, rk_e5, rk_d, out_t, out_y, out_modes, out_vminus, events,
               counters):
    """Integrate from t = 0 to t_end with events (module docstring). Rows every dt_out
    go to out_t, out_y (state), out_modes and out_vminus (modes and onset rates in force
    at the row); events to ``events`` (rows [t, point, kind], as many as fit).
    ``modes``, ``vminus`` are the initial contact state (updated in place); y0 becomes
    the final state. counters: rows, events, accepted steps, rejected steps, derivative
    evaluations, failed flag."""
    n = int(p[P_N])
    nz = 2 + 2 * n
    ny = y0.shape[0]
    npts = n + 1
    kst = np.zeros((STAGES + 4, ny))
    dense = np.zeros((DENSE_POWER, ny))
    y = y0.copy()
    ytmp = np.zeros(ny)
    ynew = np.zeros(ny)
    yev = np.zeros(ny)
    mass = np.zeros((nz, nz))
    rhs = np.zeros(nz)
    s = np.zeros(6 * nz + 2 * nz * npts + 4 * npts)
    pt = np.zeros(4)
    force = np.zeros(2)
    heights = np.zeros(npts)
    probe = np.zeros(npts)
    for c in range(counters.shape[0]):
        counters[c] = 0.0
    n_rows = out_t.shape[0]
    t = 0.0
    h = min(1e-4, h_max)
    derivative(p, y, modes, vminus, tau, kst[0], mass, rhs, s, pt, force)
    evals = 1
    out_t[0] = 0.0
    out_y[0, :] = y
    out_modes[0, :] = modes
    out_vminus[0, :] = vminus
    row = 1
    n_events = 0
    while t < t_end - 1e-15:
        if h > h_max:
            h = h_max
        if h > t_end - t:
            h = t_end - t
        for st in range(1, STAGES):
            _stage(p, y, h, st, rk_a, kst, ytmp, modes, vminus, tau, mass, rhs, s, pt, force)
        for a in range(ny):
            acc = 0.0
            for j in range(STAGES):
                acc += rk_b[j] * kst[j, a]
            ynew[a] = y[a] + h * acc
        ok = derivative(p, ynew, modes, vminus, tau, kst[STAGES], mass, rhs, s, pt, force)
        evals += STAGES
        err5, err3 = 0.0, 0.0
        for a in range(ny):
            e5, e3 = 0.0, 0.0
            for j in range(STAGES + 1):
                e5 += rk_e5[j] * kst[j, a]
                e3 += rk_e3[j] * kst[j, a]
            scale = atol + rtol * max(abs(y[a]), abs(ynew[a]))
            err5 += (e5 / scale) ** 2
            err3 += (e3 / scale) ** 2
        norm = 0.0
        if err5 > 0.0 or err3 > 0.0:
            norm = h * err5 / math.sqrt((err5 + 0.01 * err3) * ny)
        if not ok or not (norm <= 1.0):
            h *= max(0.2, 0.9 * norm ** -0.125) if np.isfinite(norm) and ok else 0.2
            counters[C_REJECTED] += 1.0
            if h < 1e-14:
                counters[C_FAILED] = 1.0
                break
            continue
        counters[C_STEPS] += 1.0
        # events: has any end point crossed the ground for its mode by the step's end?
        point_heights(p, ynew, heights)
        crossing = False
        for k in range(npts):
            crossing = crossing or _crossed(modes, heights, k)
        needs_dense = crossing or (row < n_rows and row * dt_out <= t + h + 1e-12)
        if needs_dense:
            _prepare_dense(p, y, ynew, kst, h, modes, vminus, tau, rk_a, rk_d, dense, ytmp,
                           mass, rhs, s, pt, force)
            evals += 3
        theta_event = 2.0
        for k in range(npts):
            if not _crossed(modes, heights, k):
                continue
            lo, hi = 0.0, 1.0
            while (hi - lo) * h > t_tol:
                mid = 0.5 * (lo + hi)
                _dense(y, dense, mid, yev)
                point_heights(p, yev, probe)
                if _crossed(modes, probe, k):
                    hi = mid
                else:
                    lo = mid
            if hi < theta_event:
                theta_event = hi
        t_step_end = t + h
        if theta_event <= 1.0:
            t_step_end = t + theta_event * h
        # rows inside (t, t_step_end]
        while row < n_rows and row * dt_out <= t_step_end + 1e-12:
            _dense(y, dense, (row * dt_out - t) / h, ytmp)
            out_t[row] = row * dt_out
            out_y[row, :] = ytmp
            out_modes[row, :] = modes
            out_vminus[row, :] = vminus
            row += 1
        if theta_event <= 1.0:
            _dense(y, dense, theta_event, yev)
            point_heights(p, yev, probe)
            assemble(p, yev[0:nz], yev[nz:2 * nz], mass, rhs, s)
            for k in range(npts):
                if not _crossed(modes, probe, k):
                    continue
                if modes[k] == FLIGHT:
                    point_state(p, s, k, pt)
                    modes[k] = CONTACT
                    vminus[k] = -pt[3]
                    kind = 1.0
                else:
                    modes[k] = FLIGHT
                    vminus[k] = 0.0
                    kind = 0.0
                if n_events < events.shape[0]:
                    events[n_events, 0] = t_step_end
                    events[n_events, 1] = k
                    events[n_events, 2] = kind
                n_events += 1
            y[:] = yev
            t = t_step_end
            derivative(p, y, modes, vminus, tau, kst[0], mass, rhs, s, pt, force)
            evals += 1
        else:
            y[:] = ynew
            t = t_step_end
            for a in range(ny):
                kst[0, a] = kst[STAGES, a]
            h *= 10.0 if norm == 0.0 else min(10.0, 0.9 * norm ** -0.125)
    counters[C_ROWS] = row
    counters[C_EVENTS] = n_events
    counters[C_EVALS] = evals
    y0[:] = y


@kernel
def _rk4_substep(p, y, modes, vminus, tau, h, kst, mass, rhs, s, pt, force):
    ny = y.shape[0]
    ytmp = kst[4]
    ok = derivative(p, y, modes, vminus, tau, kst[0], mass, rhs, s, pt, force)
    for a in range(ny):
        ytmp[a] = y[a] + 0.5 * h * kst[0, a]
    ok &= derivative(p, ytmp, modes, vminus, tau, kst[1], mass, rhs, s, pt, force)
    for a in range(ny):
        ytmp[a] = y[a] + 0.5 * h * kst[1, a]
    ok &= derivative(p, ytmp, modes, vminus, tau, kst[2], mass, rhs, s, pt, force)
    for a in range(ny):
        ytmp[a] = y[a] + h * kst[2, a]
    ok &= derivative(p, ytmp, modes, vminus, tau, kst[3], mass, rhs, s, pt, force)
    for a in range(ny):
        y[a] += h / 6.0 * (kst[0, a] + 2.0 * kst[1, a] + 2.0 * kst[2, a] + kst[3, a])
    return ok


@kernel
def advance_fixed(p, y, modes, vminus, tau, t0, dt, h_fine, h_coarse, kst, mass, rhs, s,
                  pt, force, events, counters):
    """Advance y by one tick dt from t0 in RK4 substeps (module docstring). ``kst``
    (5 x len(y)), mass, rhs, s, pt (4), force (2): scratch. Mode switches are appended to
    ``events`` while they fit; counters[1] counts them, counters[2] the substeps.
    Returns False if the state became invalid. Allocates nothing."""
    n = int(p[P_N])
    nz = 2 + 2 * n
    elapsed = 0.0
    ok = True
    while elapsed < dt * (1.0 - 1e-9):
        assemble(p, y[0:nz], y[nz:2 * nz], mass, rhs, s)
        near = False
        for k in range(n + 1):
            point_state(p, s, k, pt)
            switched = -1.0
            if modes[k] == FLIGHT and pt[1] <= 0.0:
                modes[k] = CONTACT
                vminus[k] = -pt[3]
                switched = 1.0
            elif modes[k] == CONTACT and pt[1] > 0.0:
                modes[k] = FLIGHT
                vminus[k] = 0.0
                switched = 0.0
            if switched >= 0.0:
                ne = int(counters[1])
                if ne < events.shape[0]:
                    events[ne, 0] = t0 + elapsed
                    events[ne, 1] = k
                    events[ne, 2] = switched
                counters[1] += 1.0
            # within reach of the ground in the next coarse substep (with margin)
            if modes[k] == CONTACT or pt[1] + 3.0 * h_coarse * min(pt[3], 0.0) <= 1e-4:
                near = True
        h = h_fine if near else h_coarse
        if h > dt - elapsed:
            h = dt - elapsed
        ok &= _rk4_substep(p, y, modes, vminus, tau, h, kst, mass, rhs, s, pt, force)
        counters[2] += 1.0
        elapsed += h
    for a in range(y.shape[0]):
        if not np.isfinite(y[a]):
            return False
    return ok


@dataclass
class EventRun:
    """Result of ``simulate_events``: rows every dt_out, the events, and the cost."""

    t: np.ndarray          # (rows,) s
    y: np.ndarray          # (rows, state_size) plant.flex_chain.contact state
    modes: np.ndarray      # (rows, n + 1) contact modes in force at each row
    vminus: np.ndarray     # (rows, n + 1) onset indentation rates, m/s
    events: np.ndarray     # (events, 3) [t, point, kind]
    steps: int
    rejected: int
    evaluations: int
    failed: bool


def simulate_events(p: np.ndarray, z0, zd0, t_end: float, dt_out: float = 1e-3,
                    rtol: float = 1e-10, atol: float = 1e-12, t_tol: float = 1e-10,
                    h_max: float = 1e-3, tau=None, max_events: int = 10000) -> EventRun:
    """Run ``run_events`` from (z0, zd0) at t = 0 with every point in flight (a point
    starting at or below the ground starts in contact at zero onset rate)."""
    n = int(p[P_N])
    nz = 2 + 2 * n
    y = np.zeros(2 * nz + WORK_TERMS)
    y[:nz], y[nz:2 * nz] = z0, zd0
    heights = np.zeros(n + 1)
    point_heights(p, y[:nz], heights)
    modes = np.where(heights <= 0.0, float(CONTACT), float(FLIGHT))
    vminus = np.zeros(n + 1)
    rows = int(math.floor(t_end / dt_out + 1e-9)) + 1
    out_t, out_y = np.zeros(rows), np.zeros((rows, len(y)))
    out_modes, out_vminus = np.zeros((rows, n + 1)), np.zeros((rows, n + 1))
    events, counters = np.zeros((max_events, 3)), np.zeros(COUNTERS)
    torque = np.zeros(max(n - 1, 1)) if tau is None else np.asarray(tau, dtype=float)
    run_events(p, y, modes, vminus, torque, t_end, dt_out, rtol, atol, t_tol, h_max,
               RK_A, RK_B, RK_E3, RK_E5, RK_D, out_t, out_y, out_modes, out_vminus, events,
               counters)
    kept = int(counters[C_ROWS])
    n_events = min(int(counters[C_EVENTS]), max_events)
    return EventRun(out_t[:kept], out_y[:kept], out_modes[:kept], out_vminus[:kept],
                    events[:n_events], int(counters[C_STEPS]), int(counters[C_REJECTED]),
                    int(counters[C_EVALS]), bool(counters[C_FAILED]))


@dataclass
class FixedRun:
    """Result of ``simulate_fixed``: one row per tick, the mode switches, substeps."""

    t: np.ndarray
    y: np.ndarray
    modes: np.ndarray      # (rows, n + 1) contact modes at each tick's end
    vminus: np.ndarray     # (rows, n + 1) onset indentation rates, m/s
    events: np.ndarray
    substeps: int
    failed: bool


def simulate_fixed(p: np.ndarray, z0, zd0, t_end: float, dt: float = 1e-3,
                   h_fine: float = 1e-5, h_coarse: float = 1e-4, tau=None,
                   max_events: int = 10000) -> FixedRun:
    """Ticks of ``advance_fixed`` from (z0, zd0) at t = 0, every point in flight."""
    n = int(p[P_N])
    nz = 2 + 2 * n
    ny = 2 * nz + WORK_TERMS
    y = np.zeros(ny)
    y[:nz], y[nz:2 * nz] = z0, zd0
    modes, vminus = np.zeros(n + 1), np.zeros(n + 1)
    ticks = int(round(t_end / dt))
    out_t, out_y = np.arange(ticks + 1) * dt, np.zeros((ticks + 1, ny))
    out_y[0] = y
    out_modes, out_vminus = np.zeros((ticks + 1, n + 1)), np.zeros((ticks + 1, n + 1))
    kst, mass, rhs = np.zeros((5, ny)), np.zeros((nz, nz)), np.zeros(nz)
    s, pt, force = np.zeros(scratch_size(n)), np.zeros(4), np.zeros(2)
    events, counters = np.zeros((max_events, 3)), np.zeros(3)
    torque = np.zeros(max(n - 1, 1)) if tau is None else np.asarray(tau, dtype=float)
    failed, rows = False, ticks + 1
    for k in range(ticks):
        if not advance_fixed(p, y, modes, vminus, torque, k * dt, dt, h_fine, h_coarse, kst,
                             mass, rhs, s, pt, force, events, counters):
            failed, rows = True, k + 1
            break
        out_y[k + 1] = y
        out_modes[k + 1], out_vminus[k + 1] = modes, vminus
    n_events = min(int(counters[1]), max_events)
    return FixedRun(out_t[:rows], out_y[:rows], out_modes[:rows], out_vminus[:rows],
                    events[:n_events], int(counters[2]), failed)
