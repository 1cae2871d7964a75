"""Fitting the emulated plant to a rig's log (docs/IDENTIFY.md): exciting trajectories
(``excite``: hil excite), the serial arm's regressor and base parameters (``regressor``),
logs to filtered samples (``data``), the fit (``fit``: hil identify) and its validation on
another log (``validate``: hil identify --validate)."""
