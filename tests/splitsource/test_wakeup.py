"""WakeUp against the race that lost PostgreSQL's cancels: a cut that reaches the call before it really runs is
lost, so a wake-up cuts again until the call ends, never the next call; and the short path's reader uses it. Each
blocking call here waits on events the test controls, and counts the cuts it saw: no verdict waits on the clock."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest

from splitsource import KeyRange, WakeUp, Woken
from tests.fixtures import first_split
from tests.splitsource.custom_connector import UnsizedSource

DEADLINE_S = 60.0


class LosingCall:
    """A blocking call that ignores the first ``lost`` cuts (they reached it before it ran), and raises at the
    next; ``started`` is set once it runs."""

    def __init__(self, lost: int = 1) -> None:
        self.lost = lost
        self.cuts = 0
        self.started = threading.Event()
        self._cut = threading.Condition()

    def cut(self) -> None:
        with self._cut:
            self.cuts += 1
            self._cut.notify_all()

    def run(self) -> str:
        self.started.set()
        with self._cut:
            if not self._cut.wait_for(lambda: self.cuts > self.lost, DEADLINE_S):
                return "ran to its end"
        raise InterruptedError("cut")


def test_a_wake_up_whose_first_cut_is_lost_cuts_the_call_again_until_it_ends() -> None:
    call = LosingCall(lost=1)
    wake = WakeUp(call.cut, every_s=0.01)
    outcome: list[object] = []

    def fetch() -> None:
        try:
            with wake.call():
                outcome.append(call.run())
        except InterruptedError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=fetch)
    reader.start()
    assert call.started.wait(DEADLINE_S)
    wake.wake_up()
    reader.join(DEADLINE_S)
    assert isinstance(outcome[0], InterruptedError) and call.cuts >= 2, (outcome, call.cuts)
    assert wake.woken() and not wake.woken()  # said once


def test_a_wake_up_before_the_call_stops_it_from_starting_and_none_reaches_the_next_call() -> None:
    call = LosingCall(lost=0)
    wake = WakeUp(call.cut, every_s=0.01)
    wake.wake_up()  # no call runs: nothing to cut
    with pytest.raises(Woken):
        with wake.call():
            call.run()
    assert call.cuts == 0 and not call.started.is_set()
    assert wake.woken()
    with wake.call():  # the next call runs whole: no cut of the last wake-up reaches it
        pass
    assert call.cuts == 0


class LosingSource(UnsizedSource):
    """Keys in ranges of 100, whose first read blocks, ignoring the first interrupt (it came before the read ran)."""

    name = "losing"
    calls: LosingCall

    def connect(self) -> Any:
        return self.calls

    def interrupt(self, connection: Any) -> None:
        connection.cut()

    def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        if not connection.started.is_set():
            connection.run()
        return super().read(connection, split, limit)


def test_the_short_path_s_reader_is_woken_from_a_read_that_lost_the_first_interrupt() -> None:
    source = LosingSource({"rows": "250"})
    source.calls = LosingCall(lost=1)
    enumerator, split = first_split(source)
    reader = source.create_split_reader()
    reader.add_splits([split])
    fetched: list[Any] = []
    fetching = threading.Thread(target=lambda: fetched.append(reader.fetch()))
    fetching.start()
    assert source.calls.started.wait(DEADLINE_S)
    reader.wake_up()
    fetching.join(DEADLINE_S)
    assert not fetching.is_alive() and not fetched[0].batches, fetched
    assert source.calls.cuts >= 2
    keys: list[int] = []
    while True:  # the range read again from its start: each key once
        got = reader.fetch()
        keys += [k for _, (batch, _) in got.batches for k in batch.column("n").to_pylist()]
        if got.finished:
            break
    reader.close()
    enumerator.close()
    assert keys == list(range(100))

