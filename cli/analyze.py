"""``hil analyze``: natural frequencies and mode shapes (modes), the 3RRR's Cartesian
stiffness and its workspace maps (stiffness), paper 002's figures of a flex_rp run
(flex); analysis.modal and analysis.flex_report do the work.
"""
from __future__ import annotations

from pathlib import Path

from hilrig.cli.options import add_config, add_set, output_path

WHAT = (("modes", "natural frequencies and mode shapes at the configured state"),
        ("stiffness", "3RRR Cartesian stiffness (and --map: workspace maps)"),
        ("flex", "paper 002's figures of a flex_rp run (tip, joints, forces)"))


def register(commands) -> None:
    commands.add("analyze", "natural frequencies, modes and stiffness", _declare)


def _declare(parser) -> None:
    analyze_sub = parser.add_subparsers(dest="what", required=True)
    for what, text in WHAT:
        item = analyze_sub.add_parser(what, help=text)
        add_config(item)
        add_set(item)
        item.add_argument("--json", action="store_true", help="print JSON")
        if what == "stiffness":
            item.add_argument("--map", action="store_true",
                              help="maps of the lowest frequency and stiffness (PNG)")
        if what != "modes":
            item.add_argument("--out", help="PNG (default runs/<config>_stiffness_map.png "
                                            "or runs/<config>_flex.png)")
        item.set_defaults(handler=_analyze)


def _analyze(args) -> int:
    from hilrig.analysis import modal
    from hilrig.settings.config import load

    if getattr(args, "out", None):
        output_path("--out", args.out, (".png",))
    cfg = load(args.config, list(args.set))
    if args.what == "modes":
        print(modal.run_modes(cfg, args.json))
    elif args.what == "flex":
        from hilrig.analysis import flex_report
        print(flex_report.run(cfg, args.out, args.json, Path(args.config).stem))
    else:
        print(modal.run_stiffness(cfg, args.json, args.map, args.out, Path(args.config).stem))
    return 0
