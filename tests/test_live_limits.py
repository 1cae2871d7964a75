"""Live safety limits only come down, and a lowered bound holds at once (issue 28, item
9: a stranger raised `safety.max_command` from 400 V to 1e9 V; a new 2 V limit was
exceeded for 3.65 s while the slew limit walked the command down)."""
from __future__ import annotations

import numpy as np
import pytest
from hilrig.errors import ConfigError
from hilrig.live.params import LiveParameters
from hilrig.rt.session import Session
from hilrig.settings.config import load

from rt_helpers import read_complete

SLEW = 100.0        # V/s: 0.1 V per 1 ms tick


@pytest.mark.slow
def test_a_lowered_max_command_holds_from_its_tick_and_raising_is_refused(tmp_path):
    """rrr3_pd under a 100 V/s slew limit: at 0.1 s its command is ~10 V; lowering
    max_command to 2 V bounds every later command by 2 V from the acknowledged tick on
    (before, the slew limit kept it above for ~80 ticks); raising it above the run's
    400 V, or the slew limit above its 100 V/s, is refused with the reason."""
    cfg = load("rrr3_pd", ["sim.duration=0.4", f"safety.max_slew={SLEW}", "loop.spin=0.0001"])
    live = LiveParameters()
    session = Session(cfg, tmp_path / "run.mcap", hooks=[live])
    outcome = {}

    def change(s):
        if outcome or s.mail[9] < 100:          # M_TICK
            return
        for key, value in (("safety.max_command", 1e9), ("safety.max_slew", 2 * SLEW)):
            try:
                live.change({key: value}, source="test")
            except ConfigError as exc:
                outcome[key] = str(exc)
        outcome["ack"] = live.change({"safety.max_command": 2.0}, source="test")

    result = session.run(on_tick=change)
    assert result.status == "ok", result.reason
    assert outcome["safety.max_command"] == (
        "safety.max_command: a live change may only lower a safety limit (axis 1: 1e+09 V "
        "asked, the run started with 400)")
    assert outcome["safety.max_slew"] == (
        "safety.max_slew: a live change may only lower a safety limit (axis 1: 200 V/s "
        "asked, the run started with 100)")
    tick = outcome["ack"].tick
    arrays, events, _, _ = read_complete(tmp_path / "run.mcap")
    u = arrays["u"]
    assert np.abs(u[tick - 1]).max() > 5.0          # the held command was well above 2 V
    assert np.abs(u[tick:]).max() <= 2.0
    assert [e["changes"] for e in events if e["kind"] == "param"] == [
        {"safety.max_command": [2.0, 2.0, 2.0]}]
    refused = [e for e in events if e["kind"] == "param_refused"]     # at most one a second
    assert refused and "may only lower a safety limit" in refused[0]["reason"]
