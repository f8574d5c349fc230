"""Throttle and the job-wide read rate: a fake clock for the pacing itself, a real reader for its use."""

from __future__ import annotations

import pytest

from connectors.generator import GeneratorSource
from splitsource._planning import FrameworkOptions, ReadRate, concurrent_readers
from splitsource.runtime import SourceReader, _source_reader
from splitsource.runtime._throttle import Throttle


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_reader_faster_than_its_rate_is_held_to_it_exactly() -> None:
    clock = FakeClock()
    throttle = Throttle(ReadRate(rows_per_s=1000), clock=clock, sleep=clock.sleep)
    for _ in range(50):
        throttle(100, 10)  # an instant source: every second of the time line is slept
    assert clock.now - 100.0 == pytest.approx(5.0)  # 5,000 rows at 1,000 rows/s
    assert throttle.waited == pytest.approx(5.0)


def test_a_slower_reader_is_never_slowed_and_idle_time_buys_one_batch_at_most() -> None:
    clock = FakeClock()
    throttle = Throttle(ReadRate(rows_per_s=1000), clock=clock, sleep=clock.sleep)
    for _ in range(10):
        clock.now += 0.2  # the source takes 0.2 s per 100 rows: half the rate
        throttle(100, 0)
    assert clock.slept == []
    clock.now += 60  # idle a minute (a commit, no split): it pays for the next batch, not for more
    for _ in range(3):
        throttle(1000, 0)
    assert sum(clock.slept) == pytest.approx(2.0)


def test_the_tighter_of_the_row_and_byte_limits_paces() -> None:
    clock = FakeClock()
    throttle = Throttle(ReadRate(rows_per_s=1000, bytes_per_s=1000 * 1000), clock=clock, sleep=clock.sleep)
    throttle(100, 1_000_000)  # 0.1 s by rows, 1 s by bytes
    assert clock.now - 100.0 == pytest.approx(1.0)
    throttle(1000, 1000)  # 1 s by rows, 1 ms by bytes
    assert clock.now - 100.0 == pytest.approx(2.0)
    assert Throttle(ReadRate(), clock=clock, sleep=clock.sleep)(10**9, 10**12) is None and clock.slept == [1.0, 1.0]


def test_the_job_rate_is_shared_by_the_readers_that_run_at_once() -> None:
    framework = FrameworkOptions(connector="generator", max_rows_per_second=1000, max_mb_per_second=2)
    assert framework.rate == ReadRate(1000, 2 * 1024 * 1024)
    assert concurrent_readers(framework, tasks=8, slots=2) == 2  # waves of two tasks
    assert concurrent_readers(framework, tasks=1, slots=2) == 1  # one task alone gets the whole rate
    assert concurrent_readers(framework, tasks=5) == 5  # slots unknown: all at once
    assert concurrent_readers(FrameworkOptions(connector="g", reader_slots=3), tasks=8, slots=2) == 3
    assert framework.rate.shared(4) == ReadRate(250, 0.5 * 1024 * 1024)
    assert not FrameworkOptions(connector="g").rate.limited


def test_a_throttled_reader_sleeps_its_share_and_reads_every_row_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the reader's throttle on the fake clock, which stands still while the source works: every batch's share is
    # slept, however fast this machine reads (on the real clock, a loaded machine's slow reads slept less)
    clock = FakeClock()
    monkeypatch.setattr(_source_reader, "Throttle", lambda rate: Throttle(rate, clock=clock, sleep=clock.sleep))
    source = GeneratorSource({"rows": "3000", "split_rows": "1000", "batch_rows": "500"})
    enumerator = source.create_enumerator(None)  # type: ignore[arg-type]
    reader = SourceReader(source, enumerator.next_split, rate=ReadRate(rows_per_s=10_000))
    ids = [i for b in reader.read() for i in b.column("id").to_pylist()]
    assert ids == list(range(3000))
    assert clock.slept == pytest.approx([0.05] * 6)  # 6 batches of 500 rows at 10,000 rows/s
    assert reader.metrics.throttled_s == pytest.approx(0.3)
