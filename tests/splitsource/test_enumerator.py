"""SplitEnumerator base behaviour, shown on the full-API enumerator of the generator's rows (full_api.py)."""

from __future__ import annotations

import tracemalloc

from splitsource.runtime import InProcessRuntime
from tests.splitsource.full_api import GeneratorEnumerator, RowsSource


def enumerator(rows: int, split_rows: int) -> GeneratorEnumerator:
    return RowsSource({"rows": str(rows), "split_rows": str(split_rows)}).create_enumerator(None)  # type: ignore[arg-type]


def test_generates_lazily_and_covers_rows_once() -> None:
    e = enumerator(10, 3)
    ranges = []
    while (s := e.next_split()) is not None:
        ranges.append((s.start, s.end))
    assert ranges == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert e.next_split() is None  # stays exhausted


def test_added_back_splits_are_served_first_in_order() -> None:
    e = enumerator(100, 10)
    a, b, _ = e.next_split(), e.next_split(), e.next_split()
    e.add_splits_back([b, a])  # type: ignore[list-item]
    assert e.next_split() == b
    assert e.next_split() == a
    fresh = e.next_split()
    assert fresh is not None and (fresh.index, fresh.start, fresh.end) == (3, 30, 40)


def test_snapshot_is_a_copy() -> None:
    e = enumerator(100, 10)
    e.next_split()
    first = e.next_split()
    e.add_splits_back([first])  # type: ignore[list-item]
    snap = e.snapshot_state()
    e.next_split()
    e.next_split()
    assert snap.position.next_index == 2 and snap.pending == (first,)


def test_restore_never_replans_covered_splits() -> None:
    source = RowsSource({"rows": "100", "split_rows": "10"})
    e = source.create_enumerator(None)  # type: ignore[arg-type]
    seen = {e.next_split().split_id for _ in range(4)}  # type: ignore[union-attr]
    restored = source.restore_enumerator(None, e.snapshot_state())  # type: ignore[arg-type]
    rest = []
    while (s := restored.next_split()) is not None:
        rest.append(s.split_id)
    assert not seen & set(rest) and len(seen) + len(rest) == 10


def test_memory_does_not_grow_with_number_of_splits() -> None:
    e = enumerator(10**12, 1)  # a trillion splits: a list of them would not fit in memory
    tracemalloc.start()
    for _ in range(100_000):
        e.next_split()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000, f"enumerator used {peak} bytes for 100k splits"


def test_runtime_requests_splits_dynamically() -> None:
    source = RowsSource({"rows": "1000", "split_rows": "100"})
    result = InProcessRuntime(source, 3).run()
    assert sum(b.num_rows for b in result.batches) == 1000
    assert result.split_requests >= 10 + 3  # one per split, plus each reader's final 'none left'
