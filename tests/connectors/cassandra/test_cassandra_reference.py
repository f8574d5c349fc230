"""verify's parts of a Cassandra table: equal token widths, disjoint, together every token read once."""

from __future__ import annotations

import pytest

from connectors.cassandra._source import CassandraSource

MURMUR3 = (-(2**63), 2**63 - 1)


@pytest.mark.parametrize("token_range", ["", "-100,100", "9223372036854775000,-9223372036854775000", "5,6"])
@pytest.mark.parametrize("parts", [1, 2, 7, 16])
def test_the_parts_cover_every_token_once(token_range: str, parts: int) -> None:
    source = CassandraSource({"keyspace": "k", "table": "t", "token_range": token_range})
    source._ring_bounds = MURMUR3  # the partitioner's bounds, as a connection would tell
    wanted = source.options.token_intervals(*MURMUR3)
    ranges = [r for part in range(parts) for r in source._part_ranges(part, parts)]
    assert all(r.start < r.end for r in ranges)
    # laid end to end, the parts' ranges are exactly the wanted intervals, in order, with no gap and no overlap
    merged: list[list[int]] = []
    for r in ranges:
        if merged and merged[-1][1] == r.start:
            merged[-1][1] = r.end
        else:
            merged.append([r.start, r.end])
    assert [tuple(m) for m in merged] == [(w.start, w.end) for w in wanted]
    widths = [sum(r.width for r in source._part_ranges(part, parts)) for part in range(parts)]
    assert max(widths) - min(widths) <= 1
