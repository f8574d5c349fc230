"""Token ranges and the plan, without a server."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.cassandra import PlanEntry, TokenRange, build_plan, ring_ranges, split_range

LO, HI = -(2**63), 2**63 - 1


def covered(ranges: list[TokenRange]) -> list[tuple[int, int]]:
    return sorted((r.start, r.end) for r in ranges)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(LO, HI), max_size=40))
def test_ring_covers_min_to_max_exactly_once(tokens: list[int]) -> None:
    ranges = sorted(ring_ranges(tokens, LO, HI), key=lambda r: r.start)
    assert ranges[0].start == LO and ranges[-1].end == HI  # the maximum token is inside (inclusive end)
    for a, b in zip(ranges, ranges[1:], strict=False):
        assert a.end == b.start and a.end > a.start


@given(st.integers(LO, HI - 1), st.integers(1, 10**18), st.integers(1, 50))
def test_split_range_is_contiguous_and_exact(start: int, width: int, parts: int) -> None:
    rng = TokenRange(start, min(HI, start + width))
    pieces = split_range(rng, parts)
    assert pieces[0].start == rng.start and pieces[-1].end == rng.end
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:], strict=False))


def test_dense_ranges_get_more_splits_than_equal_width() -> None:
    a, b = TokenRange(LO, 0), TokenRange(0, HI)
    plan = build_plan([(a, ("n1",)), (b, ("n1",))], {a: 900 * 2**20, b: 10 * 2**20},
                      split_bytes=64 * 2**20, total_splits=0, fallback_splits=32)
    parts = {(e.start, e.end): e.parts for e in plan}
    assert parts[(LO, 0)] == 15 and parts[(0, HI)] == 1


def test_requested_split_count_is_shared_by_size() -> None:
    a, b = TokenRange(LO, 0), TokenRange(0, HI)
    plan = build_plan([(a, ("n1",)), (b, ("n2",))], {a: 300, b: 100}, split_bytes=1, total_splits=8,
                      fallback_splits=32)
    assert sorted(e.parts for e in plan) == [2, 6]


def test_no_estimates_falls_back_to_width() -> None:
    ranges = ring_ranges([-(2**62), 0, 2**62], LO, HI)
    plan = build_plan([(r, ("n1",)) for r in ranges], {}, split_bytes=1, total_splits=0, fallback_splits=32)
    assert sum(e.parts for e in plan) == 32


def test_plan_interleaves_replica_sets() -> None:
    ranges = ring_ranges([-(2**62), 0, 2**62], LO, HI)
    owners = [("a",), ("a",), ("b",), ("b",)]
    plan = build_plan(list(zip(ranges, owners, strict=True)), {}, split_bytes=1, total_splits=4, fallback_splits=4)
    by_start = {r.start: o for r, o in zip(ranges, owners, strict=True)}
    sequence = [by_start[e.start] for e in plan]
    assert sequence == [("a",), ("b",), ("a",), ("b",)]
    assert isinstance(plan[0], PlanEntry)



def test_size_estimates_are_asked_of_all_nodes_at_once_within_the_bound() -> None:
    import threading
    import time

    from connectors.cassandra._options import CassandraOptions
    from connectors.cassandra._planner import gather_estimates
    from splitsource._typed_options import parse_options

    running, most = 0, 0
    lock = threading.Lock()

    class Session:  # a node answers in 20 ms: one row, its own
        def execute(self, query: str, params: tuple[str, str], host: str) -> list[tuple[int, int, int, int]]:
            nonlocal running, most
            with lock:
                running += 1
                most = max(most, running)
            time.sleep(0.02)
            with lock:
                running -= 1
            return [(int(host), int(host) + 1, 10, 1)]

    options = parse_options(CassandraOptions, {"hosts": "h", "keyspace": "k", "table": "t"})
    rows = gather_estimates(Session(), [str(i) for i in range(64)], options, in_flight=8)
    assert sorted(r[0] for r in rows) == list(range(64)), "every node's rows, once"
    assert most == 8, f"{most} requests in flight at most, not the bound 8"
