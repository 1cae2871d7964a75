"""plant.packed: the one-argument step equals plant.stepping.advance on separate arrays
(compiled for the plant's family, plant.family.for_plant, as the loops compile it)."""
import numpy as np
import pytest
from conftest import arm_config, config
from hilrig.plant.factory import correction_id, plant_from_config
from hilrig.plant.family import for_plant
from hilrig.plant.integrators import METHOD_EULER, METHOD_RK4
from hilrig.plant.layout import MODEL_SERIAL_ARM
from hilrig.plant.packed import P_T, PackedStep
from hilrig.plant.stepping import advance

MOTOR = {"rotor_inertia": 2e-4, "resistance": 2.0, "inductance": 2e-3, "torque_constant": 0.5,
         "back_emf_constant": 0.5, "gear_ratio": 50.0}
CASES = {
    "arm, torque, RK4": (arm_config(q0=[0.4, -0.4, 0.5]), METHOD_RK4),
    "arm, full motor model, RK4": (arm_config(q0=[0.4, -0.4, 0.5], drive="voltage_full",
                                              motor=MOTOR), METHOD_RK4),
    "arm, semi-implicit Euler": (arm_config(q0=[0.4, -0.4, 0.5]), METHOD_EULER),
    "3RRR, projection, RK4": (config("rrr3_pd"), METHOD_RK4),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_packed_step_equals_advance(case, rng):
    cfg, method = CASES[case]
    packed_plant, plant = plant_from_config(cfg), plant_from_config(cfg)
    correction = correction_id(cfg)
    packed = PackedStep(packed_plant, 1e-3, method, correction)
    nact = plant.nact
    for k in range(300):
        if k == 100 and plant.model == MODEL_SERIAL_ARM:   # a jam, through the plant
            plant.start_jam(2, 0.0405)
            packed_plant.start_jam(2, 0.0405)
        u = rng.uniform(-5, 5, nact)
        packed.u[:] = u
        assert packed.step()
        assert advance(plant.params, plant.jams, plant.t, plant.x, u, 1e-3, method, correction,
                       plant.work, plant.stages, for_plant(plant))
        plant.t += 1e-3
        assert np.array_equal(packed_plant.x, plant.x)
        assert np.array_equal(packed_plant.jams, plant.jams)
    assert packed_plant.t == plant.t == packed.block[P_T]


def test_packed_step_reports_an_invalid_state_and_keeps_the_time():
    plant = plant_from_config(arm_config())
    packed = PackedStep(plant, 1e-3, METHOD_RK4)
    plant.x[4] = np.nan
    assert not packed.step()
    assert not packed.call(packed.block)
    assert plant.t == 0.0 and packed.block[P_T] == 0.0


def test_plant_link_steps_through_the_packed_call():
    """drivers.inprocess.PlantLink: write holds the command over h and advances the plant."""
    from hilrig.drivers.inprocess import PlantLink
    from hilrig.drivers.link import Measurement
    cfg = arm_config(q0=[0.4, -0.4, 0.5])
    plant, reference = plant_from_config(cfg), plant_from_config(cfg)
    link = PlantLink(plant, 1e-3)
    link.open()
    meas = Measurement(3)
    for k in range(50):
        u = np.array([1.0, -2.0, 0.5]) * np.sin(0.1 * k)
        link.write(u)
        advance(reference.params, reference.jams, reference.t, reference.x, u, 1e-3, METHOD_RK4,
                0, reference.work, reference.stages, for_plant(reference))
        reference.t += 1e-3
    assert link.read(meas)
    assert meas.t == reference.t
    assert np.array_equal(meas.pos, reference.x[:3]) and np.array_equal(meas.vel, reference.x[3:])
