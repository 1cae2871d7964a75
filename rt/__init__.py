"""Run time: configs, the fixed-step loops, offline runs, live faults and the ``hil`` CLI."""
