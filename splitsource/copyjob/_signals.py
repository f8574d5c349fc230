"""SIGTERM for the CLI: stop cleanly, and never in the middle of a call into Spark's JVM.

Raising an exception from a signal handler while the main thread is inside a py4j call breaks py4j's protocol
("Answer from Java side is empty") and turns a clean stop into a failure. So while a Spark query runs, the handler
only records the request (:func:`deferred`), and the copy's progress loop stops the query at its next tick.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Terminated", "deferred", "on_sigterm", "stop_requested"]

_stop = threading.Event()
_deferring = threading.Event()


class Terminated(KeyboardInterrupt):
    """SIGTERM: the copy stops its query, workers and locks as on Ctrl-C, and exits 143."""


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    if _deferring.is_set():
        _stop.set()  # picked up by the loop that runs inside deferred()
        return
    raise Terminated()


def stop_requested() -> bool:
    return _stop.is_set()


@contextmanager
def deferred() -> Iterator[None]:
    """While inside, SIGTERM is recorded instead of raised; the caller polls :func:`stop_requested`."""
    _deferring.set()
    try:
        yield
    finally:
        _deferring.clear()
    if _stop.is_set():
        raise Terminated()
