"""Real time: configs, the fixed-step loop, offline runs, telemetry and the ``hil`` CLI."""
