"""Emulated devices: the plant behind the protocols of the links (ZeroMQ, CiA 402 over CAN,
packet serial), so the same controller code runs against them and against the rig."""
