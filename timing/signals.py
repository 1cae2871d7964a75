"""Signals: SIGTERM as a stop request; Ctrl-C held back while a log's header is written and
ignored while a log is finished."""
from __future__ import annotations

import contextlib
import signal
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def terminate_as_interrupt() -> None:
    """Make SIGTERM stop a run the way Ctrl-C does (KeyboardInterrupt)."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def ignored_signals():
    """Ignore Ctrl-C and SIGTERM inside (main thread only): for finishing a log, the stop
    such a signal asks for being already under way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        _restore(previous)


@contextlib.contextmanager
def deferred_signals():
    """Hold Ctrl-C and SIGTERM back inside (main thread only), e.g. while a log's header is
    written, and deliver them to their handlers once the block has ended (a
    KeyboardInterrupt is then raised on leaving it). A block that raises keeps its own
    exception, the process ending with it; a held signal is then dropped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame):
        if signum not in held:
            held.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in STOP_SIGNALS}
    try:
        yield
    except BaseException:
        _restore(previous)
        raise
    _restore(previous)
    for sig in held:
        handler = previous[sig]
        if callable(handler):
            handler(sig, None)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(sig)


def _restore(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


class SignalTap:
    """SIGINT and SIGTERM as another thread sees them, while the main thread cannot run
    their handlers (it is inside compiled code: Python runs a handler only between two
    bytecodes of the main thread). ``install`` (main thread only) makes the signals'
    C-level handler write each signal's number into a socket pair
    (``signal.set_wakeup_fd``); a watcher polls ``fileno()`` and reads them with ``take``.
    The Python handlers still run as before, once the main thread gets to them.
    ``wake`` writes a 0, which ``take`` does not return: a watcher's stop. ``close``
    puts back the previous wakeup descriptor."""

    def __init__(self):
        import socket

        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        self._previous: int | None = None

    def install(self) -> bool:
        """Tap the signals; False (nothing done) outside the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._previous = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        return True

    def fileno(self) -> int:
        return self._read.fileno()

    def take(self) -> list[int]:
        """The signal numbers written since the last call (0 for none)."""
        try:
            data = self._read.recv(4096)
        except BlockingIOError:
            return []
        return [number for number in data if number]

    def wake(self) -> None:
        try:
            self._write.send(b"\0")
        except BlockingIOError:      # full: a wake-up is pending anyway
            pass

    def close(self) -> None:
        """Untap (main thread only: elsewhere the tap stays, its sockets open, so that the
        handler never writes into a closed descriptor)."""
        if self._previous is not None:
            if threading.current_thread() is not threading.main_thread():
                return
            signal.set_wakeup_fd(self._previous)
            self._previous = None
        self._read.close()
        self._write.close()
