"""WakeUp: a split reader's ``wake_up`` that cuts its blocking call short, however the two race, written once.

A reader's fetch blocks in one call at a time (a query, a page of a cursor); ``wake_up`` comes from another thread
and must make that call return soon. Cutting a call is the server's or driver's own (libpq's cancel, SQLite's
``interrupt()``), and most of them do nothing when no call runs: a cut that lands just before the call starts, or
while the server is still reading the call, is lost. So a wake-up that finds a call running cuts it again, a few
times a second, until that call ends; one that finds none makes the next call refuse to start. A cut is never
sent to the call after the one it was for::

    class MyReader(SplitReader[MySplit, Raw]):
        def __init__(self, source):
            self._connection = None
            self._wake = WakeUp(lambda: self._connection.cancel())

        def fetch(self):
            try:
                with self._wake.call():
                    rows = self._connection.query(...)
            except Exception:
                if self._wake.woken():  # cut short: nothing read, the next fetch asks again
                    return RecordsBySplits()
                raise
            ...

        def wake_up(self):
            self._wake.wake_up()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["WakeUp", "Woken"]


class Woken(Exception):
    """Raised by :meth:`WakeUp.call` when a wake-up came before the call started: do not start it."""


class WakeUp:
    """The wake-up of one reader: ``cut()`` makes the call running now return soon (by raising, as drivers do); it is
    sent every ``every_s`` seconds while the call a wake-up found runs, for at most ``for_s`` seconds."""

    def __init__(self, cut: Callable[[], None], every_s: float = 0.05, for_s: float = 30.0) -> None:
        self._cut = cut
        self._every_s, self._for_s = every_s, for_s
        self._guard = threading.Lock()
        self._woken = False
        self._calls = 0
        self._running = 0  # the number of the call running now; 0: none

    @contextmanager
    def call(self) -> Iterator[None]:
        """Around one blocking call; raises :class:`Woken` instead of starting it after a wake-up."""
        with self._guard:
            if self._woken:
                raise Woken()
            self._calls += 1
            self._running = self._calls
        try:
            yield
        finally:
            with self._guard:
                self._running = 0

    def woken(self) -> bool:
        """Whether a wake-up came since the last time this said so (and the fetch should return nothing)."""
        with self._guard:
            woken, self._woken = self._woken, False
            return woken

    def wake_up(self) -> None:
        with self._guard:
            self._woken = True
            running = self._running
        if running:
            threading.Thread(target=self._cut_until_over, args=(running,), name="splitsource-wake-up",
                             daemon=True).start()

    def _cut_until_over(self, call: int) -> None:
        deadline = time.monotonic() + self._for_s
        while time.monotonic() < deadline:
            with self._guard:  # the call cannot end, nor the next begin, while it is cut
                if self._running != call:
                    return
                try:
                    self._cut()
                except Exception:  # noqa: BLE001 - a connection closed meanwhile has nothing to cut
                    return
            time.sleep(self._every_s)
