"""Run time: the loops. The paced real-time loop in one compiled kernel (realtime) and
its session (``hil run``), the loop over a link (``hil control``), the offline lockstep
and ``hil sim`` (lockstep, sim, accurate), the replay of a log, and the
live-parameter mailbox the loops take changes from."""
