"""Impacts of paper 004's drop (1.5 s) under modelling choices: the study behind the
table in docs/CONTACT.md. For each mode set and variant: the number of impacts (contact
onsets), the distinct onset instants (mirror pairs share one), and the same count at a
10x tighter tolerance (is it converged?).
    python bench/chain_impacts.py [--modes ss-ss-ss,cc-cc-cc,sc-cc-cs,cs-ss-sc]
"""
from __future__ import annotations

import argparse

import numpy as np
from hilrig.plant.flex_chain import integrators as ci
from hilrig.plant.flex_chain.model import paper_chain, paper_initial_state

VARIANTS = (
    ("baseline: Timoshenko, rho_I = J3 = 2.9473e-5, mu_k = 0.1", {}),
    ("rho_I = 1.30e-5 (the printed wavenumbers)", {"rotary_inertia": 1.30e-5}),
    ("no rotary inertia", {"rotary_inertia": 0.0}),
    ("Euler-Bernoulli bending (E I W''^2)", {"beam": "euler_bernoulli"}),
    ("Euler-Bernoulli, no rotary inertia", {"beam": "euler_bernoulli", "rotary_inertia": 0.0}),
    ("no friction", {"friction": 0.0}),
    ("no structural or air damping", {"kelvin_voigt": 0.0, "air_damping": 0.0}),
    ("6 Gauss points per link (12 in the others)", {"gauss_points": 6}),
)


def impacts(modes: str, rtol: float, **choices) -> tuple[int, int, np.ndarray]:
    p = paper_chain(modes, **choices).block()
    z0, zd0 = paper_initial_state()
    run = ci.simulate_events(p, z0, zd0, 1.5, rtol=rtol, atol=rtol * 1e-2)
    onsets = run.events[run.events[:, 2] == 1, 0]
    instants = np.unique(np.round(onsets, 7))
    return len(onsets), len(instants), instants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="ss-ss-ss,cc-cc-cc,sc-cc-cs,cs-ss-sc")
    args = parser.parse_args()
    print("modes | variant | impacts (rtol 1e-10) | onset instants | impacts (rtol 1e-11)")
    for modes in args.modes.split(","):
        for name, choices in VARIANTS:
            count, instants, times = impacts(modes, 1e-10, **choices)
            tight, _, _ = impacts(modes, 1e-11, **choices)
            print(f"{modes} | {name} | {count} | {instants} | {tight}", flush=True)


if __name__ == "__main__":
    main()
