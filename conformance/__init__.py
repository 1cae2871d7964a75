"""Conformance checks for a user's controller, plant and link."""
