"""campaign.scenarios: a scenario's config resolved from the base's equals settings.config.resolve
of the base with the overrides applied, field for field, and fails with the same message."""
import tomllib

import pytest
from hilrig.errors import ConfigError
from hilrig.settings import builtin_configs
from hilrig.campaign.spec import load_spec
from hilrig.settings.config import apply_value, copied, locate, resolve
from hilrig.campaign.scenarios import ScenarioConfigs


def raw_config(name: str) -> dict:
    return tomllib.loads(locate(name).read_text(encoding="utf-8"))


def from_scratch(base_raw: dict, overrides) -> object:
    raw = copied(base_raw)
    for key, value in overrides:
        apply_value(raw, key, value)
    return resolve(raw)


def same_outcome(configs: ScenarioConfigs, base_raw: dict, overrides) -> None:
    """Equal configs (and equal dicts, so a value equal but of another type shows), or the
    same ConfigError message."""
    try:
        expected = from_scratch(base_raw, overrides)
    except ConfigError as exc:
        with pytest.raises(ConfigError) as got:
            configs.config(overrides)
        assert str(got.value) == str(exc)
        return
    got = configs.config(overrides)
    assert got == expected
    assert got.to_dict() == expected.to_dict()
    assert repr(got.to_dict()) == repr(expected.to_dict())   # ints stay ints, floats floats


@pytest.mark.parametrize("name", ["serial3_jams", "rrr3_gains_poses"])
def test_every_scenario_of_the_shipped_campaigns_equals_a_resolve_from_scratch(name):
    spec = load_spec(name)
    configs = ScenarioConfigs(spec.base_raw)
    assert configs.base == resolve(spec.base_raw)
    for sid in range(0, spec.count, max(1, spec.count // 150)):
        scenario = spec.scenario(sid)
        assert configs.config(scenario.values.items()) == spec.config(scenario), sid


ARM_OVERRIDES = [
    [("plant.mass", [9.5, 7.0, 4.5])],                                   # a plant list
    [("plant.motor.resistance", 2.5)],                                    # nested, scalar -> list
    [("plant.motor.gear_ratio", [50, 60, 70])],                           # ints in a float list
    [("plant.q0", [0.1, 0.2, 0.3]), ("plant.qd0", [0.0, 1.0, 0.0])],      # filled defaults
    [("controller.kp", [1.0, 2.0, 3.0]), ("controller.kp", [4.0, 5.0, 6.0])],  # last wins
    [("controller.type", "pd"), ("controller.target", [0.1, 0.2, 0.3])],  # structural
    [("controller.target", [0.1, 0.2, 0.3])],                             # open_loop: no target key
    [("faults.jam.joint", 2), ("faults.jam.t1", 1.5)],                    # the base's one jam
    [("faults.jam[0].duration", 0.2)],                                    # it, as a list
    [("faults.jam[1].joint", 3), ("faults.jam[1].t1", 4.0)],              # a second jam
    [("faults.jam[1].t1", 4.0)],                                          # ... without a joint
    [("faults.jam[2].joint", 3)],                                         # an index too far
    [("faults.jam.joint", 7)],                                            # a joint the arm lacks
    [("faults.jam.duration", -1.0)],
    [("sim.position_noise", 1e-3), ("sim.noise_seed", 4), ("sim.command_latency", 0.002)],
    [("sim.command_latency", 0.0015)],                                    # not whole steps
    [("sim.duration", 2.0), ("sim.dt", 0.002)],
    [("sim.dt", "fast")],                                                 # a bad type
    [("plant.mass", [9.0, 7.0])],                                         # other sizes
    [("plant.mass", [9.0, 7.0, -5.0])],                                   # a bad value
    [("plant.drive", "voltage")],                                         # filled output
    [("link.type", "zmq")],
    [("plant.colour", 3)],                                                # unknown key
    [("plant.motor", 3)],                                                 # a table as a value
    [("plant.motor.resistance.x", 3)],                                    # a value as a table
    [("input.voltage", [1.0, 2.0, 3.0])],                                 # a rule across keys
    [("safety.max_command", float("inf"))],
]


@pytest.mark.parametrize("overrides", ARM_OVERRIDES, ids=lambda o: ",".join(k for k, _ in o))
def test_each_kind_of_override_on_the_arm(overrides):
    base = raw_config("serial3_jam1")
    same_outcome(ScenarioConfigs(base), base, overrides)


def test_a_base_without_jams_and_one_with_a_list_of_jams():
    no_jam = raw_config("serial3_free")
    configs = ScenarioConfigs(no_jam)
    for overrides in ([("faults.jam.joint", 1), ("faults.jam.t1", 1.0)],
                      [("faults.jam[0].joint", 2)], [("faults.jam[1].joint", 2)]):
        same_outcome(configs, no_jam, overrides)
    listed = raw_config("serial3_jam1")
    listed["faults"]["jam"] = [listed["faults"]["jam"], {"joint": 3, "t1": 4.0}]
    configs = ScenarioConfigs(listed)
    for overrides in ([("faults.jam[1].t1", 5.0)], [("faults.jam.t1", 5.0)],
                      [("faults.jam[0].joint", 3), ("faults.jam[2].joint", 1)]):
        same_outcome(configs, listed, overrides)


def test_every_builtin_config_with_a_gain_and_a_length_changed():
    for name in builtin_configs.names():
        base = raw_config(name)
        configs = ScenarioConfigs(base)
        same_outcome(configs, base, [("sim.duration", 0.5)])
        same_outcome(configs, base, [("controller.kp", 10.0)])


def test_the_base_is_left_as_it_was():
    base = raw_config("serial3_jam1")
    configs = ScenarioConfigs(base)
    before = configs.base
    changed = configs.config([("plant.mass", [1.0, 2.0, 3.0]), ("faults.jam[1].joint", 2),
                              ("faults.jam[1].t1", 3.0), ("plant.motor.resistance", 9.0)])
    assert changed.plant.mass == (1.0, 2.0, 3.0) and len(changed.faults.jam) == 2
    assert configs.config([]) == before == resolve(base)


def test_leaf_overrides_are_not_resolved_from_scratch(monkeypatch):
    """What a campaign varies (values, nested values, jams) takes the short way."""
    base = raw_config("serial3_jam1")
    configs = ScenarioConfigs(base)
    expected = from_scratch(base, ARM_OVERRIDES[0] + ARM_OVERRIDES[1] + ARM_OVERRIDES[9])

    def refused(raw):
        raise AssertionError("resolved from scratch")

    monkeypatch.setattr("hilrig.campaign.scenarios.resolve", refused)
    assert configs.config(ARM_OVERRIDES[0] + ARM_OVERRIDES[1] + ARM_OVERRIDES[9]) == expected
    with pytest.raises(AssertionError, match="from scratch"):
        configs.config(ARM_OVERRIDES[5])     # controller.type: structural
