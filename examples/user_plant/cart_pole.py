"""A user's own plant: a cart-pole as a hilrig chain (hilrig.plant.interface.ChainModel).

Coordinates q = [x (m, cart position), theta (rad, pole angle from hanging straight
down, counter-clockwise)]; only the cart is actuated (nact = 1: a force in N, or a DC
motor's voltage with plant.drive = "voltage"). The pole is a uniform rod of mass m and
length L hinged on the cart; l = L/2 is its centre of mass, I = m L^2 / 3 its inertia
about the hinge. From T = 1/2 (M + m) xd^2 + m l xd thd cos(theta) + 1/2 I thd^2 and
V = -m g l cos(theta):

    M(q) = [[M + m,            m l cos(theta)],
            [m l cos(theta),   I             ]]
    bias = [-m l sin(theta) thd^2 + b_x xd,  m g l sin(theta) + b_theta thd]

(tests/test_user_plant.py derives both again with sympy.) hilrig adds the drives, jams,
integrators, the loops and telemetry. Use it by name in a config,
``plant.model = "cart_pole:CART_POLE"`` (run from this folder), or install this folder
(``pip install ./examples/user_plant``): its pyproject.toml registers the model as
``cart_pole`` in the entry-point group ``hilrig.plants``.
"""
import math

import numpy as np
from hilrig.plant.interface import ChainModel
from hilrig.schema import Key
from numba import njit

# params layout
CART_MASS, POLE_MASS, POLE_LENGTH, GRAVITY, CART_DAMPING, POLE_DAMPING = range(6)


@njit
def mechanism(q, qd, params, mass, bias):
    """M(q) and bias of the cart-pole (see the module docstring); returns V (J)."""
    cart, pole, length = params[CART_MASS], params[POLE_MASS], params[POLE_LENGTH]
    g = params[GRAVITY]
    l = 0.5 * length
    s, c = math.sin(q[1]), math.cos(q[1])
    mass[0, 0] = cart + pole
    mass[0, 1] = pole * l * c
    mass[1, 0] = pole * l * c
    mass[1, 1] = pole * length * length / 3.0
    bias[0] = -pole * l * s * qd[1] * qd[1] + params[CART_DAMPING] * qd[0]
    bias[1] = pole * g * l * s + params[POLE_DAMPING] * qd[1]
    return -pole * g * l * c


def params(plant) -> np.ndarray:
    """The mechanism's params from the resolved [plant] table (typed: cfg.plant)."""
    return np.array([plant.cart_mass, plant.pole_mass, plant.pole_length,
                     plant.gravity, plant.cart_damping, plant.pole_damping])


CART_POLE = ChainModel(
    name="cart_pole", mechanism=mechanism, nq=2, nact=1, params=params,
    dissipation=("cart_damping", "pole_damping"),
    keys={"cart_mass": Key("float", 1.0, positive=True, doc="M, kg"),
          "pole_mass": Key("float", 0.2, positive=True, doc="m, kg"),
          "pole_length": Key("float", 0.6, positive=True, doc="L, m"),
          "gravity": Key("float", 9.81, minimum=0.0, doc="g, m/s^2, downwards"),
          "cart_damping": Key("float", 0.0, minimum=0.0, doc="b_x, N s/m"),
          "pole_damping": Key("float", 0.0, minimum=0.0, doc="b_theta, N m s/rad")})
