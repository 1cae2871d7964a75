"""hil campaign's clusters as other people meet them: a stranger (another OS user) against
the local cluster, a hand-started TLS scheduler and workers (real processes) running a
user's law from a package they do not have, and bad scheduler addresses."""
from __future__ import annotations

import json
import os
import queue
import shutil
import site
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hilrig.cli import main as cli
from hilrig.campaign.runner import open_client
from hilrig.campaign.metrics import measure
from hilrig.campaign.spec import load_spec
from hilrig.rt.sim import simulate
from rt_helpers import ROOT, stderr_lines

STRANGER = 65534            # nobody

# What the stranger runs (as nobody, with its own copy of Dask): it connects a Client to
# the scheduler and submits a function that writes the marker file, runs it on every
# worker through the client, then asks every worker and nanny directly to run it (the
# "run" handler) -- over the address as given and over TLS with certificates of its own.
STRANGER_SCRIPT = r"""
import asyncio, faulthandler, json, sys
from distributed import Client, Security
from distributed.core import rpc
from distributed.protocol.pickle import dumps

faulthandler.dump_traceback_later(240, exit=True)       # a hang is a failure, not a wait
scheduler, others, marker = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]

def plant(path=marker):
    with open(path, "a") as f:
        f.write("a stranger's code ran here\n")
    return "ran"

def tls(address):
    return "tls://" + address.split("://", 1)[1]

async def submit(address, security):
    async with Client(address, asynchronous=True, timeout=5, security=security) as client:
        return [await client.submit(plant, pure=False), await client.run(plant),
                await client.run_on_scheduler(plant)]

async def poke(address, security):
    args = security.get_connection_args("client") if security else {}
    async with rpc(address, timeout=5, connection_args=args) as server:
        return await server.run(function=dumps(plant))

async def main():
    own = Security.temporary()        # a certificate authority of the stranger's own
    attempts = [(submit, scheduler, None), (submit, tls(scheduler), own)]
    attempts += [(poke, target, security) for address in others
                 for target, security in ((address, None), (tls(address), own))]
    for attempt, address, security in attempts:
        try:
            found = await asyncio.wait_for(attempt(address, security), 30)
            print("ran", attempt.__name__, address, found, flush=True)
        except Exception as exc:
            print("refused", attempt.__name__, address, type(exc).__name__, flush=True)

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def stranger_python():
    """A command that runs Python as nobody, with Dask importable: the packages Dask's
    client imports, hard-linked (or copied) into a world-readable folder, since nobody
    cannot read this interpreter's site-packages under /root."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to become another user with setpriv)")
    probe = ("import json, sys, distributed, distributed.core, distributed.protocol.pickle\n"
             "from distributed import Security\n"
             "Security.temporary()\n"
             "print(json.dumps(sorted({m.__file__ for m in list(sys.modules.values())\n"
             "                         if getattr(m, '__file__', None)})))")
    files = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                      text=True, check=True).stdout)
    folder = Path(tempfile.mkdtemp(prefix="hil-stranger-"))
    try:
        folder.chmod(0o755)
        for base in site.getsitepackages():
            for top in sorted({Path(f).relative_to(base).parts[0] for f in files
                               if f.startswith(base + os.sep)}):
                source = Path(base) / top
                if top.startswith("__editable__") or (folder / top).exists():
                    continue
                if source.is_dir():
                    shutil.copytree(source, folder / top, copy_function=_link_or_copy)
                else:
                    _link_or_copy(source, folder / top)
        python = "/usr/bin/python3"
        command = ["setpriv", f"--reuid={STRANGER}", f"--regid={STRANGER}", "--clear-groups",
                   "env", "-i", f"PYTHONPATH={folder}", "HOME=/nonexistent", "PATH=/usr/bin:/bin",
                   python]
        check = subprocess.run(command + ["-c", "import distributed, os; print(os.getuid())"],
                               capture_output=True, text=True, timeout=60)
        if check.stdout.strip() != str(STRANGER):
            pytest.skip(f"no Dask for the stranger: {check.stderr.strip()[-300:]}")
        yield command
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _link_or_copy(source, target) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _endpoints(client) -> list:
    """Every address the cluster listens on besides the scheduler's: its workers' and
    their nannies'."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return sorted({*workers, *(worker["nanny"] for worker in workers.values()
                               if worker.get("nanny"))})


@pytest.mark.system
def test_a_stranger_cannot_run_code_in_the_local_clusters_scheduler_or_workers(
        tmp_path, stranger_python):
    """Before: the LocalCluster listened on loopback TCP without authentication, and
    nobody ran a function as root in the scheduler and both workers, writing a root-owned
    file. Now every listener wants a certificate of the cluster's own authority (TLS with
    mutual authentication): each attempt is refused and nothing is written."""
    marker = tmp_path / "stranger-was-here"
    client, cluster = open_client(workers=2)
    try:
        assert client.run(os.getpid)               # the owner's client works
        others = _endpoints(client)
        assert len(others) == 4                    # two workers, two nannies
        found = subprocess.run(stranger_python + ["-W", "ignore", "-c", STRANGER_SCRIPT,
                                                  client.scheduler.address,
                                                  json.dumps(others), str(marker)],
                               capture_output=True, text=True, timeout=300)
        attempts = found.stdout.splitlines()
        assert len(attempts) == 2 + 2 * len(others), found.stdout + found.stderr
        assert all(line.startswith("refused ") for line in attempts), found.stdout
        assert not marker.exists(), marker.read_text()
        assert client.submit(os.getpid, pure=False).result() > 0    # still serving its owner
        # no dashboard; the HTTP servers Dask starts anyway (loopback) serve no page
        ports = [cluster.scheduler.http_server.port,
                 *client.run(lambda dask_worker: dask_worker.http_server.port).values()]
        for port in ports:
            for page in ("/", "/status", "/info/main/workers.html", "/json/identity.json",
                         "/metrics", "/health"):
                with pytest.raises(urllib.error.HTTPError) as answer:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=10)
                assert answer.value.code == 404, (port, page)
    finally:
        client.close()
        cluster.close()


# -- a cluster started by hand, with TLS ---------------------------------------------------

class Process:
    """A real subprocess whose stderr is read line by line in a thread (so its pipe never
    fills); ``wait_for(text)`` waits for a line holding ``text`` (readiness, not time)."""

    def __init__(self, argv: list, cwd: Path, env: dict):
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, limit: float = 300.0) -> str:
        """The first line holding ``text``; fails if the process ends first, or after
        ``limit`` s (a bound on a hang, not a wait)."""
        while True:
            line = self.lines.get(timeout=limit)
            if line is None:
                raise AssertionError(f"ended before {text!r}:\n{''.join(self.seen)}")
            self.seen.append(line)
            if text in line:
                return line

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_certificates(folder: Path) -> dict:
    """The cluster's certificate authority, certificate and key as PEM files (0600): one
    self-signed certificate for every role, as Dask's Security.temporary makes."""
    from distributed import Security

    security = Security.temporary()
    files = {}
    for name, text in (("ca", security.tls_ca_file), ("cert", security.tls_scheduler_cert),
                       ("key", security.tls_scheduler_key)):
        path = folder / f"{name}.pem"
        path.touch(mode=0o600)
        path.write_text(text)
        files[name] = str(path)
    return files


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """`dask scheduler` on tls://127.0.0.1 and two `dask worker` processes (each with its
    nanny), started as a user would by hand, with the certificates of write_certificates.
    The workers run in a folder of their own, without the tests' user packages on their
    path. Yields (scheduler address, certificate files)."""
    folder = tmp_path_factory.mktemp("cluster")
    certs = write_certificates(folder)
    tls = ["--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"]]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    started = []
    try:
        scheduler = Process([sys.executable, "-m", "distributed.cli.dask_scheduler",
                             "--host", "127.0.0.1", "--port", "0", "--protocol", "tls",
                             "--no-dashboard", *tls], folder, env)
        started.append(scheduler)
        address = scheduler.wait_for("Scheduler at:").split("Scheduler at:")[1].strip()
        assert address.startswith("tls://127.0.0.1:")
        home = folder / "workers"
        home.mkdir()
        for name in ("one", "two"):
            worker = Process([sys.executable, "-m", "distributed.cli.dask_worker", address,
                              "--nthreads", "1", "--name", name, "--no-dashboard",
                              "--local-directory", str(home), *tls], home, env)
            started.append(worker)
        for worker in started[1:]:
            worker.wait_for("Registered to:")
        yield address, certs
    finally:
        for process in reversed(started):
            process.stop()


USER_LAW = '''
from numba import njit
from {package}.gains import volts_per_newton_metre


@njit
def pd_torque(t, pos, vel, cur, params, state, u):
    """The PD of examples/user_controller/my_laws.py; params = [kp, kd, V per N m,
    targets (rad)]."""
    k = volts_per_newton_metre(params)
    for j in range(u.shape[0]):
        u[j] = k * (params[0] * (params[3 + j] - pos[j]) + params[1] * (0.0 - vel[j]))
'''

USER_SPEC = '''
[campaign]
base = "rrr3_user.toml"
duration = 1.0
samples = 2
seed = 5

[[axis]]
key = "controller.params"
values = [[150.0, 50.0, 0.1, 0.4, 0.8, 1.0], [300.0, 50.0, 0.1, 0.4, 0.8, 1.0]]

[[axis]]
key = "plant.m2"
relative = 0.1

[criteria]
peak_joint_rate = 30.0
peak_residual = 1e-9
'''


def user_project(folder: Path, package: str, helper: str) -> Path:
    """A user's project: a package ``package`` whose law (``package.pd:pd_torque``) takes
    its gain from the module ``helper`` (``package.gains``, inside the package, or a
    top-level module beside it), the base config rrr3_user.toml (examples/user_controller's
    with that law) and the spec campaign.toml."""
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text("")
    gains = "from numba import njit\n\n\n@njit\ndef volts_per_newton_metre(params):\n" \
            "    return params[2]\n"
    if helper == "inside":
        (folder / package / "gains.py").write_text(gains)
        (folder / package / "pd.py").write_text(USER_LAW.format(package=package))
    else:
        (folder / "gains_beside.py").write_text(gains)
        (folder / package / "pd.py").write_text(
            USER_LAW.format(package=package).replace(f"{package}.gains", "gains_beside"))
    base = (ROOT / "examples" / "user_controller" / "rrr3_my_pd.toml").read_text()
    (folder / "rrr3_user.toml").write_text(base.replace('"my_laws:pd_torque"',
                                                        f'"{package}.pd:pd_torque"'))
    (folder / "campaign.toml").write_text(USER_SPEC)
    return folder / "campaign.toml"


def hil_campaign(spec: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`hil campaign SPEC ARGS` as a user runs it, in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "hilrig.cli.main", "campaign", str(spec),
                           *args], cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.mark.system
def test_a_users_law_in_a_users_package_runs_on_a_hand_started_tls_cluster(
        tmp_path, tls_cluster, monkeypatch):
    """The law's package exists only in the user's folder (the client's current folder):
    the client sends it to both workers (campaign.code), each checks it builds the
    campaign, and every row is valid and equals the same scenario run here."""
    address, certs = tls_cluster
    spec_path = user_project(tmp_path / "project", "userlaws", helper="inside")
    out = tmp_path / "out"
    done = hil_campaign(spec_path, "--scheduler", address, "--tls-ca-file", certs["ca"],
                        "--tls-cert", certs["cert"], "--tls-key", certs["key"],
                        "--out", str(out), cwd=spec_path.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "campaign: 4 scenarios, 4 passed, 0 failed (100.0 % pass)" in done.stdout
    table = pq.read_table(out / "results.parquet").to_pylist()
    assert [row["id"] for row in table] == [0, 1, 2, 3]
    assert all(row["status"] == "ok" and row["passed"] for row in table)
    assert len({row["worker"] for row in table}) >= 1
    # the rows equal the scenarios run in this process from the user's own files
    monkeypatch.syspath_prepend(str(spec_path.parent))
    spec = load_spec(spec_path)
    for row in table:
        cfg = spec.config(spec.scenario(row["id"]))
        alone = measure(simulate(cfg).arrays, cfg, spec.settings)
        for name in ("peak_command", "peak_joint_rate", "peak_residual"):
            assert row[name] == alone[name], (row["id"], name)
        assert row["q_end"] == alone["q_end"]
        assert 0.0 < row["peak_command"] <= 48.0 and row["peak_residual"] < 1e-9


@pytest.mark.system
def test_a_law_whose_module_the_workers_cannot_import_is_refused_before_any_scenario(
        tmp_path, tls_cluster):
    """The law imports a top-level module beside its package, which is not sent: the
    workers' check refuses the campaign in one line, exit 2, before any scenario runs."""
    address, certs = tls_cluster
    spec_path = user_project(tmp_path / "project", "userlaws_beside", helper="beside")
    out = tmp_path / "out"
    done = hil_campaign(spec_path, "--scheduler", address, "--tls-ca-file", certs["ca"],
                        "--tls-cert", certs["cert"], "--tls-key", certs["key"],
                        "--out", str(out), cwd=spec_path.parent)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = stderr_lines(done.stderr)      # (a cold cache compiles the client's kernels)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"hil: worker {address[:len('tls://127.0.0.1:')]}")
    assert "cannot run the campaign: controller.law: cannot import 'userlaws_beside.pd': " \
           "No module named 'gains_beside'" in lines[0]
    assert not list((out / "parts").glob("*.parquet"))


ARM_SPEC = '''
[campaign]
base = "serial3_jam1"
duration = 0.5

[[axis]]
key = "faults.jam.joint"
values = [1, 2]
'''


@pytest.mark.parametrize("address, extra, message", [
    ("garbage", (), "--scheduler garbage: expected tls://HOST:PORT (the address `dask "
                    "scheduler` prints)"),
    ("tls://127.0.0.1", (), "--scheduler tls://127.0.0.1: expected tls://HOST:PORT"),
    ("http://127.0.0.1:8786", (), "--scheduler http://127.0.0.1:8786: expected tls://"),
    ("tcp://127.0.0.1:1", (), "--scheduler tcp://127.0.0.1:1: a tcp:// scheduler runs the "
                              "code of anyone who reaches it; start it with TLS"),
    ("tls://127.0.0.1:1", (), "--scheduler tls://127.0.0.1:1: give --tls-ca-file and "
                              "--tls-cert (or Dask's config distributed.comm.tls.ca-file"),
    ("tls://127.0.0.1:1", ("--tls-ca-file", "/nonexistent/ca.pem", "--tls-cert", "CERT"),
     "--tls-ca-file /nonexistent/ca.pem: cannot read: No such file or directory"),
    ("tls://127.0.0.1:1", ("--tls-ca-file", "CERT", "--tls-cert", "SPEC"),
     "--scheduler tls://127.0.0.1:1: the TLS files do not load:"),
    ("tls://127.0.0.1:1", ("--tls-ca-file", "CERT", "--tls-cert", "CERT", "--tls-key", "KEY"),
     "--scheduler tls://127.0.0.1:1: nothing answers at 127.0.0.1:1 (Connection refused)"),
    ("tcp://127.0.0.1:1", ("--insecure",),
     "--scheduler tcp://127.0.0.1:1: nothing answers at 127.0.0.1:1 (Connection refused)"),
])
def test_a_bad_scheduler_address_or_certificate_is_one_line_at_once(tmp_path, capsys, address,
                                                                    extra, message):
    """Before: --scheduler garbage printed a 60-line traceback."""
    spec = tmp_path / "arm.toml"
    spec.write_text(ARM_SPEC)
    certs = write_certificates(tmp_path)
    files = {"CERT": certs["cert"], "KEY": certs["key"], "SPEC": str(spec)}
    out = tmp_path / "out"
    started = time.perf_counter()
    status = cli.main(["campaign", str(spec), "--scheduler", address,
                       *(files.get(word, word) for word in extra), "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(f"hil: {message}") and err.count("\n") == 1, err
    assert time.perf_counter() - started < 30.0         # Dask gives up after 5 s
    assert not out.exists()


@pytest.mark.system
def test_a_tls_scheduler_refuses_a_client_of_another_authority_in_one_line(tmp_path, capsys,
                                                                          tls_cluster):
    address, _ = tls_cluster
    spec = tmp_path / "arm.toml"
    spec.write_text(ARM_SPEC)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    certs = write_certificates(theirs)            # certificates of another authority
    status = cli.main(["campaign", str(spec), "--scheduler", address, "--tls-ca-file",
                       certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"],
                       "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"hil: --scheduler {address}: cannot connect: ")
    assert err.rstrip().endswith("(is it a TLS scheduler of this CA?)")
