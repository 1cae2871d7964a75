"""A user's own loop against `hil emulate` in a few lines (hilrig.connect).

    hil emulate configs/rig_zmq.toml --mode lockstep      (another terminal)
    python own_loop.py [ENDPOINT]

Drives every joint to 0.3 rad with a PD in volts (clipped to a 24 V supply), jams joint 2
early on, and prints where the joints ended.
"""
import sys

import hilrig
import numpy as np

endpoint = sys.argv[1] if len(sys.argv) > 1 else "ipc://$RUNTIME/emulator"
with hilrig.connect(endpoint) as plant:
    target = np.full(plant.n_axes, 0.3)
    for tick in range(1500):
        meas = plant.read()
        plant.write(np.clip(300.0 * (target - meas.pos) - 30.0 * meas.vel, -24.0, 24.0))
        if tick == 100:
            ack = plant.jam(joint=2, duration=0.05)
            print(f"joint 2 jammed at tick {ack.tick}, t = {ack.time:.3f} s")
    meas = plant.read()
    print("final pos", " ".join(f"{q:.4f}" for q in meas.pos), plant.command_unit)
