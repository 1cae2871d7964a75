"""``hil excite`` (an exciting trajectory for identification) and ``hil identify`` (an
arm's parameters fitted to logs: the planar serial arm, a URDF arm; and ``--validate``: how well a plant predicts a
log); hilrig.identify does the work (docs/IDENTIFY.md).
"""
from __future__ import annotations

import re
from pathlib import Path

from hilrig.cli.options import add_config, add_set, output_path, positive
from hilrig.errors import ConfigError

UNFITTED = re.compile(r"^# unfitted: (.+)$", re.MULTILINE)


def register(commands) -> None:
    commands.add("excite", "an exciting trajectory for identification: a Fourier reference "
                           "whose regressor is well conditioned", _declare_excite)
    commands.add("identify", "fit an arm's parameters to logs (--validate: predict "
                             "a log with a fitted config)", _declare_identify)


def _declare_excite(parser) -> None:
    add_config(parser)
    add_set(parser)
    parser.add_argument("--out", required=True, help="the config to run (.toml)")
    parser.add_argument("--harmonics", type=int, default=5, help="L (default 5)")
    parser.add_argument("--frequency", type=float, default=0.1,
                        help="base frequency, Hz (default 0.1: a 10 s period)")
    parser.add_argument("--max-position", type=float, default=0.8,
                        help="|q - q0| limit, rad (default 0.8)")
    parser.add_argument("--max-rate", type=float, default=1.5,
                        help="|qd| limit, rad/s (default 1.5)")
    parser.add_argument("--max-acceleration", type=float, default=5.0,
                        help="|qdd| limit, rad/s^2 (default 5)")
    parser.add_argument("--periods", type=int, default=2,
                        help="periods to run: sets sim.duration (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="the optimiser's start (default 0)")
    parser.set_defaults(handler=_excite)


def _declare_identify(parser) -> None:
    parser.add_argument("logs", nargs="*", metavar="LOG",
                        help="telemetry logs (.mcap) or hil sim outputs (.npz)")
    parser.add_argument("--config", required=True,
                        help="the plant to fit (a TOML file or built-in config); with "
                             "--validate, the fitted config")
    add_set(parser)
    parser.add_argument("--fit", help="comma-separated parameters (default: the plant's; "
                                      "docs/IDENTIFY.md lists them)")
    parser.add_argument("--cutoff", type=float, default=None,
                        help="the position filter's cut-off, Hz (default: 4x the highest "
                             "harmonic of the logs' exciting trajectory, else 4)")
    parser.add_argument("--out", help="write the fitted config here (.toml)")
    parser.add_argument("--validate", metavar="LOG",
                        help="predict this log with --config (and the config it was fitted "
                             "from) instead of fitting")
    parser.add_argument("--unfitted", metavar="CONFIG",
                        help="with --validate: the config before the fit (default: the one "
                             "the fitted config names)")
    parser.add_argument("--plot", help="with --validate: the plot (.png; default LOG-validate.png)")
    parser.set_defaults(handler=_identify)


def _excite(args) -> int:
    from hilrig.identify.excite import excite
    from hilrig.identify.fit import raw_of, write_config
    from hilrig.settings.config import load

    out = output_path("--out", args.out, (".toml",))
    cfg = load(args.config, list(args.set))
    found = excite(cfg, raw_of(args.config, list(args.set)), args.harmonics, args.frequency,
                   args.max_position, args.max_rate, args.max_acceleration, args.periods,
                   args.seed)
    write_config(found.raw, out, f"hil excite {args.config}: a Fourier trajectory of "
                                 f"{args.harmonics} harmonics of {args.frequency:g} Hz\n"
                                 f"condition number of the base regressor: "
                                 f"{found.condition:.4g}")
    print(f"condition number of the base regressor (columns scaled to unit norm): "
          f"{found.condition:.4g}")
    print(f"wrote {out}")
    return 0


def _identify(args) -> int:
    from hilrig.settings.config import load

    if args.validate:
        return _validate(args)
    if not args.logs:
        raise ConfigError("hil identify: give at least one LOG (or --validate LOG)")
    positive("--cutoff", args.cutoff, "Hz")
    out = output_path("--out", args.out, (".toml",)) if args.out else None
    from hilrig.identify.fit import identify, raw_of, write_config
    cfg = load(args.config, list(args.set))
    fit = identify(args.logs, cfg, args.fit, args.cutoff, raw_of(args.config, list(args.set)))
    print(fit.report())
    if out is not None:
        if fit.raw is None:
            raise ConfigError(f"{out} not written: {fit.unphysical}")
        source = Path(args.config)
        unfitted = source.resolve() if source.exists() else args.config
        write_config(fit.raw, out, f"hil identify: fitted to {', '.join(args.logs)}\n"
                                   f"unfitted: {unfitted}")
        print(f"wrote {out}")
    return 0


def _validate(args) -> int:
    from hilrig.identify.validate import plot, predict, report
    from hilrig.settings.config import load, locate

    if args.logs:
        raise ConfigError("hil identify --validate LOG: takes one log, no other LOG")
    plot_path = output_path("--plot", args.plot or str(Path(args.validate).with_suffix(""))
                            + "-validate.png", (".png",))
    fitted = load(args.config, list(args.set))
    plants = {"fitted": fitted}
    unfitted = args.unfitted
    if unfitted is None:
        path = locate(args.config)
        found = UNFITTED.search(path.read_text(encoding="utf-8")) if isinstance(path, Path) \
            else None
        unfitted = found.group(1).strip() if found else None
    if unfitted is not None:
        plants["unfitted"] = load(unfitted)
    log, predictions = predict(args.validate, plants)
    print(report(predictions))
    plot(log, predictions, str(plot_path))
    print(f"wrote {plot_path}")
    return 0
