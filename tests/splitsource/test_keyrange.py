"""The short path's hooks, on a source of numbers in memory: the plan's lifecycle, an incremental run with nothing
to read, a plan that must not move, reports, and pages of no rows that read past keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from splitsource import CheckpointError, FixedEnumeratorContext, KeyRange, KeyRangeSource, ProtocolError, option


@dataclass(frozen=True)
class _Options:
    count: int = option(10, doc="numbers 0..count-1", minimum=0)
    guard: str = option("", doc="what the plan stands on")
    step: int = option(1, doc="keys a page reads past: every other key holds no row when 2")


class Numbers(KeyRangeSource[_Options]):
    name = "numbers"
    options_class = _Options
    page_rows = 3

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> None:
        self.calls.append("stop")

    def instant(self) -> dict[str, str]:
        return {"at": "now"}

    def changed(self) -> bool:
        return self.options.count > 0

    def plan_guard(self) -> str:
        return self.options.guard

    def schema(self) -> pa.Schema:
        return pa.schema([("n", pa.int64())])

    def boundaries(self) -> Any:
        return ((upto, 8) for upto in range(3, self.options.count - 1, 4))

    def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        low = -1 if split.after is None else split.after
        high = self.options.count - 1 if split.upto is None else split.upto
        self.report("page", f"after {low}")
        if self.options.step > 1:  # one key a page; an even key holds no row, and the page reads past it
            key = low + 1
            keys = [key] if key % 2 else []
            return pa.record_batch([pa.array(keys, pa.int64())], names=["n"]), key, key >= high
        keys = list(range(low + 1, min(high, low + limit) + 1))
        last = keys[-1] if keys else None
        return pa.record_batch([pa.array(keys, pa.int64())], names=["n"]), last, last is None or last >= high


def _read_all(source: Numbers) -> tuple[list[int], list[str]]:
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    reader = source.create_split_reader()
    rows, events = [], []
    for split in iter(enumerator.next_split, None):
        reader.add_splits([split])
        while True:
            got = reader.fetch()
            rows += [n for _, (page, _) in got.batches for n in page.column("n").to_pylist()]
            events += [f"{e.kind} {e.split_id}" for e in got.events]
            if got.finished:
                break
    reader.close()
    enumerator.close()
    return rows, events


def test_the_plan_s_hooks_bracket_a_run_and_reports_become_the_reader_s_events() -> None:
    source = Numbers({"count": "10"})
    rows, events = _read_all(source)
    assert rows == list(range(10))
    assert source.calls == ["start", "stop"]
    assert events[:2] == ["page range-0", "page range-0"] and "page range-2" in events


def test_an_incremental_run_with_nothing_changed_plans_no_range_and_hands_on_the_source_s_instant() -> None:
    source = Numbers({"count": "0"})
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    assert enumerator.next_split() is None and enumerator.instant() == {"at": "now"}
    enumerator.close()


def test_a_plan_that_must_not_move_resumes_on_the_same_guard_and_is_refused_on_another() -> None:
    first = Numbers({"count": "10", "guard": "v1"})
    enumerator = first.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    assert enumerator.next_split() == KeyRange(0, None, 3, 8)
    state = enumerator.snapshot_state()
    enumerator.close()
    same = first.restore_enumerator(FixedEnumeratorContext(1), state)
    same.start()
    assert same.next_split() == KeyRange(1, 3, 7, 8)
    moved = Numbers({"count": "10", "guard": "v2"}).restore_enumerator(FixedEnumeratorContext(1), state)
    with pytest.raises(CheckpointError, match=r"the source changed since this copy began \('v1', now 'v2'\)"):
        moved.start()


def test_a_page_of_no_rows_may_read_past_keys_but_must_move_on() -> None:
    rows, _ = _read_all(Numbers({"count": "10", "step": "2"}))
    assert rows == list(range(1, 10, 2))

    class Stuck(Numbers):
        def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
            return pa.record_batch([pa.array([], pa.int64())], names=["n"]), split.after, False

    with pytest.raises(ProtocolError, match="returned 0 rows for a limit of 3, did not end the range and read no "
                                            "key further"):
        _read_all(Stuck({"count": "10"}))
