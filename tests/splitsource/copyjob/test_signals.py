"""SIGTERM in the copy: raised at once, except inside a py4j call (``deferred``), where it waits for the call."""

from __future__ import annotations

import os
import signal

import pytest

from splitsource.copyjob._signals import Terminated, deferred, on_sigterm


def test_sigterm_inside_deferred_is_raised_once_when_the_call_returns() -> None:
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        finished = False
        with pytest.raises(Terminated):
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)  # delivered here, in the main thread
                finished = True  # the "py4j call" is not interrupted
        assert finished
        with deferred():
            pass  # raised once: a later call (the session's stop) is not interrupted again
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)  # outside deferred: at once
            signal.sigtimedwait([], 1)  # not reached: the handler raises before
    finally:
        signal.signal(signal.SIGTERM, previous)
