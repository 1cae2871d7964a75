"""The flexible chain on the ground (paper 004): the chain, its contact, its integrators, its plant model."""
