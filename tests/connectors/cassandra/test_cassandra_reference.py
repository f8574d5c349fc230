"""verify's parts of a Cassandra table: equal token widths, disjoint, together every token read once."""

from __future__ import annotations

from typing import Any

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


@pytest.mark.cassandra
def test_verify_reads_uuids_as_the_server_s_text_equal_to_the_inserted_values(cassandra: Any,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """verify's reference selects a top-level uuid or timeuuid as ``CAST(c AS text)``: the server's text of each
    inserted value is Python's ``str`` of it (random v4 uuids, v1 time uuids, the extremes, a null), and a uuid
    inside a collection still comes through the driver."""
    import uuid

    values = [uuid.uuid4() for _ in range(200)] + [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
    times = [uuid.uuid1(node=i, clock_seq=i) for i in range(len(values))]
    columns = "id int PRIMARY KEY, u uuid, t timeuuid, l list<uuid>"
    with cassandra.fresh_table("splitsource_ref", "uuids", columns) as session:
        insert = session.prepare("INSERT INTO splitsource_ref.uuids (id, u, t, l) VALUES (?, ?, ?, ?)")
        for i, (u, t) in enumerate(zip(values, times, strict=True)):
            session.execute(insert, (i, u, t, [u, t]))
        session.execute(insert, (len(values), None, None, None))
    source = CassandraSource({"hosts": cassandra.hosts, "port": str(cassandra.port), "keyspace": "splitsource_ref",
                              "table": "uuids"})
    assert source.schema().names == ["id", "l", "t", "u"]
    from connectors.cassandra import _source

    selected: list[list[str]] = []
    real = _source.reference_rows

    def recorded(session: Any, keyspace: str, table: str, selectors: list[str], *args: Any) -> Any:
        selected.append(selectors)
        return real(session, keyspace, table, selectors, *args)

    monkeypatch.setattr(_source, "reference_rows", recorded)
    for parts in (1, 3):
        got = {row[0]: row[1:] for part in range(parts) for row in source.reference_rows(part, parts)}
        want = {i: ([str(u), str(t)], str(t), str(u)) for i, (u, t) in enumerate(zip(values, times, strict=True))}
        want[len(values)] = (None, None, None)
        assert got == want
    assert selected[0] == ['"id"', '"l"', 'CAST("t" AS text)', 'CAST("u" AS text)']  # no UUID built here
