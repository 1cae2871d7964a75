"""The commands that prepare a rig before a run: ``hil configs`` (the built-in configs),
``hil warmup`` (compile the kernels ahead: cli.warmup), ``hil keys`` (the CURVE keys tcp
endpoints require), ``hil canopen eds`` (the EDS file of an emulated CiA 402 drive).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from hilrig.cli.options import CONFIG_HELP, add_config, add_set, output_path


def register(commands) -> None:
    commands.add("configs", "list the built-in configs (`hil run NAME` runs one)",
                 _declare_configs)
    commands.add("warmup", "compile ahead the kernels every command needs", _declare_warmup)
    commands.add("keys", "make the CURVE keys that tcp endpoints require", _declare_keys)
    commands.add("canopen", "CANopen files of the emulated CiA 402 drives", _declare_canopen)


def _declare_configs(parser) -> None:
    parser.add_argument("--show", metavar="NAME", help="print this config's TOML text")
    parser.set_defaults(handler=_configs)


def _declare_warmup(parser) -> None:
    parser.add_argument("configs", nargs="*",
                        help="configs, paths or built-in names (default: every built-in one)")
    parser.add_argument("--prune", action="store_true",
                        help="remove the cached kernels of other source versions")
    parser.add_argument("--list", action="store_true",
                        help="compile nothing: list what the cache holds")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes compiling at once (default: one per CPU)")
    parser.set_defaults(handler=_warmup)


def _declare_keys(parser) -> None:
    parser.add_argument("--dir", help="key folder (default $HILRIG_KEYS or "
                                      "~/.config/hilrig/keys)")
    parser.add_argument("--force", action="store_true", help="replace existing keys")
    parser.set_defaults(handler=_keys)


def _declare_canopen(parser) -> None:
    canopen_sub = parser.add_subparsers(dest="canopen_command", required=True)
    eds = canopen_sub.add_parser("eds", help="write the EDS (CiA 306) of an emulated drive")
    add_config(eds, nargs="?", default="rig_canopen", help=f"{CONFIG_HELP}; default rig_canopen")
    eds.add_argument("--node", type=int, required=True, help="the drive's node-id")
    eds.add_argument("-o", "--out", help="output .eds (default: standard output)")
    add_set(eds)
    eds.set_defaults(handler=_canopen_eds)


def _configs(args) -> int:
    """hil configs: the built-in configs, one per line with its description, and where
    they are; with --show NAME, that config's text (to copy and edit)."""
    from hilrig.settings import builtin_configs

    if args.show:
        print(builtin_configs.text(args.show), end="")
        return 0
    names = builtin_configs.names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {builtin_configs.description(name)}")
    print(f"(files in {builtin_configs.directory()}; `hil configs --show NAME` prints one)")
    return 0


def _warmup(args) -> int:
    from hilrig.cli.warmup import format_cache, format_report, prune, warm_up
    from hilrig.errors import ConfigError

    if args.list:
        print(format_cache())
        return 0
    if args.jobs < 1:
        raise ConfigError(f"--jobs: must be at least 1, got {args.jobs}")
    report = warm_up(args.configs or None, progress=lambda text: print(text, flush=True),
                     jobs=args.jobs)
    print(format_report(report))
    if args.prune and report.cache_dir is not None:
        for path in prune(report.cache_dir):
            print(f"removed {path}")
    return 0


def _keys(args) -> int:
    """hil keys: create this user's CURVE key pairs (refused if they exist, unless --force)."""
    from hilrig.drivers import curve

    directory = curve.make_keys(args.dir, args.force)
    print(f"wrote the server and client key pairs in {directory} (secrets 0600); another "
          f"machine's client needs a copy of {directory / 'server.key'} and a client key "
          f"pair whose public key goes into {directory / 'authorized'}")
    return 0


def _canopen_eds(args) -> int:
    from hilrig.drivers.cia402_eds import eds_text
    from hilrig.settings.config import load

    if args.out:
        output_path("--out", args.out, (".eds",))
    cfg = load(args.config, list(args.set) + ["link.type=canopen"])
    text = eds_text(cfg, args.node)
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out} (node {args.node})")
    else:
        sys.stdout.write(text)
    return 0
