"""The flexible P-R robot (paper 002): the beam elements and the plant model."""
