"""Throttle: paces one reader to its share of the job's read rate."""

from __future__ import annotations

import time
from collections.abc import Callable

from splitsource._planning import ReadRate

__all__ = ["Throttle"]


class Throttle:
    """Paces a reader to ``rate`` (rows and bytes per second), called with each batch it emits.

    Each batch costs ``max(rows / rows_per_s, bytes / bytes_per_s)`` seconds of the reader's time line, which
    starts when the throttle is made (the reader starts). The time a batch took to produce counts towards its
    cost: the line advances from where it stands or from the end of the previous call, whichever is later, and
    the call sleeps until the clock catches up with it. So a reader faster than its rate is held to it exactly
    over any stretch from its start, a slower one is never slowed, and time spent idle (waiting for a split, a
    commit) is not saved up: at most one batch goes out early after it. While the reader's consumer sleeps, its
    fetcher thread blocks on the full queue, so the source itself is read at this rate.
    """

    def __init__(self, rate: ReadRate, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._rate = rate
        self._clock = clock
        self._sleep = sleep
        self._ready = self._last = clock()
        self.waited = 0.0  # seconds slept, for summaries

    def __call__(self, rows: int, nbytes: int) -> None:
        rate = self._rate
        cost = max(rows / rate.rows_per_s if rate.rows_per_s > 0 else 0.0,
                   nbytes / rate.bytes_per_s if rate.bytes_per_s > 0 else 0.0)
        self._ready = max(self._ready, self._last) + cost
        wait = self._ready - self._clock()
        if wait > 0:
            self._sleep(wait)
            self.waited += wait
        self._last = self._clock()
