"""SIGTERM for the CLI: stop cleanly, and never in the middle of a call into Spark's JVM.

Raising an exception from a signal handler while the main thread is inside a py4j call breaks py4j's protocol
("Answer from Java side is empty") and turns a clean stop into a failure. The Spark engine runs each batch's job
in a thread of its own; its main thread calls into the JVM only briefly, inside :func:`deferred`, where the handler
only records the request, raised as :class:`Terminated` when the call returns.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Terminated", "deferred", "on_sigterm"]

_stop = threading.Event()
_deferring = threading.Event()


class Terminated(KeyboardInterrupt):
    """SIGTERM: the copy stops its Spark job, workers and locks as on Ctrl-C, and exits 143."""


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    if _deferring.is_set():
        _stop.set()  # raised when deferred() ends
        return
    raise Terminated()


@contextmanager
def deferred() -> Iterator[None]:
    """While inside, SIGTERM is recorded instead of raised, and raised as :class:`Terminated` on the way out."""
    _deferring.set()
    try:
        yield
    finally:
        _deferring.clear()
    if _stop.is_set():
        _stop.clear()  # raised once
        raise Terminated()
