"""The bounded cost of rejected frames: a flood of bad frames is counted, not narrated.

Per window of ``window`` s (1 s), the first frame rejected for each reason is logged
and recorded with its full detail; the others are only counted, and when the window
closes one line (and one ``rejected`` event) gives their number per reason. ERROR
replies are rate-limited the same way: at most ``replies`` per window in all, so a
flooding peer cannot make the emulator spend its tick answering it. Memory is bounded:
a reason is a short fixed text (the detail is kept only for the first of its window),
and at most MAX_REASONS of them are told apart (the rest count as "other").
"""
from __future__ import annotations

import time

MAX_REASONS = 32


class RejectLog:
    """Counts rejected frames per reason and window; tells the caller what to do with each."""

    def __init__(self, window: float = 1.0, replies: int = 200):
        self.window_ns = int(window * 1e9)
        self.replies = replies
        self.total = 0                   # every rejected frame since the start
        self.window_start = time.monotonic_ns()
        self.counts: dict[str, int] = {}     # reason -> frames in this window
        self.sent = 0                    # ERROR replies in this window

    def note(self, reason: str) -> tuple[bool, bool]:
        """Count one rejected frame; (first of its reason in this window, send an ERROR)."""
        self.total += 1
        counts = self.counts
        if reason not in counts and len(counts) >= MAX_REASONS:
            reason = "other"
        n = counts.get(reason, 0)
        counts[reason] = n + 1
        reply = self.sent < self.replies
        self.sent += reply
        return n == 0, reply

    def close_window(self, now_ns: int, force: bool = False) -> dict | None:
        """When the window is over (or ``force``): start the next and return {reason:
        frames not logged one by one} (None when the window is still open or there were
        none)."""
        if not force and now_ns - self.window_start < self.window_ns:
            return None
        suppressed = {reason: n - 1 for reason, n in self.counts.items() if n > 1}
        self.window_start = now_ns
        self.counts = {}
        self.sent = 0
        return suppressed or None
