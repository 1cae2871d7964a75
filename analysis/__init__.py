"""Analysis and plots of a plant or a run: ``hil analyze``, ``hil plot``."""
