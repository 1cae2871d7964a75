"""Signals: SIGTERM as a stop request, and no interruption while a log is finished."""
from __future__ import annotations

import contextlib
import signal
import threading


def terminate_as_interrupt() -> None:
    """Make SIGTERM stop a run the way Ctrl-C does (KeyboardInterrupt)."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def deferred_signals():
    """Ignore Ctrl-C and SIGTERM inside (main thread only), e.g. while closing a log."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
