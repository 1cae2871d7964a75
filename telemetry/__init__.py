"""Telemetry: the ring of per-tick rows, its MCAP writer and reader, derived diagnostics."""
