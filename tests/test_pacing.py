"""The paced loop's arithmetic (timing.pacing), shared by hil run, hil control and hil
emulate: deadlines that never drift, the deadlines an overrun missed, and the policy."""
from hilrig.timing.pacing import (
    CATCH_UP,
    GO_ON,
    POLICIES,
    SKIP,
    SKIP_TICKS,
    STOP,
    STOP_RUN,
    Pacer,
    after_overrun,
    deadline_ns,
    missed_ticks,
)

PERIOD = 1_000_000    # ns: 1 kHz


def test_deadlines_do_not_drift():
    start = 5_000
    assert [deadline_ns(start, k, PERIOD) for k in (0, 1, 1000)] == \
        [start, start + PERIOD, start + 1000 * PERIOD]


def test_missed_ticks_counts_the_deadlines_passed():
    start, k = 0, 10
    due = start + k * PERIOD
    assert missed_ticks(due - 1, start, k, PERIOD) == 0
    assert missed_ticks(due, start, k, PERIOD) == 0            # on time is not late
    assert missed_ticks(due + 1, start, k, PERIOD) == 1
    assert missed_ticks(due + PERIOD - 1, start, k, PERIOD) == 1
    assert missed_ticks(due + PERIOD, start, k, PERIOD) == 2   # tick k + 1's passed too


def test_policy_after_an_overrun():
    assert POLICIES == {"skip": SKIP, "catch_up": CATCH_UP, "stop": STOP}
    assert after_overrun(SKIP, 100, 3) == SKIP_TICKS
    assert after_overrun(CATCH_UP, 100, 3) == GO_ON
    assert after_overrun(STOP, 2, 3) == SKIP_TICKS             # below the limit: skip
    assert after_overrun(STOP, 3, 3) == STOP_RUN


def test_pacer_counts_only_late_ticks_and_applies_the_policy():
    pacer = Pacer(PERIOD, 0, STOP, max_overruns=2)
    pacer.warm_up()
    start = pacer.start()
    assert pacer.deadline(3) == start + 3 * PERIOD
    assert pacer.overrun(3, start + 3 * PERIOD) == (0, GO_ON)
    assert pacer.overruns == 0
    assert pacer.overrun(3, start + 5 * PERIOD + 1) == (3, SKIP_TICKS)
    assert pacer.overrun(7, start + 7 * PERIOD + 1) == (1, STOP_RUN)
    assert pacer.overruns == 2


def test_pacer_wait_wakes_at_or_after_the_deadline():
    pacer = Pacer(PERIOD, 200_000)
    pacer.start()
    for k in range(1, 4):
        deadline, wake = pacer.wait(k)
        assert deadline == pacer.deadline(k) and wake >= deadline
