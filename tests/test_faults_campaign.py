"""Fault axes in campaigns (issue 24, item 4): a spec varies the fault kind (fault.kind)
and its trigger time (fault.t1); each scenario's row equals its own `hil sim` line's run,
and that line names the [[faults.KIND]] table the scenario ran."""
import math
import textwrap

import pyarrow.parquet as pq
import pytest
from hilrig.campaign.metrics import METRICS, measure
from hilrig.campaign.runner import open_client, run_campaign
from hilrig.campaign.spec import load_spec
from hilrig.errors import ConfigError
from hilrig.rt.sim import simulate

SPEC = """
[campaign]
base = "serial3_jam1"
duration = 1.5

[set]
plant.q0 = [0.0, 0.0, 0.0]
faults.jam = []
controller.type = "pd"
controller.kp = [2000.0, 1500.0, 800.0]
controller.kd = [200.0, 150.0, 80.0]
controller.target = [0.8, -0.5, 0.6]
controller.reference = "quintic"
controller.duration = 1.0
fault.joint = 2
fault.duration = 0.5
fault.sensor_bias.bias = 0.05
fault.effectiveness.factor = 0.3

[[axis]]
key = "fault.kind"
values = ["sensor_bias", "effectiveness"]

[[axis]]
key = "fault.t1"
values = [0.2, 0.6]

[metrics]
settle_time = 1.2
"""


def spec_file(tmp_path, text=SPEC):
    path = tmp_path / "faults.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_fault_kind_by_trigger_time_scenarios_name_their_table(tmp_path):
    spec = load_spec(spec_file(tmp_path))
    assert spec.count == 4
    lines = [spec.scenario(sid).overrides for sid in range(4)]
    assert lines[0] == ('faults.sensor_bias={joint = 2, duration = 0.5, bias = 0.05, '
                        't1 = 0.2}',)
    assert lines[3] == ('faults.effectiveness={joint = 2, duration = 0.5, factor = 0.3, '
                        't1 = 0.6}',)
    cfg = spec.config(spec.scenario(3))
    assert len(cfg.faults.effectiveness) == 1 and not cfg.faults.sensor_bias
    e = cfg.faults.effectiveness[0]
    assert (e.joint, e.t1, e.duration, e.factor) == (2, 0.6, 0.5, 0.3)
    bad = spec_file(tmp_path, SPEC.replace('"effectiveness"]', '"effectivness"]'))
    with pytest.raises(ConfigError, match="unknown key 'faults.effectivness'"):
        load_spec(bad)


@pytest.mark.system
def test_a_campaign_over_two_kinds_and_trigger_times_equals_their_single_runs(tmp_path):
    spec = load_spec(spec_file(tmp_path))
    client, cluster = open_client(workers=2)
    try:
        run_campaign(spec, tmp_path / "out", client, batch=2)
    finally:
        client.close()
        cluster.close()
    rows = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    assert [row["id"] for row in rows] == [0, 1, 2, 3]
    errors = set()
    for row in rows:
        scenario = spec.scenario(row["id"])
        assert row["fault.kind"] == scenario.values["fault.kind"]
        assert row["overrides"] == list(scenario.overrides)
        cfg = spec.config(scenario)
        alone = measure(simulate(cfg).arrays, cfg, spec.settings)
        for name in METRICS:
            assert row[name] == alone[name] or (math.isnan(row[name]) and
                                                math.isnan(alone[name])), (row["id"], name)
        errors.add(row["tracking_error"])
    assert len(errors) == 4            # every kind and time leaves its own trace
