"""Controllers: turn measurements (joint positions and rates) and a reference into commands.

A controller never sees the plant's internal state and never knows whether the
plant is emulated or real.
"""
