"""A user's own control laws, kept outside hilrig and named in a config
(``controller.law = "my_laws:pd_torque"``); see rrr3_my_pd.toml beside this file.

Signature (hilrig.controllers.interface): law(t, pos, vel, cur, params, state, u),
positions in rad, rates in rad/s, currents in A, u in the link's unit (V here).
"""
from numba import njit


@njit
def pd_torque(t, pos, vel, cur, params, state, u):
    """Joint-space PD on the torque, sent as volts through the motor's torque per volt.

    params = [kp (N m/rad), kd (N m s/rad), volts per N m, target_1 .. target_n (rad)].
    """
    kp, kd, volts_per_newton_metre = params[0], params[1], params[2]
    for j in range(u.shape[0]):
        u[j] = volts_per_newton_metre * (kp * (params[3 + j] - pos[j]) + kd * (0.0 - vel[j]))


@njit
def pid_torque(t, pos, vel, cur, params, state, u):
    """pd_torque plus integral action: state[j] holds the integral of joint j's error
    (rad s), advanced by params[3 + n] seconds (the control period) per call.

    params = [kp, kd, volts per N m, target_1 .. target_n, dt (s), ki (N m/(rad s))].
    """
    n = u.shape[0]
    kp, kd, volts_per_newton_metre = params[0], params[1], params[2]
    dt, ki = params[3 + n], params[4 + n]
    for j in range(n):
        error = params[3 + j] - pos[j]
        state[j] += error * dt
        u[j] = volts_per_newton_metre * (kp * error + kd * (0.0 - vel[j]) + ki * state[j])
