"""Scenario configs: loading, ``--set`` overrides, validation messages, defaults, JSON meta."""
from __future__ import annotations

import dataclasses
import json
import pickle
import re
from pathlib import Path

import pytest
from hilrig.settings.config import ConfigError, apply_override, load, parse_value, resolve
from hilrig.telemetry.recorder import to_json

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
CONFIG_FILES = sorted(CONFIGS.glob("*.toml"))
SERIAL_FREE = CONFIGS / "serial3_free.toml"
SERIAL_JAM1 = CONFIGS / "serial3_jam1.toml"
RRR3_FORWARD = CONFIGS / "rrr3_forward.toml"
RRR3_PD = CONFIGS / "rrr3_pd.toml"


def config_error(path, overrides=()) -> str:
    """Load and return the ConfigError message (the test fails if loading succeeds)."""
    with pytest.raises(ConfigError) as info:
        load(path, list(overrides))
    return str(info.value)


def jams(cfg) -> list[dict]:
    """The resolved config's faults.jam as dicts."""
    return [dataclasses.asdict(jam) for jam in cfg.faults.jam]


def write(tmp_path: Path, text: str, name: str = "cfg.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the shipped configs ----------------------------------------------------------

def test_configs_directory_has_the_paper_scenarios():
    names = {p.name for p in CONFIG_FILES}
    assert {"serial3_free.toml", "serial3_jam1.toml", "serial3_jam2.toml",
            "rrr3_forward.toml", "rrr3_pd.toml"} <= names


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_every_config_loads_with_the_documented_keys(path):
    cfg = load(path)
    plant, ctrl, inp = cfg.plant, cfg.controller, cfg.input
    from hilrig.plant.factory import plant_model
    from hilrig.schema import plain
    nq, nact = plant_model(plant.model).sizes(plain(plant))
    assert len(plant.q0) == nq
    assert len(plant.qd0) == nq
    assert all(isinstance(v, float) for v in plant.q0 + plant.qd0)
    if plant.model == "serial_arm":
        assert len(plant.damping) == nq
    assert len(ctrl.kp) == nact and len(ctrl.kd) == nact
    if ctrl.type in ("open_loop", "pd", "feedforward"):
        assert hasattr(ctrl, "target")
    assert hasattr(inp, "voltage") and hasattr(inp, "torque")
    assert isinstance(cfg.faults.jam, tuple)
    for jam in jams(cfg):
        assert set(jam) == {"joint", "t1", "duration"}
    # defaults of keys no config file sets are filled in
    assert cfg.sim.rtol == 1e-10 and cfg.sim.accurate_method == "DOP853"
    assert plant.drive in ("torque", "voltage", "voltage_full")
    assert ctrl.output in ("torque", "voltage")


def test_serial_jam_configs_values():
    cfg = load(SERIAL_JAM1)
    assert cfg.plant.model == "serial_arm"
    assert cfg.plant.drive == "torque"
    assert cfg.plant.q0 == pytest.approx([0.444134, -0.444134, 0.529083])
    assert cfg.plant.qd0 == (0.0, 0.0, 0.0)
    assert cfg.plant.damping == (15.0, 15.0, 15.0)
    assert cfg.input.torque == (0.0, 0.0, 0.0)
    assert cfg.input.voltage is None
    assert jams(cfg) == [{"joint": 1, "t1": 2.0, "duration": 0.1}]
    jam2 = load(CONFIGS / "serial3_jam2.toml")
    assert jams(jam2) == [{"joint": 2, "t1": 0.5, "duration": 0.1}]
    assert jams(load(SERIAL_FREE)) == []


def test_rrr3_config_values():
    fwd = load(RRR3_FORWARD)
    assert fwd.plant.model == "rrr3" and fwd.plant.drive == "voltage"
    assert fwd.input.voltage == (5.0, -5.0, 5.0)
    assert fwd.controller.type == "open_loop"
    assert fwd.plant.q0[0] == pytest.approx(-0.1259)
    pd = load(RRR3_PD)
    assert pd.controller.type == "pd"
    assert pd.controller.kp == (150.0,) * 3
    assert pd.controller.kd == (50.0,) * 3
    assert pd.controller.target == (0.4, 0.8, 1.0)
    assert pd.controller.output == "torque"


def test_defaults_are_filled_in_for_a_minimal_config(tmp_path):
    cfg = load(write(tmp_path, '[plant]\nmodel = "serial_arm"\n'))
    sim = cfg.sim
    assert sim.integrator == "rk4"
    assert sim.duration == 10.0 and sim.dt == 0.001
    assert sim.rtol == 1e-10 and sim.atol == 1e-12
    assert sim.accurate_method == "DOP853"
    plant = cfg.plant
    assert plant.drive == "torque"
    assert plant.q0 == (0.0, 0.0, 0.0) and plant.qd0 == (0.0, 0.0, 0.0)
    assert plant.damping == (0.0, 0.0, 0.0)
    assert plant.mass == (9.0, 7.0, 5.0)
    assert plant.gravity == 9.81
    assert plant.motor.resistance == (3.0, 3.0, 3.0)
    assert cfg.controller.type == "open_loop"
    assert cfg.controller.kp == (0.0, 0.0, 0.0)
    assert cfg.controller.target is None
    assert cfg.controller.output == "torque"
    assert cfg.input.voltage is None and cfg.input.torque is None
    assert jams(cfg) == []


def test_rrr3_defaults_are_voltage_driven(tmp_path):
    cfg = load(write(tmp_path, '[plant]\nmodel = "rrr3"\n'))
    assert cfg.plant.drive == "voltage"
    assert cfg.controller.output == "voltage"
    assert len(cfg.plant.q0) == 6
    assert cfg.plant.correction == "projection"


def test_resolve_accepts_a_dict_and_does_not_modify_it():
    raw = {"plant": {"model": "serial_arm", "damping": 2}}
    cfg = resolve(raw)
    assert cfg.plant.damping == (2.0, 2.0, 2.0)
    assert raw == {"plant": {"model": "serial_arm", "damping": 2}}


# -- --set overrides ----------------------------------------------------------------

@pytest.mark.parametrize("text, value", [
    ("3", 3), ("-1.5", -1.5), ("1e-4", 1e-4), ("true", True), ("false", False),
    ("euler", "euler"), ('"euler"', "euler"), ("[0.1,0.2,0.3]", [0.1, 0.2, 0.3]),
    ("[1, 2]", [1, 2]),
])
def test_parse_value(text, value):
    parsed = parse_value(text)
    assert parsed == value
    assert type(parsed) is type(value)


def test_override_numbers():
    cfg = load(SERIAL_FREE, ["sim.duration=2", "sim.dt=5e-4", "plant.gravity=1.62"])
    assert cfg.sim.duration == 2.0 and isinstance(cfg.sim.duration, float)
    assert cfg.sim.dt == 5e-4
    assert cfg.plant.gravity == 1.62


def test_override_bool():
    assert load(RRR3_FORWARD).plant.baumgarte is True
    assert load(RRR3_FORWARD, ["plant.baumgarte=false"]).plant.baumgarte is False


def test_override_bare_string():
    assert load(SERIAL_FREE, ["sim.integrator=euler"]).sim.integrator == "euler"
    assert load(RRR3_FORWARD, ["plant.correction=post_adjust"]).plant.correction == \
        "post_adjust"


def test_override_toml_list():
    cfg = load(SERIAL_FREE, ["plant.q0=[0.1,0.2,0.3]"])
    assert cfg.plant.q0 == (0.1, 0.2, 0.3)


def test_override_nested_jam_key():
    cfg = load(SERIAL_JAM1, ["faults.jam.t1=1.5"])
    assert jams(cfg) == [{"joint": 1, "t1": 1.5, "duration": 0.1}]


def test_override_scalar_is_broadcast_to_every_joint():
    cfg = load(SERIAL_FREE, ["plant.damping=3"])
    assert cfg.plant.damping == (3.0, 3.0, 3.0)
    cfg = load(RRR3_FORWARD, ["input.voltage=2", "plant.motor.resistance=1.5"])
    assert cfg.input.voltage == (2.0, 2.0, 2.0)
    assert cfg.plant.motor.resistance == (1.5, 1.5, 1.5)


def test_override_key_absent_from_file_but_in_schema():
    cfg = load(SERIAL_FREE, ["sim.rtol=1e-8", "controller.kp=5",
                             "plant.motor.gear_ratio=20"])
    assert cfg.sim.rtol == 1e-8
    assert cfg.controller.kp == (5.0, 5.0, 5.0)
    assert cfg.plant.motor.gear_ratio == (20.0, 20.0, 20.0)


def test_override_adds_a_jam_to_a_config_without_faults():
    cfg = load(SERIAL_FREE, ["faults.jam.joint=3", "faults.jam.t1=0.25"])
    assert jams(cfg) == [{"joint": 3, "t1": 0.25, "duration": 0.1}]


def test_later_override_wins_and_file_is_untouched():
    before = SERIAL_FREE.read_text()
    cfg = load(SERIAL_FREE, ["sim.duration=2", "sim.duration=4"])
    assert cfg.sim.duration == 4.0
    assert SERIAL_FREE.read_text() == before
    assert load(SERIAL_FREE).sim.duration == 20.0


def test_apply_override_edits_the_raw_dict_in_place():
    raw = {"plant": {"model": "serial_arm"}}
    apply_override(raw, "faults.jam.t1 = 1.5")
    apply_override(raw, "sim.integrator=euler")
    assert raw["faults"] == {"jam": {"t1": 1.5}}
    assert raw["sim"] == {"integrator": "euler"}


# -- errors: the message names the key and the reason ---------------------------------

def test_unknown_key_suggests_the_close_match():
    msg = config_error(SERIAL_FREE, ["plant.dampin=3"])
    assert "plant.dampin" in msg
    assert "unknown" in msg
    assert "did you mean 'plant.damping'" in msg


def test_unknown_key_in_file(tmp_path):
    path = write(tmp_path, '[sim]\ndurration = 1.0\n[plant]\nmodel = "serial_arm"\n')
    msg = config_error(path)
    assert "sim.durration" in msg and "unknown" in msg
    assert "sim.duration" in msg


def test_unknown_key_without_close_match_lists_known_keys():
    msg = config_error(SERIAL_FREE, ["sim.zzzz=1"])
    assert "sim.zzzz" in msg
    assert "integrator" in msg and "duration" in msg


def test_unknown_section():
    msg = config_error(SERIAL_FREE, ["sims.dt=0.01"])
    assert "unknown" in msg and "'sims'" in msg
    assert "did you mean 'sim'" in msg
    msg = config_error(SERIAL_FREE, ["telemetry.rate=10"])
    assert "unknown" in msg and "telemetry" in msg


def test_model_specific_key_is_unknown_for_the_other_model():
    msg = config_error(SERIAL_FREE, ["plant.l1=0.5"])
    assert "plant.l1" in msg and "unknown" in msg
    msg = config_error(RRR3_FORWARD, ["plant.damping=1"])
    assert "plant.damping" in msg and "unknown" in msg


def test_string_where_number_expected():
    msg = config_error(SERIAL_FREE, ["sim.duration=abc"])
    assert msg.startswith("sim.duration")
    assert "expected a number" in msg and "'abc'" in msg


def test_bool_where_number_expected():
    msg = config_error(SERIAL_FREE, ["sim.dt=true"])
    assert msg.startswith("sim.dt")
    assert "expected a number" in msg and "True" in msg
    msg = config_error(SERIAL_FREE, ["plant.q0=[0.1,true,0.3]"])
    assert "plant.q0[1]" in msg and "expected a number" in msg


def test_wrong_type_in_file_and_for_int_and_bool(tmp_path):
    path = write(tmp_path, '[plant]\nmodel = "serial_arm"\ngravity = "9.81"\n')
    msg = config_error(path)
    assert "plant.gravity" in msg and "expected a number" in msg
    msg = config_error(SERIAL_JAM1, ["faults.jam.joint=1.5"])
    assert "faults.jam.joint" in msg and "integer" in msg
    msg = config_error(RRR3_FORWARD, ["plant.baumgarte=1"])
    assert "plant.baumgarte" in msg and "true or false" in msg
    msg = config_error(SERIAL_FREE, ["sim.integrator=4"])
    assert "sim.integrator" in msg and "string" in msg


def test_wrong_list_length_says_expected_count():
    msg = config_error(SERIAL_FREE, ["plant.q0=[0.1,0.2]"])
    assert msg.startswith("plant.q0")
    assert "expected 3" in msg and "got 2" in msg
    msg = config_error(RRR3_FORWARD, ["plant.qd0=[0,0,0]"])
    assert "plant.qd0" in msg and "expected 6" in msg
    msg = config_error(RRR3_PD, ["controller.target=[0.4,0.8]"])
    assert "controller.target" in msg and "expected 3" in msg


def test_list_required_where_scalar_given():
    msg = config_error(SERIAL_FREE, ["plant.q0=0.1"])
    assert "plant.q0" in msg and "list" in msg


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_rejected(value):
    msg = config_error(SERIAL_FREE, [f"sim.dt={value}"])
    assert msg.startswith("sim.dt") and "finite" in msg
    msg = config_error(SERIAL_FREE, [f"plant.q0=[0.0,{value},0.0]"])
    assert "plant.q0[1]" in msg and "finite" in msg


def test_negative_where_non_negative_required():
    msg = config_error(SERIAL_FREE, ["plant.damping=-1"])
    assert "plant.damping" in msg and ">= 0" in msg and "-1" in msg
    msg = config_error(SERIAL_JAM1, ["faults.jam.t1=-0.5"])
    assert "faults.jam.t1" in msg and ">= 0" in msg
    msg = config_error(SERIAL_FREE, ["plant.gravity=-9.81"])
    assert "plant.gravity" in msg and ">= 0" in msg


def test_zero_where_positive_required():
    msg = config_error(SERIAL_FREE, ["sim.dt=0"])
    assert msg.startswith("sim.dt") and "> 0" in msg
    msg = config_error(SERIAL_FREE, ["sim.duration=-1"])
    assert msg.startswith("sim.duration") and "> 0" in msg
    msg = config_error(SERIAL_FREE, ["plant.mass=[9.0,0.0,5.0]"])
    assert "plant.mass[1]" in msg and "> 0" in msg


def test_bad_choice_lists_the_choices():
    msg = config_error(SERIAL_FREE, ["sim.integrator=rk5"])
    assert msg.startswith("sim.integrator")
    assert "'rk5'" in msg
    for choice in ("rk4", "euler", "accurate"):
        assert choice in msg
    msg = config_error(SERIAL_FREE, ["plant.model=scara"])
    assert "plant.model" in msg and "serial_arm" in msg and "rrr3" in msg


def test_missing_plant_model(tmp_path):
    msg = config_error(write(tmp_path, "[sim]\nduration = 1.0\n"))
    assert "plant.model" in msg and "missing" in msg
    msg = config_error(write(tmp_path, '[plant]\ndrive = "torque"\n', "b.toml"))
    assert "plant.model" in msg and "missing" in msg


@pytest.mark.parametrize("joint", [0, 4])
def test_jam_joint_out_of_range(joint):
    msg = config_error(SERIAL_JAM1, [f"faults.jam.joint={joint}"])
    assert re.search(r"faults\.jam(\[0\])?\.joint", msg), msg
    assert "1..3" in msg and f"got {joint}" in msg


def test_jam_joint_in_range_at_the_ends():
    assert load(SERIAL_JAM1, ["faults.jam.joint=3"]).faults.jam[0].joint == 3


def test_jam_joint_missing():
    msg = config_error(SERIAL_FREE, ["faults.jam.t1=1.0"])
    assert "faults.jam.joint" in msg and "missing" in msg


def test_jam_on_rrr3_rejected():
    msg = config_error(RRR3_FORWARD, ["faults.jam.joint=1", "faults.jam.t1=1.0"])
    assert "faults.jam" in msg and "serial arm" in msg


def test_torque_input_for_voltage_driven_plant():
    msg = config_error(RRR3_FORWARD, ["input.torque=[1.0,2.0,3.0]"])
    assert msg.startswith("input.torque")
    assert "voltage-driven" in msg and "input.voltage" in msg
    msg = config_error(SERIAL_FREE, ["plant.drive=voltage"])  # file gives input.torque
    assert msg.startswith("input.torque") and "voltage-driven" in msg


def test_voltage_input_for_torque_driven_plant():
    msg = config_error(SERIAL_FREE, ["input.voltage=1"])
    assert msg.startswith("input.voltage") and "torque-driven" in msg


def test_voltage_driven_serial_arm_is_accepted(tmp_path):
    path = write(tmp_path, '[plant]\nmodel = "serial_arm"\ndrive = "voltage"\n'
                           '[input]\nvoltage = [1.0, 0.0, -1.0]\n')
    cfg = load(path)
    assert cfg.input.voltage == (1.0, 0.0, -1.0)
    assert cfg.controller.output == "voltage"


def test_pd_without_target():
    msg = config_error(SERIAL_FREE, ["controller.type=pd", "controller.kp=10"])
    assert "controller.target" in msg and "missing" in msg and "pd" in msg
    msg = config_error(RRR3_PD, ["controller.target=[]"])
    assert "controller.target" in msg and "expected 3" in msg


def test_pd_voltage_output_needs_voltage_drive():
    msg = config_error(SERIAL_FREE, ["controller.type=pd", "controller.target=[0,0,0]",
                                     "controller.output=voltage"])
    assert msg.startswith("controller.output") and "voltage-driven" in msg


def test_full_motor_model_rejects_a_step_longer_than_the_electrical_time_constant():
    msg = config_error(RRR3_FORWARD, ["plant.drive=voltage_full"])
    assert msg.startswith("sim.dt")
    assert "electrical time constant" in msg
    assert "L_a/R_a" in msg
    assert "0.000333" in msg  # L_a / R_a = 1e-3 / 3


def test_full_motor_model_accepts_a_short_step_or_the_accurate_path():
    cfg = load(RRR3_FORWARD, ["plant.drive=voltage_full", "sim.dt=1e-4"])
    assert cfg.plant.drive == "voltage_full"
    cfg = load(RRR3_FORWARD, ["plant.drive=voltage_full", "sim.integrator=accurate"])
    assert cfg.sim.dt == 0.001
    # the smallest L_a/R_a over the motors is the one that counts
    msg = config_error(RRR3_FORWARD, ["plant.drive=voltage_full", "sim.dt=1e-4",
                                      "plant.motor.inductance=[1e-3,1e-3,1e-5]"])
    assert "electrical time constant" in msg


def test_set_without_equals_sign():
    msg = config_error(SERIAL_FREE, ["sim.dt"])
    assert "key=value" in msg and "sim.dt" in msg


def test_set_through_a_value_is_rejected():
    msg = config_error(SERIAL_FREE, ["sim.dt.x=1"])
    assert "sim.dt" in msg and "not a table" in msg


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    msg = config_error(path)
    assert "not found" in msg and str(path) in msg


def test_invalid_toml(tmp_path):
    path = write(tmp_path, "[sim\nduration = 1.0\n", "broken.toml")
    msg = config_error(path)
    assert "not valid TOML" in msg and "broken.toml" in msg
    assert "line 1" in msg


def test_section_given_as_a_value(tmp_path):
    msg = config_error(write(tmp_path, 'sim = 3\n[plant]\nmodel = "serial_arm"\n'))
    assert msg.startswith("sim") and "table" in msg


@pytest.mark.parametrize("value", ["[1]", "3", "true"])
def test_non_string_model_is_a_config_error(value):
    # a list once crashed with TypeError (unhashable) instead of a ConfigError
    msg = config_error(SERIAL_FREE, [f"plant.model={value}"])
    assert msg.startswith("plant.model") and "serial_arm" in msg


# -- jams as a list of tables, arms of other sizes ------------------------------------

TWO_JAMS = """
[plant]
model = "serial_arm"

[[faults.jam]]
joint = 1
t1 = 0.5

[[faults.jam]]
joint = 3
t1 = 1.25
duration = 0.2
"""


def test_list_of_jam_tables_resolves_to_two_jams(tmp_path):
    cfg = load(write(tmp_path, TWO_JAMS))
    assert jams(cfg) == [{"joint": 1, "t1": 0.5, "duration": 0.1},
                         {"joint": 3, "t1": 1.25, "duration": 0.2}]


def test_list_of_jam_tables_errors_name_the_entry(tmp_path):
    msg = config_error(write(tmp_path, TWO_JAMS.replace("duration = 0.2", "duraton = 0.2")))
    assert "faults.jam[1].duraton" in msg and "did you mean" in msg
    msg = config_error(write(tmp_path, TWO_JAMS.replace("joint = 3", "joint = 5"), "b.toml"))
    assert "faults.jam[1].joint" in msg and "got 5" in msg


def test_set_into_a_list_of_jam_tables_is_refused(tmp_path):
    msg = config_error(write(tmp_path, TWO_JAMS), ["faults.jam.t1=1.0"])
    assert "faults.jam" in msg and "list of tables" in msg
    assert msg.endswith("name one by its index, faults.jam[0].t1")


def test_set_names_a_jam_of_a_list_by_its_index(tmp_path):
    cfg = load(write(tmp_path, TWO_JAMS), ["faults.jam[1].t1=2.5", "faults.jam[0].joint=2"])
    assert jams(cfg) == [{"joint": 2, "t1": 0.5, "duration": 0.1},
                         {"joint": 3, "t1": 2.5, "duration": 0.2}]


def test_set_appends_a_jam_at_the_index_past_the_last(tmp_path):
    """A single [faults.jam] table counts as a list of one; index 1 adds a second jam."""
    cfg = load(SERIAL_JAM1, ["faults.jam[1].joint=3", "faults.jam[1].t1=4.0"])
    assert jams(cfg) == [{"joint": 1, "t1": 2.0, "duration": 0.1},
                         {"joint": 3, "t1": 4.0, "duration": 0.1}]
    assert jams(load(SERIAL_FREE, ["faults.jam[0].joint=2", "faults.jam[0].t1=1.0"])) == \
        [{"joint": 2, "t1": 1.0, "duration": 0.1}]


@pytest.mark.parametrize("item, message", [
    ("faults.jam[3].t1=1.0", "--set faults.jam[3].t1: 'faults.jam' has 2 table(s); index 0..1 "
                             "names one, 2 appends one"),
    ("faults.jam[0]=1.0", "--set faults.jam[0]: an index names a table of a list of tables, "
                          "not a value"),
    ("plant.model[0].x=1", "--set plant.model[0].x: 'plant.model' is a value, not a list of "
                           "tables"),
])
def test_a_bad_index_in_set_is_one_line(tmp_path, item, message):
    assert config_error(write(tmp_path, TWO_JAMS), [item]) == message


FOUR_LINKS = """
[plant]
model = "serial_arm"
mass = [4.0, 3.0, 2.0, 1.0]
inertia = [0.4, 0.3, 0.2, 0.1]
length = [0.5, 0.4, 0.3, 0.2]
com = [0.25, 0.2, 0.15, 0.1]
q0 = [0.1, 0.2, 0.3, 0.4]
damping = 2.0

[[faults.jam]]
joint = 4
t1 = 1.0
"""


def test_four_link_arm_resolves_with_nq_4(tmp_path):
    cfg = load(write(tmp_path, FOUR_LINKS))
    plant = cfg.plant
    assert plant.q0 == (0.1, 0.2, 0.3, 0.4)
    assert plant.qd0 == (0.0,) * 4
    assert plant.damping == (2.0,) * 4
    assert plant.mass == (4.0, 3.0, 2.0, 1.0)
    assert cfg.controller.kp == (0.0,) * 4
    assert plant.motor.resistance == (3.0,) * 4
    assert cfg.faults.jam[0].joint == 4
    # q0 of 3 no longer fits, a jam on joint 5 is out of range
    msg = config_error(write(tmp_path, FOUR_LINKS, "a.toml"), ["plant.q0=[0,0,0]"])
    assert "plant.q0" in msg and "expected 4" in msg
    msg = config_error(write(tmp_path, FOUR_LINKS.replace("joint = 4", "joint = 5"), "b.toml"))
    assert "joint" in msg and "1..4" in msg


def test_four_link_arm_with_mismatched_inertia_names_plant_inertia(tmp_path):
    path = write(tmp_path, FOUR_LINKS.replace("inertia = [0.4, 0.3, 0.2, 0.1]",
                                              "inertia = [0.4, 0.3, 0.2]"))
    msg = config_error(path)
    assert msg.startswith("plant.inertia")
    assert "expected 4" in msg and "got 3" in msg


@pytest.mark.parametrize("key", ["length", "com"])
def test_four_link_arm_with_mismatched_link_list(tmp_path, key):
    text = re.sub(rf"^{key} = .*$", f"{key} = [0.5, 0.4]", FOUR_LINKS, flags=re.M)
    msg = config_error(write(tmp_path, text))
    assert msg.startswith(f"plant.{key}") and "expected 4" in msg


# -- JSON meta ------------------------------------------------------------------------

@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_to_json_round_trips(path):
    cfg = load(path)
    text = to_json(cfg.to_dict())
    assert isinstance(text, str)
    assert json.loads(text) == cfg.to_dict()


def test_to_json_round_trips_with_overrides_and_two_jams(tmp_path):
    cfg = load(write(tmp_path, TWO_JAMS), ["plant.damping=3", "sim.integrator=euler"])
    back = json.loads(to_json(cfg.to_dict()))
    assert back == cfg.to_dict()
    assert back["faults"]["jam"][1]["t1"] == 1.25
    assert back["input"]["torque"] is None


# -- the typed config -----------------------------------------------------------------

def test_the_resolved_config_is_typed_and_immutable():
    cfg = load(SERIAL_JAM1)
    assert isinstance(cfg.sim.dt, float) and isinstance(cfg.loop.max_overruns, int)
    assert isinstance(cfg.loop.gc_freeze, bool) and isinstance(cfg.plant.model, str)
    assert cfg.plant.motor.gear_ratio == (10.0, 10.0, 10.0)
    assert isinstance(cfg.faults.jam, tuple) and cfg.faults.jam[0].t1 == 2.0
    fields = {f.name: f.type for f in dataclasses.fields(cfg.sim)}
    assert fields["dt"] is float and fields["integrator"] is str
    assert {f.name: f.type for f in dataclasses.fields(cfg.plant)}["mass"] == tuple[float, ...]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.sim.dt = 0.01
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.plant = None
    with pytest.raises(TypeError):
        cfg.plant.q0[0] = 1.0
    derived = cfg.replace(sim=dataclasses.replace(cfg.sim, duration=1.0))
    assert derived.sim.duration == 1.0 and cfg.sim.duration == 20.0
    assert load(SERIAL_JAM1) == cfg and hash(load(SERIAL_JAM1)) == hash(cfg)
    assert pickle.loads(pickle.dumps(cfg)) == cfg


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_to_dict_is_the_resolved_dict(path, monkeypatch):
    """cfg.to_dict() is the dict that was validated, so the meta of every log is unchanged."""
    import hilrig.settings.config as config_module
    validated = []
    typed = config_module.typed
    monkeypatch.setattr(config_module, "typed",
                        lambda out, schema: validated.append(json.dumps(out)) or typed(out, schema))
    cfg = load(path)
    assert json.dumps(cfg.to_dict()) == validated[0]
    assert to_json(cfg.to_dict()) == to_json(json.loads(validated[0]))


def test_a_plant_models_own_keys_are_typed_attributes(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "user_plant"))
    cfg = load(write(tmp_path, '[plant]\nmodel = "cart_pole:CART_POLE"\ncart_mass = 2\n'))
    assert cfg.plant.cart_mass == 2.0 and isinstance(cfg.plant.cart_mass, float)
    assert {f.name: f.type for f in dataclasses.fields(cfg.plant)}["pole_length"] is float
    assert cfg.plant.q0 == (0.0, 0.0)


def test_a_links_own_keys_are_typed_attributes():
    cfg = load(CONFIGS / "rig_canopen.toml")
    assert cfg.link.canopen.node_ids == (1, 2, 3)
    assert all(isinstance(i, int) for i in cfg.link.canopen.node_ids)
    assert {f.name: f.type for f in dataclasses.fields(cfg.link.canopen)}["node_ids"] == \
        tuple[int, ...] | None
    serial = load(CONFIGS / "rig_serial.toml").link.serial
    assert serial.axes == ((0x80, 1), (0x80, 2), (0x81, 1))


@pytest.mark.parametrize("name, error", [
    ("/dev/zero", "/dev/zero: not a regular file"),      # used to read forever
    ("folder", "{tmp}/folder: not a regular file"),
    ("big.toml", "{tmp}/big.toml: larger than 1 MB: not a config"),
])
def test_a_config_that_is_no_file_or_too_large_is_one_line(tmp_path, name, error):
    (tmp_path / "folder").mkdir()
    (tmp_path / "big.toml").write_text("# " + "x" * 2**20 + "\n")
    path = name if name.startswith("/") else str(tmp_path / name)
    with pytest.raises(ConfigError) as refused:
        load(path)
    assert str(refused.value) == error.format(tmp=tmp_path)


@pytest.mark.parametrize("override, key", [
    ("controller.kp=-5", "controller.kp[0]"), ("controller.kd=[1.0, -0.5, 1.0]",
                                               "controller.kd[1]")])
def test_a_negative_gain_is_refused_at_load(override, key):
    """A negative kp was accepted (a PD law that pushes away from its target)."""
    msg = config_error(SERIAL_FREE, ["controller.type='pd'",
                                     "controller.target=[0.0, 0.0, 0.0]", override])
    assert msg.startswith(f"{key}: must be >= 0.0, got -"), msg
