"""Impacts of paper 004's drop (1.5 s) under modelling choices: the study behind the
table in docs/CONTACT.md. Each run is the product's own: ``hil sim``'s offline run
(rt.sim.simulate) of the mode set's config (configs/chain_drop_*.toml: event-located,
rtol 1e-10, atol 1e-12, rows every 0.1 ms) with the variant's plant keys set. For each
mode set and variant: the number of impacts (contact onsets), the distinct onset
instants (mirror pairs share one), and the same count at a 10x tighter tolerance
(sim.rtol 1e-11, sim.atol 1e-13: is it converged?). Prints one line per run as it goes, then the
table of docs/CONTACT.md ("Impacts against the paper"): impacts in 1.5 s at rtol 1e-10,
then "/ " the count at 1e-11 where it differs. ``--write`` puts that table into
docs/CONTACT.md between its markers (all four mode sets needed).
    python bench/chain_impacts.py [--modes ss-ss-ss,cc-cc-cc,sc-cc-cs,cs-ss-sc] [--write]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from hilrig.rt.sim import simulate
from hilrig.settings.config import load

VARIANTS = (
    ("defaults: Timoshenko, rho_I = J3, mu_k = 0.1", {}),
    ("rho_I = 1.30e-5 kg m (the printed wavenumbers)", {"rotary_inertia": 1.30e-5}),
    ("no rotary inertia", {"rotary_inertia": 0.0}),
    ("Euler-Bernoulli bending", {"beam": "euler_bernoulli"}),
    ("Euler-Bernoulli, no rotary inertia", {"beam": "euler_bernoulli", "rotary_inertia": 0.0}),
    ("no friction", {"friction": 0.0}),
    ("no structural or air damping", {"kelvin_voigt": 0.0, "air_damping": 0.0}),
    ("6 Gauss points per link", {"gauss_points": 6}),
)
ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {"ss-ss-ss": "chain_drop_ss", "cc-cc-cc": "chain_drop_cc",
           "sc-cc-cs": "chain_drop_sc_cc_cs", "cs-ss-sc": "chain_drop_cs_ss_sc"}
MODES = tuple(CONFIGS)
TIGHT = ("sim.rtol=1e-11", "sim.atol=1e-13")
DOC = ROOT / "docs" / "CONTACT.md"
BEGIN, END = "<!-- bench/chain_impacts.py: begin -->", "<!-- bench/chain_impacts.py: end -->"


def impacts(modes: str, *overrides: str, **choices) -> tuple[int, int, np.ndarray]:
    """(impacts, distinct onset instants, the instants (s)) of the mode set's config
    with the plant keys ``choices`` and the further ``overrides`` (key=value)."""
    keys = [f"plant.{key}={value!r}".replace("'", '"') for key, value in choices.items()]
    cfg = load(ROOT / "configs" / f"{CONFIGS[modes]}.toml", keys + list(overrides))
    events = simulate(cfg).arrays["events"]
    onsets = events[events[:, 2] == 1, 0]
    instants = np.unique(np.round(onsets, 7))
    return len(onsets), len(instants), instants


def table(counts: dict, modes: list) -> str:
    """The markdown table of counts[(variant name, modes)] = (at 1e-10, at 1e-11)."""
    lines = ["| variant | " + " | ".join(modes) + " |", "| --- |" + " --- |" * len(modes)]
    for name, _ in VARIANTS:
        cells = []
        for m in modes:
            loose, tight = counts[name, m]
            cells.append(str(loose) if loose == tight else f"{loose} / {tight}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(text: str) -> None:
    """Replace the table between BEGIN and END in docs/CONTACT.md."""
    doc = DOC.read_text()
    head, rest = doc.split(BEGIN + "\n", 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + BEGIN + "\n" + text + "\n" + END + tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--write", action="store_true",
                        help="put the table into docs/CONTACT.md (all four mode sets)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if args.write and sorted(modes) != sorted(MODES):
        parser.error("--write needs all four mode sets")
    print("modes | variant | impacts (rtol 1e-10) | onset instants | impacts (rtol 1e-11)",
          flush=True)
    counts = {}
    for m in modes:
        for name, choices in VARIANTS:
            count, instants, _ = impacts(m, **choices)
            tight, _, _ = impacts(m, *TIGHT, **choices)
            counts[name, m] = (count, tight)
            print(f"{m} | {name} | {count} | {instants} | {tight}", flush=True)
    text = table(counts, modes)
    print(text)
    if args.write:
        write(text)


if __name__ == "__main__":
    main()
