"""hil campaign: specs, scenarios on a Dask LocalCluster of two worker processes, Parquet
results, a killed worker, --resume, and each row reproduced bit for bit by its hil sim line."""
from __future__ import annotations

import math
import os
import shlex
import signal
import sys
import textwrap
import time
import zipfile

import numpy as np
import pyarrow.parquet as pq
import pytest
from hilrig.errors import ConfigError
from hilrig.cli import main as cli
from hilrig.campaign.runner import INSTALL_HINT, open_client, run_campaign
from hilrig.campaign.metrics import METRICS, measure
from hilrig.campaign.results import done_ids, part_paths
from hilrig.campaign.spec import load_spec
from hilrig.settings.config import load
from hilrig.rt.sim import simulate
from rt_helpers import ROOT

# Paper 000's arm under computed-torque feed-forward, torque-driven, from hanging down to a
# target over 1 s: without a jam it tracks to ~1e-6 rad; a jam at 0.1 s blocks a joint far
# from its target, so a tracking-error bound of 0.01 rad fails exactly the jammed runs.
ARM = """
[campaign]
base = "serial3_jam1"
duration = {duration}
samples = 2
seed = 7
{extra}

[set]
plant.q0 = [0.0, 0.0, 0.0]
controller.type = "feedforward"
controller.kp = [2000.0, 1500.0, 800.0]
controller.kd = [200.0, 150.0, 80.0]
controller.target = [0.8, -0.5, 0.6]
controller.reference = "quintic"
controller.duration = 1.0

[[axis]]
key = "faults.jam.joint"
values = [1, 2, 3]

[[axis]]
key = "faults.jam.t1"
values = [0.1, 50.0]          # 50 s: after the run's end, no jam

[[axis]]
key = "plant.mass"
relative = 0.02

[metrics]
settle_time = 1.5

[criteria]
tracking_error = 0.01
peak_joint_rate = 5.0
"""


def write_spec(tmp_path, text=ARM, name="arm.toml", **fields):
    fields.setdefault("duration", 2.0)
    fields.setdefault("extra", "")
    path = tmp_path / name
    path.write_text(textwrap.dedent(text.format(**fields)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of two single-threaded worker processes (campaign.runner.open_client)."""
    client, cluster = open_client(workers=2)
    yield client
    client.close()
    cluster.close()


def same(a, b) -> bool:
    """Equal bit for bit (NaN equal to NaN)."""
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def by_id(table) -> dict:
    return {row["id"]: row for row in table.to_pylist()}


# -- the spec ------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (("[[axis]]\nkey = \"faults.jam.joint\"", "[[axis]]\nkey = \"plant.mas\""),
     "axis 'plant.mas' = 1: unknown key 'plant.mas' (did you mean 'plant.mass'?)"),
    (("values = [1, 2, 3]", "values = []"),
     "axis 'faults.jam.joint': values is empty (an axis needs at least one value)"),
    (("values = [1, 2, 3]", "values = [1, 2, 4]"),
     "axis 'faults.jam.joint' = 4: faults.jam.joint: must be 1..3, got 4"),
    (("tracking_error = 0.01", "trackng_error = 0.01"),
     "criteria.trackng_error: no such metric (did you mean 'tracking_error'?)"),
    (("tracking_error = 0.01", "peak_residual = 1e-9"),
     "criteria.peak_residual: is not a row metric of plant.model = 'serial_arm' (scenario 0)"),
    (("seed = 7", "sede = 7"), "unknown key 'campaign.sede' (did you mean 'campaign.seed'?)"),
    (("relative = 0.02", "relative = 2.0"),
     "axis 'plant.mass': relative: expected a fraction between 0 and 1 (0.1: +-10 %), got 2.0"),
    (("settle_time = 1.5", "settle_time = 2.5"),
     "metrics.settle_time: 2.5 s is not before the end of the run (sim.duration = 2.0 s)"),
    (("base = \"serial3_jam1\"", "base = \"serial3_jamm1\""),
     "campaign.base: serial3_jamm1 is neither a file beside the spec nor a built-in config"),
])
def test_a_bad_spec_is_one_line_naming_the_key(tmp_path, change, message):
    path = write_spec(tmp_path, ARM.replace(*change))
    with pytest.raises(ConfigError) as caught:
        load_spec(path)
    assert str(caught.value).startswith(f"{path}: {message}")
    assert "\n" not in str(caught.value)


def test_hil_campaign_refuses_a_bad_spec_before_any_task(tmp_path, capsys):
    path = write_spec(tmp_path, ARM.replace("tracking_error = 0.01", "no_metric = 1.0"))
    out = tmp_path / "out"
    started = time.perf_counter()
    assert cli.main(["campaign", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"hil: config error: {path}: criteria.no_metric: no such metric (metrics: " \
                  f"{', '.join(METRICS)})\n"
    assert not out.exists()                          # no cluster, no output
    assert time.perf_counter() - started < 10.0


def test_without_dask_hil_campaign_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)     # as if not installed
    assert cli.main(["campaign", str(write_spec(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hil: {INSTALL_HINT}") and err.count("\n") == 1


def test_scenarios_are_the_grid_times_the_draws_and_their_sim_line_is_their_config(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    assert spec.count == 3 * 2 * 2
    base_mass = np.array(load("serial3_jam1").plant.mass)
    seen = set()
    for sid in range(spec.count):
        scenario = spec.scenario(sid)
        assert scenario == spec.scenario(sid)                # a function of the id alone
        joint, t1 = scenario.values["faults.jam.joint"], scenario.values["faults.jam.t1"]
        assert (joint, t1) == ([1, 2, 3][sid // 4], [0.1, 50.0][sid // 2 % 2])
        mass = np.array(scenario.values["plant.mass"])
        assert np.all(np.abs(mass / base_mass - 1.0) <= 0.02)
        seen.add(tuple(mass))
        argv = shlex.split(spec.sim_line(scenario, "x.npz"))
        assert argv[:3] == ["hil", "sim", "serial3_jam1"]
        overrides = [argv[i + 1] for i, word in enumerate(argv) if word == "--set"]
        assert load("serial3_jam1", overrides) == spec.config(scenario)
    assert len(seen) == spec.count                           # every draw its own


def test_the_spec_of_the_docs_is_a_valid_spec(tmp_path):
    text = (ROOT / "docs" / "CAMPAIGNS.md").read_text(encoding="utf-8")
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    spec = load_spec(write_spec(tmp_path, example.replace("{", "{{").replace("}", "}}")))
    assert spec.count == 3 * 16 * 2
    cfg = spec.config(spec.scenario(5))
    assert [jam.joint for jam in cfg.faults.jam] == [1, 3] and cfg.sim.position_noise > 0


@pytest.mark.parametrize("name", ["serial3_jams", "rrr3_gains_poses"])
def test_the_example_specs_load_by_name_and_their_first_scenario_runs(name):
    spec = load_spec(name)
    assert spec.path.resolve() == ROOT / "configs" / "campaigns" / f"{name}.toml"
    cfg = spec.config(spec.scenario(0))
    metrics = measure(simulate(cfg).arrays, cfg, spec.settings)
    assert all(np.isfinite(metrics[criterion]) or criterion == "reach_time"
               for criterion in spec.criteria)


def test_a_scenario_its_overrides_make_invalid_is_a_failed_row_not_a_failed_task(tmp_path):
    from hilrig.campaign.runner import job_of
    from hilrig.campaign.batch import run_scenario
    from hilrig.campaign.scenarios import ScenarioConfigs

    spec = load_spec(write_spec(tmp_path))
    row = run_scenario(job_of(spec), ScenarioConfigs(spec.base_raw), 3,
                       [("faults.jam.joint", 7)])
    assert (row["id"], row["status"], row["passed"], row["failed"]) == \
        (3, "config_error", False, "config")
    assert row["error"] == "faults.jam.joint: must be 1..3, got 7"
    assert all(math.isnan(row[name]) for name in METRICS)


def test_a_batch_of_unlike_scenarios_gives_the_rows_each_gives_run_alone(tmp_path):
    """One batch (campaign.batch.run_batch) of scenarios of several compiled groups: PD
    beside feed-forward, another run length, measurement noise, a command latency, a run
    whose state goes invalid, a refused config, the accurate integrator (run alone). Each
    row equals the row of the same scenario run alone through rt.sim.simulate and measure
    (run_scenario), bit for bit."""
    from hilrig.campaign.runner import job_of
    from hilrig.campaign.batch import run_batch, run_scenario
    from hilrig.campaign.scenarios import ScenarioConfigs

    spec = load_spec(write_spec(tmp_path))
    job, configs = job_of(spec), ScenarioConfigs(spec.base_raw)
    unstable = [("safety.max_command", float("inf")), ("controller.kp", 1e12)]
    scenarios = [(0, [("faults.jam.t1", 0.5)]), (1, [("controller.type", "pd")]),
                 (2, [("sim.duration", 1.0)]), (3, [("faults.jam.joint", 2)]),
                 (4, [("sim.position_noise", 1e-3), ("sim.velocity_noise", 1e-2)]),
                 (5, [("sim.command_latency", 0.003)]), (6, unstable),
                 (7, [("faults.jam.joint", 7)]), (8, [("controller.type", "pd")]),
                 (9, [("sim.integrator", "accurate"), ("sim.duration", 0.2)])]
    columns = run_batch(job, scenarios)
    assert columns["id"] == [sid for sid, _ in scenarios]
    statuses = {}
    for index, (sid, values) in enumerate(scenarios):
        row = {name: column[index] for name, column in columns.items()}
        alone = run_scenario(job, configs, sid, values)
        for name in (*METRICS, "q_end", "passed", "failed", "status", "error", "simulated_s"):
            assert same(row[name], alone[name]), (sid, name, row[name], alone[name])
        statuses[sid] = row["status"]
    assert statuses[6] == "invalid_state" and statuses[7] == "config_error"
    assert [statuses[sid] for sid in (0, 1, 2, 3, 4, 5, 8, 9)] == ["ok"] * 8


# -- on a cluster --------------------------------------------------------------------------

@pytest.mark.system
def test_a_small_campaign_holds_every_scenario_once_with_the_metrics_of_single_runs(
        tmp_path, client):
    spec = load_spec(write_spec(tmp_path))
    run = run_campaign(spec, tmp_path / "out", client, batch=3)
    table = pq.read_table(tmp_path / "out" / "results.parquet")
    assert table.schema == run.table.schema and table["id"] == run.table["id"]
    assert table["id"].to_pylist() == list(range(spec.count))
    assert sorted(run.ran) == list(range(spec.count)) and run.skipped == 0
    assert len(part_paths(tmp_path / "out")) == 4            # 12 scenarios in batches of 3
    for row in table.to_pylist():
        scenario = spec.scenario(row["id"])
        for key, value in scenario.values.items():
            assert row[key] == value
        cfg = spec.config(scenario)
        alone = measure(simulate(cfg).arrays, cfg, spec.settings)
        for name in METRICS:
            assert same(row[name], alone[name]), (row["id"], name)
        assert row["q_end"] == alone["q_end"]
        # pass/fail is the criteria on the metrics; the jams at 0.1 s fail, the others pass
        holds = [name for name, bound in spec.criteria.items() if not row[name] <= bound]
        assert row["passed"] == (not holds) and row["failed"] == ",".join(holds)
        jammed = scenario.values["faults.jam.t1"] < spec.duration
        assert row["passed"] == (not jammed) and row["status"] == "ok"
        if jammed:    # the blocked joint stays where it stopped, away from its target
            joint = scenario.values["faults.jam.joint"] - 1
            blocked = abs(cfg.controller.target[joint] - row["q_end"][joint])
            assert row["tracking_error"] == blocked == row["final_error"] > 0.05
            assert row["failed"] == "tracking_error" and row["reach_time"] == math.inf
        else:
            assert row["tracking_error"] < 1e-4 and row["reach_time"] < 1.5


@pytest.mark.system
def test_a_worker_killed_mid_campaign_leaves_every_scenario_once(tmp_path, client):
    """The batch running on the killed worker is run again elsewhere (Dask), once."""
    spec = load_spec(write_spec(tmp_path, duration=10.0, extra="batch = 3"))
    killed = {}

    def kill_a_busy_worker(ids):
        if killed:
            return
        for address, keys in client.processing().items():
            if keys:
                pid = client.run(os.getpid, workers=[address])[address]
                os.kill(pid, signal.SIGKILL)
                killed.update(pid=pid, keys=set(keys))
                return

    run = run_campaign(spec, tmp_path / "out", client, batch_done=kill_a_busy_worker)
    assert killed, "no worker was busy when the first batch came back"
    assert run.table["id"].to_pylist() == list(range(spec.count))
    assert len(done_ids(tmp_path / "out")) == spec.count
    rerun = [row for row in run.table.to_pylist()
             if any(key.startswith(f"hilrig-batch-{row['id'] - row['id'] % 3}-")
                    for key in killed["keys"])]
    assert rerun and all(not row["worker"].endswith(f":{killed['pid']}") for row in rerun)
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)


@pytest.mark.system
def test_resume_runs_only_the_scenarios_an_interrupted_campaign_missed(tmp_path, client):
    spec = load_spec(write_spec(tmp_path, extra="batch = 2"))
    out = tmp_path / "out"
    calls = []

    def interrupt_after_two_batches(ids):
        calls.append(ids)
        if len(calls) == 2:
            raise KeyboardInterrupt

    first = run_campaign(spec, out, client, batch_done=interrupt_after_two_batches)
    assert first.interrupted and first.table is None
    done = done_ids(out)
    assert done == {sid for ids in calls for sid in ids} and len(done) == 4
    kept = {path: path.read_bytes() for path in part_paths(out)}
    with pytest.raises(ConfigError, match="holds 4 of 12 scenarios of this campaign; "
                                          "--resume runs the rest"):
        run_campaign(spec, out, client)
    second = run_campaign(spec, out, client, resume=True)
    assert sorted(second.ran) == sorted(set(range(spec.count)) - done)
    assert second.skipped == 4
    assert all(path.read_bytes() == data for path, data in kept.items())
    assert second.table["id"].to_pylist() == list(range(spec.count))
    other = write_spec(tmp_path, ARM.replace("seed = 7", "seed = 8"), name="other.toml")
    with pytest.raises(ConfigError, match="with another spec or base config"):
        run_campaign(load_spec(other), out, client, resume=True)


def tls_options(client, folder) -> list:
    """--tls-* options that admit a client to ``client``'s cluster: its in-memory
    certificates (Security.temporary) written to files."""
    options = []
    for option, text in (("--tls-ca-file", client.security.tls_ca_file),
                         ("--tls-cert", client.security.tls_client_cert),
                         ("--tls-key", client.security.tls_client_key)):
        path = folder / f"{option[2:]}.pem"
        path.write_text(text)
        options += [option, str(path)]
    return options


@pytest.mark.system
def test_hil_campaign_prints_a_failing_scenarios_hil_sim_line_which_equals_its_row(
        tmp_path, client, capsys):
    """The command end to end (on the cluster's scheduler, over TLS): a summary whose
    lines fit 100 columns but the one `hil sim` line of the worst failing scenario (before,
    20 lines of ~550 characters); every failing scenario's line in failing.txt; that
    line, run by `hil sim`, gives its row bit for bit."""
    spec_path = write_spec(tmp_path)
    out = tmp_path / "out"
    status = cli.main(["campaign", str(spec_path), "--scheduler", client.scheduler.address,
                       *tls_options(client, tmp_path), "--out", str(out)])
    printed = capsys.readouterr()
    assert status == 1, printed.out + printed.err            # some scenarios failed
    assert "campaign: 12/12 scenarios (100 %)" in printed.err
    assert "arm: 12 scenarios, 6 passed, 6 failed (50.0 % pass)" in printed.out
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = [line.strip() for line in printed.out.splitlines()
             if line.strip().startswith("hil sim ")]
    assert len(lines) == 1
    assert all(len(line) <= 100 for line in printed.out.splitlines()
               if not line.strip().startswith("hil sim ") and str(tmp_path) not in line)
    failing = (out / "failing.txt").read_text().splitlines()
    assert len(failing) == 6 and lines[0] in failing
    assert (out / "summary.txt").read_text() in printed.out
    rows = by_id(pq.read_table(out / "results.parquet"))
    argv = shlex.split(lines[0])
    sid = int(argv[-1].rsplit("-", 1)[1].removesuffix(".npz"))
    assert cli.main(argv[1:]) == 0
    npz = np.load(argv[-1])
    arrays = {name: npz[name] for name in npz.files}
    overrides = [argv[i + 1] for i, word in enumerate(argv) if word == "--set"]
    cfg = load(argv[2], overrides)
    alone = measure(arrays, cfg, load_spec(spec_path).settings)
    for name in METRICS:
        assert same(rows[sid][name], alone[name]), name
    assert rows[sid]["q_end"] == alone["q_end"] and not rows[sid]["passed"]
    # the results are not overwritten unasked
    summary = (out / "summary.txt").read_bytes()
    capsys.readouterr()
    assert cli.main(["campaign", str(spec_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"hil: config error: --out {out}: holds 12 of 12 scenarios of this " \
                  "campaign; --resume runs the rest, --force starts afresh, or choose " \
                  "another --out\n"
    assert (out / "summary.txt").read_bytes() == summary


@pytest.mark.system
def test_the_wheel_holds_the_example_specs(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    specs = sorted((ROOT / "configs" / "campaigns").glob("*.toml"))
    assert specs and {f"hilrig/configs/campaigns/{path.name}" for path in specs} <= names


@pytest.mark.parametrize("name", ["serial3_jams", "rrr3_gains_poses"])
@pytest.mark.system
def test_the_shipped_campaigns_hold_their_criteria(tmp_path, client, name):
    """Before, both failed by their specs' mistakes: serial3_jams bounded the healthy
    joints' error below the PD's own static error under gravity (0.056 rad without a jam)
    and counted the jammed joint's drive, which pushes against the blocked joint, in the
    torque bound; rrr3_gains_poses started the paper's pose 2 pi off on one motor (the PD
    turned it 4.0 rad instead of 2.3), judged 400 V commands against a 48 V supply that
    the model did not have, and had gains that cannot settle by the bound. Each row also
    says what the criteria stand on."""
    spec = load_spec(name)
    run = run_campaign(spec, tmp_path / "out", client)
    rows = run.table.to_pylist()
    assert len(rows) == spec.count
    assert all(row["status"] == "ok" and row["passed"] for row in rows), \
        [(row["id"], row["failed"]) for row in rows if not row["passed"]][:5]
    if name == "serial3_jams":
        for row in rows:
            assert row["peak_command"] <= 400.0            # the drives' torque, the clamp
            late = row["faults.jam.t1"] >= 2.0             # after the move: the static error
            if late and row["controller.type"] == "pd" and row["faults.jam.joint"] != 1:
                assert 0.05 < row["healthy_tracking_error"] < 0.06
            if late and row["controller.type"] == "feedforward":
                assert row["healthy_tracking_error"] < 1e-3
    else:
        assert all(row["peak_command"] <= 48.0 and row["peak_residual"] < 1e-9
                   for row in rows)
        assert sum(row["det_phi_x_sign_changes"] > 0 for row in rows) > spec.count / 2
        paper = [row for row in rows if row["plant.q0"][2] == 3.267501
                 and (row["controller.kp"], row["controller.kd"]) == (150.0, 50.0)]
        assert len(paper) == 2 and all(1.9 < row["reach_time"] < 2.2 for row in paper)


@pytest.mark.system
def test_the_example_campaign_of_a_users_law_runs_on_workers_that_lack_it(
        tmp_path, client, monkeypatch):
    """examples/user_controller/my_pd_campaign.toml names the user's law by a module
    beside it (my_laws.py), which the client finds in its current folder and the workers,
    elsewhere, do not have: the campaign sends it (campaign.code) and every row is
    the run of that law."""
    folder = ROOT / "examples" / "user_controller"
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))     # the client's import from here
    assert str(folder) not in client.run(os.getcwd).values()
    spec = load_spec("my_pd_campaign.toml")
    run = run_campaign(spec, tmp_path / "out", client)
    rows = run.table.to_pylist()
    assert len(rows) == 6 and all(row["status"] == "ok" and row["passed"] for row in rows)
    assert not any(client.run(lambda: "my_laws" in sys.modules).values())   # removed after
    cfg = spec.config(spec.scenario(0))
    alone = measure(simulate(cfg).arrays, cfg, spec.settings)
    assert rows[0]["q_end"] == alone["q_end"] and rows[0]["peak_command"] == \
        alone["peak_command"]


# -- the 3RRR's metrics from the rows ----------------------------------------------------

def test_a_3rrr_scenario_in_a_campaign_has_the_metrics_of_its_single_run():
    """A campaign runs the 3RRR without storing its per-row diagnostics and measures the
    residual and the determinants' sign changes from the rows (plant.stepping.row_metrics): the same
    values as hil sim's stored diagnostics give; the second scenario of the batch records
    into the rows the first one did."""
    from hilrig.campaign.runner import job_of
    from hilrig.campaign.batch import run_batch

    spec = load_spec("rrr3_gains_poses")
    ids = (spec.count - 1, 0)
    columns = run_batch(job_of(spec), [(sid, spec.scenario(sid).values.items()) for sid in ids])
    assert columns["id"] == list(ids)
    for index, sid in enumerate(ids):
        row = {name: values[index] for name, values in columns.items()}
        cfg = spec.config(spec.scenario(sid))
        alone = measure(simulate(cfg).arrays, cfg, spec.settings)
        for name in METRICS:
            assert same(row[name], alone[name]), (sid, name)
        assert 0.0 <= row["peak_residual"] < 1e-6
        assert row["q_end"] == alone["q_end"]


def test_the_3rrr_row_metrics_count_as_numpy_counts_the_stored_diagnostics():
    """plant.stepping.row_metrics of the 3RRR against numpy on per-row diagnostics: the run's rows, the rows again
    backwards, a NaN row (a run gone invalid; its determinants count as a change of sign
    either side, the residual's maximum is NaN) and a few rows after it."""
    from dataclasses import replace

    from hilrig.plant import rrr3
    from hilrig.plant.stepping import row_metrics as rrr3_metrics   # dispatches to the 3RRR

    cfg = load("rrr3_pd")
    cfg = cfg.replace(sim=replace(cfg.sim, duration=0.5))
    run = simulate(cfg)
    params, q = run.plant.params, run.arrays["q"]
    scratch = np.zeros((3, rrr3.NQ))

    def numpy_metrics(rows):
        residual = [rrr3.residual(params, row, scratch) for row in rows]
        changes = []
        for det in (lambda row: rrr3.det_phi_x(params, row, scratch),
                    lambda row: rrr3.det_phi_theta(params, row)):
            signs = np.sign([det(row) for row in rows])
            signs = signs[signs != 0.0]
            changes.append(float(np.count_nonzero(signs[1:] != signs[:-1])))
        return [float(np.max(residual))] + changes

    stored = run.arrays
    assert numpy_metrics(q)[0] == stored["residual"].max()
    broken = np.vstack([q, q[::-1], np.full((1, q.shape[1]), np.nan), q[:5]])
    for rows in (q, broken):
        found = np.zeros(3)
        rrr3_metrics(params, rows, scratch, found)
        expected = numpy_metrics(rows)
        assert all(same(float(a), b) for a, b in zip(found, expected)), (found, expected)
    assert math.isnan(found[0]) and found[1] >= 2.0 and found[2] >= 2.0


# -- what --out holds, and specs too big to run -------------------------------------------

def test_out_is_never_overwritten_unasked(tmp_path):
    """Before: --out overwrote an existing summary.txt. Now a folder that holds files but
    no campaign, or results of this one, is refused unless --resume or --force; --force
    removes only what a campaign writes."""
    from hilrig.campaign.results import claim

    spec = load_spec(write_spec(tmp_path))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "summary.txt").write_text("someone's notes\n")
    (theirs / "keep.txt").write_text("keep\n")
    with pytest.raises(ConfigError, match=r"holds files but no campaign; choose another "
                                          r"--out, or --force to write this campaign into it"):
        claim(theirs, spec, resume=True)
    assert (theirs / "summary.txt").read_text() == "someone's notes\n"
    with pytest.raises(ConfigError, match="--resume keeps what --out holds, --force "
                                          "replaces it: not both"):
        claim(theirs, spec, resume=True, force=True)
    assert claim(theirs, spec, resume=False, force=True) == set()
    assert not (theirs / "summary.txt").exists() and (theirs / "keep.txt").exists()
    assert (theirs / "campaign.json").is_file()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match="a-file: is not a folder"):
        claim(tmp_path / "a-file", spec, resume=False)


def test_hil_campaign_refuses_a_used_out_before_starting_a_cluster(tmp_path, capsys):
    spec = write_spec(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.txt").write_text("an earlier summary\n")
    assert cli.main(["campaign", str(spec), "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"hil: config error: --out {out}: holds files but no " \
                                      "campaign; choose another --out, or --force to write " \
                                      "this campaign into it\n"
    assert (out / "summary.txt").read_text() == "an earlier summary\n"
    assert sorted(path.name for path in out.iterdir()) == ["summary.txt"]


@pytest.mark.system
def test_resume_over_a_damaged_part_or_manifest_is_one_line(tmp_path, client, capsys):
    """Before: a traceback. Now the damaged file is named; a part deleted is run again."""
    spec_path = write_spec(tmp_path, extra="batch = 4")
    spec = load_spec(spec_path)
    out = tmp_path / "out"
    run_campaign(spec, out, client)
    part = part_paths(out)[1]
    rows = pq.read_table(part).to_pylist()
    part.write_bytes(part.read_bytes()[:200])             # cut short, as by a full disk
    resume = ["campaign", str(spec_path), "--out", str(out), "--resume"]
    assert cli.main(resume) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hil: config error: --out {out}: parts/{part.name} is damaged (")
    assert err.endswith("); delete it and --resume runs its scenarios again\n")
    assert err.count("\n") == 1
    part.unlink()
    again = run_campaign(spec, out, client, resume=True)
    assert sorted(again.ran) == [row["id"] for row in rows] == [4, 5, 6, 7]
    assert by_id(again.table)[5]["peak_command"] == rows[1]["peak_command"]
    (out / "campaign.json").write_text("{\"digest\": ")    # cut short
    assert cli.main(resume) == 2
    assert capsys.readouterr().err == f"hil: config error: --out {out}: campaign.json is " \
                                      "damaged; remove the folder or choose another --out\n"


SPEC_HEAD = '[campaign]\nbase = "serial3_jam1"\nduration = 1.0\n'


@pytest.mark.parametrize("body, message", [
    ('[[axis]]\nkey = "faults.jam.joint"\nvalues = [' + "1, " * 200_000 + "2]\n",
     "axis 'faults.jam.joint': 200,001 values; at most 10,000 per axis (a random axis, "
     "'uniform', samples a range)"),
    ('[[axis]]\nkey = "faults.jam.t1"\nlinspace = [0.1, 0.9, 1000000000]\n',
     "axis 'faults.jam.t1': linspace of 1,000,000,000 values; at most 10,000 per axis"),
    ("".join(f'[[axis]]\nkey = "{key}"\nlinspace = [0.1, 0.5, 1000]\n'
             for key in ("faults.jam.t1", "faults.jam.duration", "sim.position_noise",
                         "sim.velocity_noise", "plant.gravity")),
     "1,000,000,000,000,000 scenarios (1000 x 1000 x 1000 x 1000 x 1000 x 1); a campaign "
     "runs at most 2,000,000: split it into several specs"),
    ('samples = 100000000000000000000\n[[axis]]\nkey = "sim.position_noise"\n'
     'uniform = [0.0, 0.001]\n',
     "campaign.samples: at most 2,000,000, got 100,000,000,000,000,000,000"),
    ('[[axis]]\nkey = "faults.jam.t1"\nvalues = [' + "0.123456789012345, " * 70_000 + "1.0]\n",
     "larger than 1 MB: not a spec"),
])
def test_a_spec_too_big_to_run_is_one_line_before_any_check(tmp_path, body, message):
    """Before: a 200,000-value axis spent 400 s in checks, a huge grid ended in
    MemoryError. Now each is refused at once, by the size it asks for."""
    path = tmp_path / "big.toml"
    path.write_text(SPEC_HEAD + body)
    with pytest.raises(ConfigError) as caught:
        load_spec(path)
    assert str(caught.value).startswith(f"{path}: {message}")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("path", ["/dev/zero", "/tmp"])
def test_a_spec_that_is_not_a_file_is_one_line(path):
    with pytest.raises(ConfigError, match=f"^{path}: not a regular file$"):
        load_spec(path)
