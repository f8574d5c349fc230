"""SourceReader: backpressure, retry from split state, errors naming the split, close."""

from __future__ import annotations

import threading
import time

import pytest

from connectors.generator import GeneratorSource
from splitsource import ProtocolError, SplitReadError
from splitsource.runtime import RetryPolicy, SourceReader
from splitsource.testing import rows_of
from tests.splitsource.fakes import DownForSource, FlakyConnectionSource, GatedSupplySource

FAST = RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.002, max_wait=0)


def supplier(source: GeneratorSource):  # type: ignore[no-untyped-def]
    enumerator = source.create_enumerator(None)  # type: ignore[arg-type]
    return enumerator.next_split


def expected_ids(rows: int) -> list[int]:
    return list(range(rows))


def read_ids(source: GeneratorSource, retry: RetryPolicy = FAST) -> list[int]:
    reader = SourceReader(source, supplier(source), retry=retry)
    return [i for b in reader.read() for i in b.column("id").to_pylist()]


def test_reads_every_row_in_split_order() -> None:
    source = GeneratorSource({"rows": "10000", "split_rows": "3000", "batch_rows": "700"})
    assert read_ids(source) == expected_ids(10000)


def test_transient_failure_mid_split_resumes_without_duplicate_or_gap() -> None:
    source = GeneratorSource(
        {"rows": "10000", "split_rows": "3000", "batch_rows": "700", "fail_at_row": "4500", "fail_times": "2"}
    )
    reader = SourceReader(source, supplier(source), retry=FAST)
    ids = [i for b in reader.read() for i in b.column("id").to_pylist()]
    assert ids == expected_ids(10000)
    assert reader.metrics.retries == 2


def test_transient_failure_past_max_attempts_names_the_split() -> None:
    source = GeneratorSource(
        {"rows": "10000", "split_rows": "3000", "batch_rows": "700", "fail_at_row": "4500", "fail_times": "9"}
    )
    with pytest.raises(SplitReadError,
                       match=r"split\(s\) range-1 failed after 3 attempts over [0-9.]+s: injected failure"):
        read_ids(source)


def test_fatal_failure_is_not_retried_and_names_the_split() -> None:
    source = GeneratorSource({"rows": "1000", "split_rows": "300", "fail_at_row": "650", "fail_kind": "fatal"})
    reader = SourceReader(source, supplier(source), retry=FAST)
    with pytest.raises(SplitReadError, match=r"reading split\(s\) range-2 failed: injected failure at row 650"):
        list(reader.read())
    assert reader.metrics.retries == 0


def test_connection_error_declared_transient_rebuilds_the_split_reader() -> None:
    source = FlakyConnectionSource(rows=5000, fail_every=3)
    reader = SourceReader(source, source.enumerator().next_split, retry=FAST)
    batches = list(reader.read())
    assert rows_of(batches) == rows_of(source.expected())
    assert source.readers_opened > 1  # every retry opened a new split reader from the split state


def test_backpressure_bounds_what_the_fetcher_buffers() -> None:
    source = FlakyConnectionSource(rows=1_000_000, fail_every=10**9)  # counts fetches; one batch per fetch
    reader = SourceReader(source, source.enumerator().next_split, queue_capacity=2)
    it = reader.read()
    next(it)
    deadline = time.monotonic() + 10
    while not reader._queue.full():  # an unbounded queue never fills: the deadline fails the test
        assert time.monotonic() < deadline, "the fetcher never filled its queue"
        time.sleep(0.005)
    # one batch consumed, two queued, at most one fetched and waiting for room: nothing else is buffered
    assert source.fetches <= 4
    it.close()  # abandoning the iteration closes the reader and stops the thread


def test_close_stops_the_fetcher_thread() -> None:
    source = GeneratorSource({"rows": "1000000", "batch_rows": "1000"})
    reader = SourceReader(source, supplier(source), queue_capacity=1)
    it = reader.read()
    next(it)
    it.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(t.name.endswith("-fetcher") for t in threading.enumerate()):
        time.sleep(0.01)
    assert not any(t.name.endswith("-fetcher") for t in threading.enumerate())


def test_read_twice_is_a_protocol_error() -> None:
    source = GeneratorSource({"rows": "10"})
    reader = SourceReader(source, supplier(source))
    list(reader.read())
    with pytest.raises(ProtocolError, match="read\\(\\) called twice"):
        list(reader.read())


def test_empty_source_reads_nothing() -> None:
    assert read_ids(GeneratorSource({"rows": "0"})) == []


def test_a_split_being_handed_out_while_the_reader_stops_is_never_lost() -> None:
    """Bug: the fetcher took a split, then found the reader stopping and dropped it; a snapshot missed it."""
    source = GatedSupplySource()
    reader = SourceReader(source, source.next_split, retry=FAST)
    it = reader.read()
    next(it)  # split 0's only batch
    source.inside_supply.wait(1.0)  # a fetcher that asks for splits itself is inside the supply by now
    remaining = {s.split_id for s in reader.snapshot_splits()}
    finished = set(reader.metrics.finished_splits)
    lost = [s.split_id for s in source.taken if s.split_id not in finished | remaining]
    assert not lost, f"splits taken from the enumerator but neither finished nor in the snapshot: {lost}"
    it.close()


def test_a_node_down_for_a_while_is_waited_for_and_the_read_is_exact() -> None:
    """Bug: re-creating the split reader (connecting) was outside the retry loop: one refused connect failed it."""
    source = DownForSource({"rows": "3000", "split_rows": "1000", "batch_rows": "100"}, down_after_fetches=5,
                           down_for_s=0.5)
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05, max_wait=30)
    reader = SourceReader(source, supplier(source), retry=policy)
    assert [i for b in reader.read() for i in b.column("id").to_pylist()] == expected_ids(3000)
    assert source.refused > policy.max_attempts  # the node was refusing longer than the attempts alone allow


def test_a_node_that_stays_down_fails_after_the_wait_naming_splits_node_and_time() -> None:
    source = DownForSource({"rows": "3000", "split_rows": "1000", "batch_rows": "100"}, down_after_fetches=5,
                           down_for_s=600)
    policy = RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.05, max_wait=0.3)
    reader = SourceReader(source, supplier(source), retry=policy)
    with pytest.raises(SplitReadError, match=r"split\(s\) generator-0 failed after \d+ attempts over 0\.[3-9]s: "
                                             r"cannot reach node 127\.0\.0\.9:9042"):
        list(reader.read())
    assert source.refused >= 2


def test_a_reader_started_while_the_node_is_down_waits_for_it() -> None:
    """A Spark task that starts during the restart: making the emitter (which reads the table's metadata)
    connects, and is retried like a fetch."""
    source = DownForSource({"rows": "2000", "split_rows": "1000", "batch_rows": "100"}, down_after_fetches=-1,
                           down_for_s=0.5, down_at_start=True)
    policy = RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.05, max_wait=30)
    reader = SourceReader(source, supplier(source), retry=policy)
    assert [i for b in reader.read() for i in b.column("id").to_pylist()] == expected_ids(2000)
    assert source.refused > policy.max_attempts


def test_a_value_its_type_cannot_hold_reaches_the_caller_as_itself() -> None:
    """The connector's ValueRangeError names the column and the way round: the reader passes it on as it is (its
    class and message), never retried and never wrapped in a generic read failure."""
    from splitsource import RecordsBySplits, ValueRangeError
    from tests.splitsource.full_api import GeneratorSplitReader, RowsSource

    class Refusing(GeneratorSplitReader):
        def fetch(self) -> RecordsBySplits[object]:
            raise ValueRangeError("column at holds infinity (row id=2); add -o text_columns=at", 2)

    source = RowsSource({"rows": "1000", "split_rows": "500"})
    source.create_split_reader = lambda: Refusing(source)  # type: ignore[method-assign]
    reader = SourceReader(source, supplier(source), retry=FAST)
    with pytest.raises(ValueRangeError, match=r"^column at holds infinity \(row id=2\); add -o text_columns=at$"):
        list(reader.read())
    assert reader.metrics.retries == 0
