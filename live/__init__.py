"""The live view and live tuning of a running loop: Foxglove, ``hil set``, ``--watch``."""
