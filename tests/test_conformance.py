"""The conformance checks (conformance.checks): hilrig's own controllers, plants and links pass
them, each against its real counterpart (an `hil emulate` subprocess, emulated CiA 402
drives on python-can's virtual bus, emulated RoboClaw drives on a pty); and each check
catches a deliberately broken part, written here as a small law, plant or link."""
import dataclasses
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

import hilrig
import numpy as np
import pytest
from conftest import arm_config, config
from hilrig.settings.config import resolve
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.interface import Controller, compile_law
from hilrig.devices.cia402_drive import EmulatedDrives
from hilrig.devices.roboclaw_drive import RoboClawEmulator
from hilrig.drivers.canopen_link import CanopenLink
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import LinkError, LinkState
from hilrig.drivers.registry import command_unit
from hilrig.drivers.serial_link import SerialLink
from hilrig.drivers.zmq_link import ZmqLink
from hilrig.plant.builtin_models import arm_params
from hilrig.plant.factory import actuated_joints, plant_from_config
from hilrig.plant.layout import H_BODY
from hilrig.plant.model import Plant
from hilrig.conformance.checks import (
    ConformanceError,
    check_controller,
    check_link,
    check_plant,
)
from numba import njit
from rt_helpers import ROOT, EmulatorProcess, endpoint

CONFIG_NAMES = sorted(path.stem for path in (ROOT / "configs").glob("*.toml"))
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def _no_emulator_left():
    yield
    EmulatorProcess.reap()


@pytest.mark.system
def test_the_checks_are_exported_lazily_from_the_root_package():
    """``import hilrig`` loads neither the checks nor numba; the root's functions do."""
    probe = ("import sys, hilrig; print(hilrig.__file__, 'hilrig.conformance.checks' in "
             "sys.modules, 'numba' in sys.modules)")
    here = dict(os.environ, PYTHONPATH=str(Path(hilrig.__file__).parent.parent))
    loaded = subprocess.run([sys.executable, "-c", probe], env=here, capture_output=True,
                            text=True, check=True).stdout.split()
    assert loaded == [hilrig.__file__, "False", "False"]
    cfg = config("rrr3_pd")
    hilrig.check_controller(controller_from_config(cfg, "V"), 3, ticks=2)
    hilrig.check_plant(cfg, steps=10)
    hilrig.check_link(lambda: PlantLink.from_config(cfg))
    with pytest.raises(ConformanceError, match="'writes_nan'"):
        hilrig.check_controller(compiled(writes_nan), 3)


def test_a_conformance_error_is_an_assertion_error():
    assert issubclass(ConformanceError, AssertionError)


# -- controllers: hilrig's own and the examples pass -----------------------------------

@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_every_built_in_configs_controller_passes(name):
    """Covers open_loop (serial3_*, rrr3_forward), pd (rrr3_pd, rig_canopen, rig_serial)
    and feedforward (rig_inprocess, rig_zmq), in volts and in N m."""
    cfg = config(name)
    unit = command_unit(cfg.link.type, cfg.plant.drive)
    check_controller(controller_from_config(cfg, unit), actuated_joints(cfg))


def example_module(folder: str, module: str, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES / folder))
    return importlib.import_module(module)


def test_the_users_compiled_laws_pass(monkeypatch):
    my_laws = example_module("user_controller", "my_laws", monkeypatch)
    pd = Controller(compile_law(my_laws.pd_torque), np.array([150.0, 50.0, 0.1, 0.4, 0.8, 1.0]),
                    np.zeros(0), name="my_laws:pd_torque")
    pid = Controller(compile_law(my_laws.pid_torque),
                     np.array([150.0, 50.0, 0.1, 0.4, 0.8, 1.0, 1e-3, 20.0]), np.zeros(3),
                     name="my_laws:pid_torque")
    check_controller(pd, 3)
    check_controller(pid, 3)


def test_the_users_python_law_passes(monkeypatch):
    numpy_pd = example_module("python_controller", "numpy_pd", monkeypatch)
    params = np.array([300.0, 30.0, 0.6, -0.4, 0.5])
    check_controller(Controller(numpy_pd.NumpyPD(params), params, np.zeros(0), compiled=False,
                                name="numpy_pd:NumpyPD"), 3)


def test_the_checks_leave_the_controllers_state_alone(monkeypatch):
    my_laws = example_module("user_controller", "my_laws", monkeypatch)
    state = np.zeros(3)
    pid = Controller(compile_law(my_laws.pid_torque),
                     np.array([150.0, 50.0, 0.1, 0.4, 0.8, 1.0, 1e-3, 20.0]), state)
    check_controller(pid, 3)
    assert pid.state is state and not state.any()


# -- controllers: broken laws are caught -----------------------------------------------

@njit
def writes_nan(t, pos, vel, cur, params, state, u):
    for j in range(u.shape[0]):
        u[j] = np.nan


@njit
def writes_its_input(t, pos, vel, cur, params, state, u):
    for j in range(u.shape[0]):
        pos[j] = 0.0          # "clamps" the measurement in place
        u[j] = -vel[j]


@njit
def draws_a_random_number(t, pos, vel, cur, params, state, u):
    for j in range(u.shape[0]):
        u[j] = -pos[j] + 0.01 * np.random.random()


@njit
def writes_past_u(t, pos, vel, cur, params, state, u):
    for j in range(u.shape[0] + 1):     # one too many: numba does not check bounds
        u[j] = -pos[0]


@njit
def writes_one_joint(t, pos, vel, cur, params, state, u):
    u[0] = -pos[0]


@njit
def allocates(t, pos, vel, cur, params, state, u):
    error = params[:u.shape[0]] - pos   # a new array every tick
    for j in range(u.shape[0]):
        u[j] = error[j]


def current_feedback(t, pos, vel, cur, params, state, u):
    """A Python law that cannot stand a link without current measurement."""
    if np.isnan(cur).any():
        raise ValueError("current is NaN")
    u[:] = -cur


def remembers_outside_state():
    """A Python law whose integrator lives in a closure instead of ``state``."""
    integral = np.zeros(3)

    def law(t, pos, vel, cur, params, state, u):
        integral[:] += pos
        u[:] = -integral
    return law


def compiled(law, params=None):
    """The law compiled, with params (default: three zeros) and no state."""
    params = np.zeros(3) if params is None else params
    return Controller(compile_law(law), params, np.zeros(0), name=law.__name__)


@pytest.mark.parametrize("controller, message", [
    (compiled(writes_nan), r"'writes_nan': u = \[nan nan nan\] has non-finite entries"),
    (compiled(writes_one_joint), r"'writes_one_joint': u = .* must write 3 finite values"),
    (compiled(writes_its_input), r"'writes_its_input': wrote its input pos"),
    (compiled(draws_a_random_number), r"'draws_a_random_number': not deterministic"),
    (compiled(writes_past_u), r"'writes_past_u': wrote outside u"),
    (compiled(allocates, params=np.ones(3)), r"'allocates': allocates per call"),
    (Controller(current_feedback, np.zeros(0), np.zeros(0), compiled=False,
                name="current_feedback"),
     (r"'current_feedback': raised ValueError: current is NaN on a measurement with NaN "
      r"currents")),
    (Controller(remembers_outside_state(), np.zeros(0), np.zeros(0), compiled=False,
                name="closure_pi"), r"'closure_pi': not deterministic"),
    (Controller(writes_nan, np.zeros(3, dtype=np.float32), np.zeros(0), name="float32"),
     r"'float32': params must be a 1-D C-contiguous float64 array, got float32"),
    (Controller(writes_nan, np.zeros((3, 2))[:, 0], np.zeros(0), name="strided"),
     r"'strided': params must be .* not C-contiguous"),
], ids=lambda value: getattr(value, "name", ""))
def test_a_broken_law_is_caught_by_name(controller, message):
    with pytest.raises(ConformanceError, match=message):
        check_controller(controller, 3)


@pytest.mark.parametrize("law, cur", [("nan_elsewhere", r"cur = \[[-0-9. ,]+\]"),
                                      ("nan_without_currents", r"cur = \[nan, nan, nan\]")])
def test_a_law_that_is_nan_away_from_the_probe_or_without_currents_is_caught(law, cur):
    """Both are finite on the one measurement the check tried before it sampled (pos 0.1,
    0.2, 0.3 rad; currents 0.2 A, and NaN currents were only asked not to raise), so that
    check passed them; the seeded measurements find the state and name it."""
    import user_parts
    controller = compiled(getattr(user_parts, law), params=np.array([20.0, 2.0]))
    u = np.zeros(3)
    controller(0.25, np.array([0.1, 0.2, 0.3]), np.full(3, -0.05), np.full(3, 0.2), u)
    assert np.all(np.isfinite(u))            # the old probe's measurement: finite
    with pytest.raises(ConformanceError,
                       match=rf"'{law}': u = \[nan, nan, nan\] has non-finite entries for "
                             rf"t = .* s, pos = .*, vel = .*, {cur} \(seeded measurement "
                             r"\d+ of 64, seed 0\)"):
        check_controller(controller, 3)


def test_the_sampled_measurements_follow_the_seed():
    """The same seed finds the same measurement; another seed another one."""
    import user_parts
    controller = compiled(user_parts.nan_elsewhere, params=np.array([20.0, 2.0]))
    messages = []
    for seed in (0, 0, 1):
        with pytest.raises(ConformanceError) as caught:
            check_controller(controller, 3, seed=seed)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] != messages[2]


# -- plants ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_every_built_in_configs_plant_passes(name):
    check_plant(config(name))


@pytest.mark.parametrize("drive, h", [("torque", 1e-3), ("voltage", 1e-3),
                                      ("voltage_full", 1e-4)])
def test_a_plant_built_in_code_passes(drive, h):
    """h: a step the drive's time constants allow (L_a/R_a = 0.33 ms for the full model)."""
    plant = plant_from_config(arm_config({"dt": h}, drive=drive, q0=[0.4, -0.4, 0.5]))
    x = plant.x.copy()
    check_plant(plant, h=h)
    assert np.array_equal(plant.x, x) and plant.t == 0.0


def test_a_plant_with_corrupted_params_is_caught():
    plant = plant_from_config(config("serial3_free"))
    plant.params[int(plant.params[H_BODY]):] = np.nan     # the arm's masses and lengths
    with pytest.raises(ConformanceError, match=r"plant serial_arm \(torque, nq = 3, nact = 3\): "
                                               r"M\(q\) has non-finite entries at q = \[ ?0.444134, "
                                               r"-0.444134, +0.529083\] \(the plant's q\) .*: "
                                               r"M = \[\[nan, nan, nan\], +\[nan"):
        check_plant(plant)


def test_a_plant_with_a_state_of_the_wrong_size_is_caught():
    plant = plant_from_config(config("rrr3_pd"))
    plant.x = np.zeros(5)
    with pytest.raises(ConformanceError, match=r"plant rrr3 .*: x must be a float64 array of "
                                               r"shape \(12,\), got float64 of shape \(5,\)"):
        check_plant(plant)


def test_a_plant_that_gains_energy_is_caught():
    """Negative damping pushes the joints along: a torque-driven arm gaining energy (a
    config refuses it, so the arm is built from its parameters)."""
    arm = dataclasses.replace(arm_params(config("serial3_free")), damping=np.full(3, -2.0))
    plant = Plant.build(arm, "torque")
    plant.set_state([0.4, -0.4, 0.5])
    with pytest.raises(ConformanceError, match=r"gained .* J in 0.5 s under zero torque"):
        check_plant(plant)


def user_chain(name: str, **plant):
    """A resolved config of one of tests/user_parts.py's two-link arms, hanging at rest."""
    return resolve({"plant": {"model": f"user_parts:{name}", **plant},
                    "sim": {"duration": 0.5}})


def test_a_users_arm_passes_with_its_damping_declared():
    check_plant(user_chain("ARM", damping=0.3))


@pytest.mark.parametrize("name, message", [
    ("HALVED_CORIOLIS", r"energy drifted by 0.000498 J"),
    ("HIDDEN_DAMPING", r"energy drifted by 0.0163 J"),
])
def test_a_chain_with_a_wrong_coriolis_term_or_hidden_damping_is_caught(name, message):
    """Hanging at rest, neither moves, so the check that only asked the plant not to gain
    energy from its own state passed both (and ran no conservation run: they declare no
    dissipation). The conservative variant now runs for every chain, from q0 at 1 rad/s
    per coordinate and from seeded states, and names the state and the likely terms."""
    with pytest.raises(ConformanceError,
                       match=rf"plant chain \(torque, nq = 2, nact = 2\): with torque drives and "
                             rf"its dissipation zero \(no keys declared\), {message} in 0.5 s "
                             r"under zero torque .* from q = \[0., 0.\], qd = \[1., 1.\] .*: a "
                             r"damping term not among the keys its model declares as "
                             r"dissipation, or a wrong Coriolis or centrifugal term"):
        check_plant(user_chain(name))


def test_the_conservation_runs_from_the_seeded_states_too():
    """A friction that acts only fast (|qd| above 1.5 rad/s) is missed from q0 at 1 rad/s
    and found from a seeded state."""
    import user_parts
    from hilrig.plant.interface import compile_mechanism

    @njit
    def fast_friction(q, qd, params, mass, bias):
        potential = user_parts.arm(q, qd, params, mass, bias)
        for i in range(2):
            if abs(qd[i]) > 1.5:
                bias[i] += 0.05 * qd[i]
        return potential

    plant = Plant.chain(compile_mechanism(fast_friction), 2, 2,
                        user_parts.params(user_chain("ARM").plant))
    plant.x[2:] = 1.0
    energy = checks_module()._energy_drift(plant, "fast friction")
    assert energy.largest <= energy.tolerance            # conserved from q0 at 1 rad/s
    states = checks_module()._sampled_states(plant, 0)
    with pytest.raises(ConformanceError, match=r"from q = .* \(seeded state \d+ of 12\)"):
        checks_module()._check_conservation(plant, "fast friction", (), states)


def checks_module():
    return importlib.import_module("hilrig.conformance.checks")


def test_a_mass_matrix_that_is_not_symmetric_or_not_positive_definite_is_caught():
    import user_parts
    from hilrig.plant.interface import compile_mechanism
    with pytest.raises(ConformanceError,
                       match=r"M\(q\) is not symmetric at q = \[0., 0.\] \(the plant's q\): "
                             r"M\[0,1\] = 0.122.* but M\[1,0\] = 0.042"):
        check_plant(user_chain("LOPSIDED"))
    params = user_parts.params(user_chain("ARM").plant)
    params[user_parts.I2] = -0.05          # a sign lost: the second link's inertia negative
    plant = Plant.chain(compile_mechanism(user_parts.arm), 2, 2, params)
    with pytest.raises(ConformanceError,
                       match=r"M\(q\) is not positive definite at q = \[0., 0.\] \(the "
                             r"plant's q\): its smallest eigenvalue is -0.0[0-9]+"):
        check_plant(plant)


@pytest.mark.slow
def test_a_users_chain_passes_and_one_that_gains_energy_is_caught(monkeypatch):
    """The cart-pole of examples/user_plant passes; with negative pole damping (its
    mechanism built into a Plant by hand: the config refuses it) it gains energy."""
    monkeypatch.syspath_prepend(str(EXAMPLES / "user_plant"))
    import cart_pole
    from hilrig.plant.interface import compile_mechanism
    from hilrig.settings.config import load
    cfg = load(EXAMPLES / "user_plant" / "cart_pole.toml")
    check_plant(cfg)
    params = cart_pole.params(dataclasses.replace(cfg.plant, pole_damping=-0.05))
    plant = Plant.chain(compile_mechanism(cart_pole.mechanism), 2, 1, params)
    plant.set_state([0.0, 1.0])
    with pytest.raises(ConformanceError, match=r"plant chain .* gained .* J"):
        check_plant(plant)


# -- links: hilrig's own pass --------------------------------------------------------------

@pytest.mark.parametrize("name", ["rig_inprocess", "serial3_free"])
def test_the_in_process_link_passes(name):
    cfg = config(name)
    check_link(lambda: PlantLink.from_config(cfg))


@pytest.mark.system
def test_the_zeromq_link_passes_against_hil_emulate(tmp_path):
    served, nobody = endpoint(tmp_path), endpoint(tmp_path)
    EmulatorProcess("rig_zmq", served, tmp_path / "emu.mcap")
    cfg = config("rig_zmq", f"link.endpoint='{served}'", "link.timeout=0.5")
    unserved = config("rig_zmq", f"link.endpoint='{nobody}'", "link.timeout=0.05")
    check_link(lambda: ZmqLink.from_config(cfg),
               failing_factory=lambda: ZmqLink.from_config(unserved))


def test_the_canopen_link_passes_against_emulated_drives(request):
    generous = ("link.canopen.tpdo_timeout=0.5", "link.canopen.heartbeat_timeout=2.0")
    cfg = config("rig_canopen", "link.canopen.interface='virtual'",
                 f"link.canopen.channel='{request.node.name}'", *generous)
    empty_bus = config("rig_canopen", "link.canopen.interface='virtual'",
                       f"link.canopen.channel='{request.node.name}-empty'",
                       "link.canopen.boot_timeout=0.2")
    with EmulatedDrives(cfg):
        check_link(lambda: CanopenLink.from_config(cfg),
                   failing_factory=lambda: CanopenLink.from_config(empty_bus))


def test_the_serial_link_passes_against_emulated_roboclaws():
    patient = ("emulator.mode=lockstep", "link.serial.timeout=0.5", "link.serial.budget=2.0",
               "link.timeout=5.0")
    emu = RoboClawEmulator(config("rig_serial", *patient)).start()
    try:
        cfg = config("rig_serial", *patient, f"link.serial.port='{emu.port}'")
        missing = config("rig_serial", "link.serial.port='/nonexistent/ttyACM9'")
        check_link(lambda: SerialLink.from_config(cfg),
                   failing_factory=lambda: SerialLink.from_config(missing))
    finally:
        emu.stop()
    assert emu.error is None


# -- links: broken ones are caught ----------------------------------------------------------
# A link on the base (drivers.link) has its lifecycle from the base; these override the
# public methods as links written before the base did (which warns), and break it.

with pytest.deprecated_call():
    class FragileStopLink(PlantLink):
        """Its safe_stop releases a brake handle that the second call finds gone."""

        def safe_stop(self) -> None:
            if self.lifecycle is LinkState.STOPPED:
                raise RuntimeError("brake handle already released")
            super().safe_stop()

    class HalfOpenLink(PlantLink):
        """Its configure fails (no device) after taking half of its resources; its close
        then trips over the half that is missing."""

        def configure(self) -> None:
            self.port = None
            raise LinkError("no device answered")

        def close(self) -> None:
            self.port.close()

    class HalfConfiguredLink(PlantLink):
        """Its configure raises after the first half worked, and leaves that half open."""

        def configure(self) -> None:
            super().configure()
            raise LinkError("the second drive did not answer")

    class EagerLink(PlantLink):
        """Enables the drives as soon as it is configured: it never waits for activate."""

        def configure(self) -> None:
            super().configure()
            super().activate()

    class ZombieLink(PlantLink):
        """Its close releases nothing: after it, the plant still takes commands."""

        def close(self) -> None:
            self.safe_stop()

    class PortLink(PlantLink):
        """Its close releases a port that only configure opens: one never configured trips."""

        def configure(self) -> None:
            super().configure()
            self.port = io.BytesIO()

        def close(self) -> None:
            self.port.close()
            super().close()


class HalfOpenHooksLink(PlantLink):
    """HalfOpenLink written as hooks: the base survives its _close and logs what it raised."""

    def _configure(self) -> None:
        self.port = None
        raise LinkError("no device answered")

    def _close(self) -> None:
        self.port.close()


def in_process(link_class):
    cfg = config("rig_inprocess")
    return lambda: link_class.from_config(cfg)


@pytest.mark.parametrize("link_class, failing_class, message", [
    (FragileStopLink, None,
     r"link FragileStopLink: second safe_stop raised RuntimeError: brake handle already released"),
    (PlantLink, HalfOpenLink,
     r"link HalfOpenLink: close after a failed configure raised AttributeError"),
    (PlantLink, HalfConfiguredLink,
     r"link HalfConfiguredLink: read after a failed configure did not raise LinkError"),
    (EagerLink, None,
     r"link EagerLink: write after configure, before activate did not raise LinkError"),
    (ZombieLink, None, r"link ZombieLink: write after close did not raise LinkError"),
    (PortLink, None,
     r"link PortLink \(never configured\): close raised AttributeError: 'PortLink' object "
     r"has no attribute 'port'"),
], ids=["safe_stop_twice", "close_after_failed_configure", "half_configured",
        "write_before_activate", "write_after_close", "close_never_configured"])
def test_a_broken_link_is_caught_with_the_step_that_fails(link_class, failing_class, message):
    failing = in_process(failing_class) if failing_class is not None else None
    with pytest.raises(ConformanceError, match=message):
        check_link(in_process(link_class), failing_factory=failing)


def test_a_link_on_the_base_survives_a_close_hook_that_raises_and_logs_it(caplog):
    check_link(in_process(PlantLink), failing_factory=in_process(HalfOpenHooksLink))
    assert [r.getMessage() for r in caplog.records if r.name == "hil.link"] == [
        "in-process plant: close after the failed configure raised AttributeError: "
        "'NoneType' object has no attribute 'close'"]


def test_a_link_that_configures_when_pointed_at_nothing_is_caught():
    with pytest.raises(ConformanceError, match=r"link PlantLink: configure of a link pointed "
                                               r"at nothing did not raise"):
        check_link(in_process(PlantLink), failing_factory=in_process(PlantLink))
