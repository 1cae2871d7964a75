"""``hil campaign SPEC``: many scenarios on Dask, one Parquet table of metrics
(campaign.runner, docs/CAMPAIGNS.md). A campaign that cannot start is a CampaignError
(cli.exits: one line, exit 2); the exit code is otherwise the runner's (0 when every
scenario passed its criteria).
"""
from __future__ import annotations


def register(commands) -> None:
    commands.add("campaign", "run a campaign of scenarios (docs/CAMPAIGNS.md) on Dask: one "
                             "Parquet table of metrics", _declare)


def _declare(parser) -> None:
    parser.add_argument("spec", help="campaign spec (TOML): base config, axes, criteria")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="a running Dask scheduler (default: a local cluster)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="local cluster's worker processes (default: one per core)")
    parser.add_argument("--out", metavar="DIR",
                        help="output directory (default runs/campaigns/<spec name>)")
    parser.add_argument("--resume", action="store_true",
                        help="run only the scenarios not yet in --out")
    parser.add_argument("--force", action="store_true",
                        help="replace the campaign files --out holds (results, summary)")
    parser.add_argument("--tls-ca-file", metavar="PEM",
                        help="--scheduler's certificate authority (default: Dask's config "
                             "distributed.comm.tls.ca-file)")
    parser.add_argument("--tls-cert", metavar="PEM",
                        help="this client's certificate for --scheduler (default: "
                             "distributed.comm.tls.client.cert)")
    parser.add_argument("--tls-key", metavar="PEM",
                        help="its private key (default: distributed.comm.tls.client.key, "
                             "or in the certificate's file)")
    parser.add_argument("--insecure", action="store_true",
                        help="accept a tcp:// --scheduler (no TLS: anyone who reaches it "
                             "runs code on its workers)")
    parser.set_defaults(handler=_campaign)


def _campaign(args) -> int:
    from hilrig.campaign.runner import TlsFiles, command
    from hilrig.cli.options import output_folder

    if args.out:
        output_folder("--out", args.out)
    return command(args.spec, args.scheduler, args.workers, args.out, args.resume, args.force,
                   TlsFiles(args.tls_ca_file, args.tls_cert, args.tls_key), args.insecure)
