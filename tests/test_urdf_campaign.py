"""A campaign over the Panda (configs/campaigns/panda_jams.toml: jammed joint x jam instant
x payload mass, issue 23 item 6) on a real Dask cluster: every row equals its single run
(rt.sim.simulate, what `hil sim` runs) bit for bit, and the criteria hold."""
import math

import numpy as np
import pytest
from hilrig.campaign.metrics import METRICS, measure
from hilrig.campaign.runner import open_client, run_campaign
from hilrig.campaign.spec import load_spec
from hilrig.rt.sim import simulate


def same(a, b) -> bool:
    """Equal bit for bit (NaN equal to NaN)."""
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.system
def test_the_panda_campaign_rows_equal_their_single_runs(tmp_path):
    """All 36 scenarios pass (the healthy joints within 0.02 rad of their targets, no
    joint faster than 2 rad/s); plant.payload is an axis whose value the row keeps and
    which changes the run (the drives' peak command grows with the payload); rows of a
    jammed, loaded scenario and of a free, unloaded one equal their single runs."""
    spec = load_spec("panda_jams")
    assert "plant.payload" in [axis.key for axis in spec.axes] and spec.count == 36
    client, cluster = open_client(workers=2)
    try:
        rows = run_campaign(spec, tmp_path / "out", client).table.to_pylist()
    finally:
        client.close()
        cluster.close()
    assert len(rows) == 36
    assert all(row["status"] == "ok" and row["passed"] for row in rows), \
        [(row["id"], row["failed"]) for row in rows if not row["passed"]]
    by_values = {(row["faults.jam.joint"], row["faults.jam.t1"], row["plant.payload"][0]): row
                 for row in rows}
    for jam in ((4, 0.8), (2, 50.0)):
        peaks = [by_values[(*jam, mass)]["peak_command"] for mass in (0.0, 1.5, 3.0)]
        assert peaks[0] < peaks[1] < peaks[2], (jam, peaks)
    for key in ((4, 0.8, 3.0), (2, 50.0, 0.0)):
        row = by_values[key]
        scenario = spec.scenario(row["id"])
        cfg = spec.config(scenario)
        assert cfg.plant.payload[0] == key[2]
        alone = measure(simulate(cfg).arrays, cfg, spec.settings)
        for name in METRICS:
            assert same(row[name], alone[name]), (key, name, row[name], alone[name])
        assert row["q_end"] == alone["q_end"]
    jammed = by_values[(4, 0.8, 3.0)]
    assert abs(jammed["q_end"][3] - spec.config(spec.scenario(jammed["id"]))
               .controller.target[3]) > 0.1          # joint 4 blocked short of its target
    assert np.isfinite(jammed["healthy_tracking_error"])
