"""Reaching a running process from another: ``hilrig.connect``, ``hil fault``, ``hil estop``, the run list."""
