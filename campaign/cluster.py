"""The Dask cluster of ``hil campaign``, closed to strangers.

Dask's wire protocol runs whatever a connected peer sends (a task, a ``run`` request) in
the scheduler and the workers, so every listener must know who is talking. Both
clusters use Dask's own TLS with mutual authentication: a peer is served only if it
shows a certificate signed by the cluster's authority.

- The local cluster (no ``--scheduler``) gets a certificate authority of its own, made
  in memory for this campaign (``distributed.Security.temporary``) and handed to the
  workers the client spawns through their pipes, never written where another user can
  read it. Its scheduler, workers and nannies listen on ``tls://127.0.0.1``; the
  dashboard is off and the HTTP servers Dask always starts serve no page; the workers'
  scratch space is a folder of this user's (mode 0700).
- A cluster started by hand (``--scheduler tls://HOST:PORT``) is joined with the CA,
  certificate and key given by ``--tls-ca-file``, ``--tls-cert`` and ``--tls-key`` (the
  names ``dask scheduler`` and ``dask worker`` use) or, for those not given, Dask's own
  config: ``distributed.comm.tls.ca-file``, ``distributed.comm.tls.client.cert`` and
  ``.key``. A ``tcp://`` scheduler, which anyone who reaches it can command, is refused
  unless ``--insecure`` says its network is trusted.

A mistake in any of this (an address, a file, a cluster that does not answer) is one
CampaignError line, before anything runs.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import ssl
import tempfile
import weakref
from dataclasses import dataclass
from urllib.parse import urlsplit

CONNECT_SECONDS = 5.0      # for Dask's connection to a scheduler, then to probe its port
ADDRESS_HINT = "expected tls://HOST:PORT (the address `dask scheduler` prints)"
TLS_CONFIG = ("distributed.comm.tls.ca-file", "distributed.comm.tls.client.cert",
              "distributed.comm.tls.client.key")


class CampaignError(RuntimeError):
    """The campaign cannot run: its dependencies, or its cluster (printed as one line)."""


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files that admit this client to a hand-started TLS cluster (None: from
    Dask's config): the cluster's CA certificate, this client's certificate and its key
    (None: in the certificate's file)."""

    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None


def open_client(scheduler: str | None = None, workers: int | None = None,
                tls: TlsFiles = TlsFiles(), insecure: bool = False):
    """A Dask client: of the cluster at ``scheduler`` (``security``), or of a new
    LocalCluster of ``workers`` single-threaded processes (default: one per core this
    process may use) secured by a certificate authority of its own (``local_cluster``).
    Returns (client, cluster or None); CampaignError (one line) if it cannot connect."""
    from dask.distributed import Client

    logging.getLogger("distributed").setLevel(logging.WARNING)   # not each worker's start
    if scheduler is None:
        cluster = local_cluster(workers or len(os.sched_getaffinity(0)))
        return Client(cluster, security=cluster.security), cluster
    security = cluster_security(scheduler, tls, insecure)
    try:
        return Client(scheduler, security=security, timeout=CONNECT_SECONDS), None
    except Exception as exc:     # noqa: BLE001 -- Dask's errors of a failed handshake vary
        failure = exc
    host, port = _host_port(scheduler)
    try:           # only now: a probe is a failed handshake in the scheduler's log
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise CampaignError(f"--scheduler {scheduler}: nothing answers at {host}:{port} "
                            f"({exc.strerror or exc})") from None
    reason = " ".join(str(failure).split()) or type(failure).__name__
    hint = " (is it a TLS scheduler of this CA?)" if security is not None else \
        " (is it a plain tcp:// scheduler?)"
    raise CampaignError(f"--scheduler {scheduler}: cannot connect: {reason}{hint}") from None


def local_cluster(workers: int):
    """A LocalCluster of ``workers`` single-threaded worker processes on tls://127.0.0.1,
    its own certificate authority in memory, no dashboard, HTTP servers without pages,
    scratch space in a private folder removed with the cluster."""
    import dask
    from distributed import LocalCluster, Security

    try:
        security = Security.temporary()
    except ImportError as exc:
        raise CampaignError(f"hil campaign secures its cluster with TLS: {exc}") from None
    scratch = tempfile.mkdtemp(prefix="hilrig-campaign-")          # mode 0700
    no_pages = {"distributed.scheduler.http.routes": [],
                "distributed.worker.http.routes": []}
    with dask.config.set(no_pages):     # the nannies hand this config to their workers
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               host="127.0.0.1", protocol="tls://", security=security,
                               dashboard_address="127.0.0.1:0", worker_dashboard_address=None,
                               scheduler_kwargs={"dashboard": False}, local_directory=scratch)
    weakref.finalize(cluster, shutil.rmtree, scratch, ignore_errors=True)
    return cluster


def cluster_security(scheduler: str, tls: TlsFiles, insecure: bool):
    """The ``distributed.Security`` that joins the cluster at ``scheduler``: TLS with the
    given files, the rest from Dask's config; None for a tcp:// scheduler with
    ``insecure``. CampaignError for an address of another form, a tcp:// one without
    ``insecure``, or certificates missing or unreadable."""
    from distributed import Security

    scheme = urlsplit(scheduler).scheme if "://" in scheduler else ""
    _host_port(scheduler)
    given = {name: value for name, value in (("tls_ca_file", tls.ca_file),
                                             ("tls_client_cert", tls.cert),
                                             ("tls_client_key", tls.key)) if value}
    if scheme == "tcp":
        if given:
            raise CampaignError(f"--scheduler {scheduler}: --tls-* options need a tls:// "
                                "address")
        if not insecure:
            raise CampaignError(
                f"--scheduler {scheduler}: a tcp:// scheduler runs the code of anyone who "
                "reaches it; start it with TLS (docs/CAMPAIGNS.md) or say --insecure")
        return None
    security = Security(require_encryption=True, **given)
    files = {"--tls-ca-file": security.tls_ca_file, "--tls-cert": security.tls_client_cert}
    missing = [option for option, value in files.items() if not value]
    if missing:
        raise CampaignError(f"--scheduler {scheduler}: give {' and '.join(missing)} (or "
                            f"Dask's config {TLS_CONFIG[0]}, {TLS_CONFIG[1]}, .key)")
    for option, path in (*files.items(), ("--tls-key", security.tls_client_key)):
        if path is not None and "\n" not in path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise CampaignError(f"{option} {path}: cannot read: {exc.strerror or exc}") \
                    from None
    try:
        security.get_connection_args("client")       # loads the files as a TLS context
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise CampaignError(f"--scheduler {scheduler}: the TLS files do not load: "
                            f"{' '.join(str(exc).split())}") from None
    return security


def _host_port(address: str) -> tuple[str, int]:
    """The host and port of a tls:// or tcp:// address; CampaignError otherwise."""
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("tls", "tcp") or not parts.hostname \
            or port is None or parts.path or parts.query or parts.fragment:
        raise CampaignError(f"--scheduler {address}: {ADDRESS_HINT}")
    return parts.hostname, port
