"""The Cassandra connector against the real local Cassandra 5.0."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors.cassandra import CassandraConnectionError, CassandraSource
from scripts.cassandra import insert_rows
from splitsource import OptionsError, read_local, testing
from splitsource.runtime import RetryPolicy, SourceReader

pytestmark = pytest.mark.cassandra
KS = "splitsource_test"
ROWS = 20_000
INSERTED = [(f"r{i % 7}", i // 2, i % 2, i * 0.5, None if i % 10 == 0 else f"note-{i}") for i in range(ROWS)]


@pytest.fixture(scope="module")
def loaded(cassandra: Any) -> Iterator[Any]:
    cluster, session = cassandra.session()
    session.execute(f"CREATE KEYSPACE IF NOT EXISTS {KS} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute(f"DROP TABLE IF EXISTS {KS}.orders")
    session.execute(f"CREATE TABLE {KS}.orders (region text, id int, seq int, amount double, note text, "
                    "PRIMARY KEY ((region, id), seq))")
    insert = session.prepare(f"INSERT INTO {KS}.orders (region, id, seq, amount, note) VALUES (?, ?, ?, ?, ?)")
    insert_rows(session, insert, INSERTED)
    cassandra.nodetool("flush", KS)
    cassandra.nodetool("refreshsizeestimates")
    yield cassandra
    cluster.shutdown()


def options(node: Any, **extra: str) -> dict[str, str]:
    return {"hosts": node.hosts, "port": str(node.port), "keyspace": KS, "table": "orders", **extra}


def driver_rows(node: Any) -> pa.Table:
    """The reference: the rows the fixture inserted, as the test wrote them (nothing read back, no converter of
    ours), in the source's column order."""
    schema = CassandraSource(options(node)).schema()
    rows = [dict(zip(("region", "id", "seq", "amount", "note"), row, strict=True)) for row in INSERTED]
    return pa.Table.from_pylist(rows, schema=schema)


def checksum(table: pa.Table) -> tuple[int, str]:
    rows = sorted(repr(r) for r in testing.rows_of(table).elements())
    return len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()


def test_full_read_equals_driver_read(loaded: Any) -> None:
    source = CassandraSource(options(loaded))
    assert checksum(read_local(source, 2)) == checksum(driver_rows(loaded))


def test_size_estimates_from_the_server_drive_the_plan(loaded: Any) -> None:
    plan = CassandraSource(options(loaded, split_size_mb="1")).plan()
    assert sum(e.estimated_bytes for e in plan) > 0
    total = sum(e.parts for e in plan)
    assert total >= len(plan)  # every ring range at least once; dense ones more


def test_conformance_kit(loaded: Any) -> None:
    # pages small enough that every split has several: wake_up must interrupt a split mid-read, or the kit
    # refuses the check as too trivial
    source = CassandraSource(options(loaded, fetch_size="50", splits="12"))
    testing.check_all(source, expected=driver_rows(loaded))


def test_restore_from_snapshot_reads_exactly_the_remainder(loaded: Any) -> None:
    source = CassandraSource(options(loaded, fetch_size="500", splits="20"))
    for cut in (1, 5, 17):
        testing.check_snapshot_restore(source, driver_rows(loaded), stop_after_batches=cut)


def test_projection_and_composite_partition_key(loaded: Any) -> None:
    source = CassandraSource(options(loaded, columns="id,region,amount"))
    assert source.select_cql().startswith('SELECT "id", "region", "amount" FROM')
    assert 'token("region", "id")' in source.select_cql()  # partition key in schema order
    table = read_local(source)
    assert table.column_names == ["id", "region", "amount"] and table.num_rows == ROWS


def test_read_timeouts_mid_scan_resume_from_paging_state(loaded: Any) -> None:
    from cassandra import ReadTimeout

    source = CassandraSource(options(loaded, fetch_size="300", splits="4"))
    fetches = {"n": 0}
    original = source.create_split_reader

    def flaky_reader() -> Any:
        reader = original()
        real_fetch = reader.fetch

        def fetch() -> Any:
            fetches["n"] += 1
            if fetches["n"] % 5 == 0:
                raise ReadTimeout("injected read timeout", consistency=1, required_responses=1,
                                  received_responses=0, data_retrieved=False)
            return real_fetch()

        reader.fetch = fetch  # type: ignore[method-assign]
        return reader

    source.create_split_reader = flaky_reader  # type: ignore[method-assign]
    enumerator = source.create_enumerator(None)  # type: ignore[arg-type]
    enumerator.start()
    reader = SourceReader(source, enumerator.next_split, retry=RetryPolicy(3, 0.001, 0.01))
    table = pa.Table.from_batches(list(reader.read()), schema=source.schema())
    assert reader.metrics.retries >= 10
    assert checksum(table) == checksum(driver_rows(loaded))


def test_spark_count_and_checksum(loaded: Any, spark: Any) -> None:
    df = spark.read.format("splitsource").option("connector", "cassandra").options(**options(loaded)).load()
    assert df.count() == ROWS
    assert checksum(df.toArrow().cast(CassandraSource(options(loaded)).schema())) == checksum(driver_rows(loaded))


def test_every_cql_type_with_nulls_and_edges(loaded: Any) -> None:
    cluster, session = loaded.session()
    try:
        session.execute(f"CREATE TYPE IF NOT EXISTS {KS}.address (street text, zip int)")
        session.execute(f"DROP TABLE IF EXISTS {KS}.all_types")
        session.execute(
            f"CREATE TABLE {KS}.all_types (k int PRIMARY KEY, a ascii, t text, vc varchar, ti tinyint, si smallint, "
            "i int, bi bigint, vi varint, de decimal, f float, d double, b boolean, bl blob, u uuid, tu timeuuid, "
            "ip inet, ts timestamp, dt date, tm time, du duration, l list<int>, s set<text>, m map<text, int>, "
            "tp tuple<int, text>, ad frozen<address>, fl frozen<list<int>>, v vector<float, 3>)"
        )
        session.execute(f"INSERT INTO {KS}.all_types (k) VALUES (0)")  # every other column null
        session.execute(
            f"INSERT INTO {KS}.all_types (k, a, t, vc, ti, si, i, bi, vi, de, f, d, b, bl, u, tu, ip, ts, dt, tm, du, "
            "l, s, m, tp, ad, fl, v) VALUES (1, 'a', 'ünï', 'v', -128, 32767, -2147483648, 9223372036854775807, "
            "123456789012345678901234567890, 3.14159265358979323846, 1.5, -0.0, true, 0xcafe, "
            "123e4567-e89b-12d3-a456-426614174000, 50554d6e-29bb-11e5-b345-feff819cdc9f, '::1', "
            "'2024-02-29T12:34:56.789Z', '1970-01-01', '23:59:59.999999999', 1mo2d3ns, [1, 2], {'x', 'y'}, "
            "{'k': 1}, (7, 'seven'), {street: 'Main', zip: 12345}, [3], [1.0, 2.0, 3.0])"
        )
        # past datetime's year 9999 and before 1970: kept exact (timestamps are read as epoch milliseconds)
        session.execute(f"INSERT INTO {KS}.all_types (k, ts, tu) VALUES (2, 300000000000001, "
                        "50554d6e-29bb-11e5-b345-feff819cdc9f)")
        session.execute(f"INSERT INTO {KS}.all_types (k, ts) VALUES (3, -86400001)")
    finally:
        cluster.shutdown()
    source = CassandraSource(options(loaded, table="all_types"))
    table = read_local(source)
    micros = dict(zip(table.column("k").to_pylist(), table.column("ts").cast(pa.int64()).to_pylist(), strict=True))
    assert micros[2] == 300_000_000_000_001_000 and micros[3] == -86_400_001_000
    table = table.filter(pc.is_in(table.column("k"), pa.array([0, 1])))
    rows = {r["k"]: r for r in table.to_pylist()}
    assert all(v is None for k, v in rows[0].items() if k != "k")
    one = rows[1]
    assert (one["ti"], one["si"], one["i"], one["bi"]) == (-128, 32767, -2147483648, 9223372036854775807)
    assert one["vi"] == "123456789012345678901234567890" and Decimal(one["de"]) == Decimal("3.14159265358979323846")
    assert one["t"] == "ünï" and one["bl"] == b"\xca\xfe" and one["ip"] == "::1"
    assert one["u"] == str(uuid.UUID("123e4567-e89b-12d3-a456-426614174000"))
    assert one["tu"] == "50554d6e-29bb-11e5-b345-feff819cdc9f"
    assert one["ts"] == datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=timezone.utc)
    assert one["dt"] == date(1970, 1, 1) and one["tm"] == 86_399_999_999_999
    assert one["du"] == {"months": 1, "days": 2, "nanoseconds": 3}
    assert one["l"] == [1, 2] and one["s"] == ["x", "y"] and one["m"] == [("k", 1)]
    assert one["tp"] == {"f0": 7, "f1": "seven"} and one["ad"] == {"street": "Main", "zip": 12345}
    assert one["fl"] == [3] and one["v"] == [1.0, 2.0, 3.0]


def test_unknown_table_and_keyspace_are_named(loaded: Any) -> None:
    """Each a usage error, as a column that does not exist is (exit 2; they were exit 1)."""
    with pytest.raises(OptionsError, match=r"option 'table': table 'splitsource_test.nope' does not exist"):
        CassandraSource(options(loaded, table="nope")).schema()
    with pytest.raises(OptionsError, match=r"option 'keyspace': keyspace 'nope' does not exist"):
        CassandraSource(options(loaded, keyspace="nope")).schema()
    with pytest.raises(OptionsError, match=r"option 'columns': bogus not in"):
        CassandraSource(options(loaded, columns="id,bogus")).schema()
    with pytest.raises(OptionsError, match=r"option 'columns': invalid value 'id,id': names id more than once"):
        CassandraSource(options(loaded, columns="id,id"))  # a schema no format holds: refused before connecting


def test_unreachable_host_fails_within_the_connect_timeout(loaded: Any) -> None:
    t0 = time.monotonic()
    with pytest.raises(CassandraConnectionError, match=r"cannot reach Cassandra at 127.0.0.1:1 within 2s"):
        CassandraSource(options(loaded, hosts="127.0.0.1", port="1", connect_timeout_s="2")).schema()
    assert time.monotonic() - t0 < 15


def test_password_never_shown(loaded: Any) -> None:
    source = CassandraSource(options(loaded, username="u", password="s3cret!"))
    assert "s3cret!" not in repr(source.options)


def test_a_process_opens_one_session_for_its_readers_and_one_for_planning(loaded: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Each reader opened its own session, and so did the schema and each planning step, so a hung node cost a
    connect timeout per reader (per Spark task) and per step; now a process opens one for all its readers and one
    (with the driver's schema) for the schema and planning of every source on the same connection, and a reader's
    close leaves its session open for the next."""
    from connectors.cassandra import _session

    opened: list[object] = []
    connect = _session.connect

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return connect(*args, **kwargs)

    monkeypatch.setattr(_session, "connect", counting)
    monkeypatch.setattr(_session, "_SHARED", {})
    monkeypatch.setattr(_session, "_OPENED", [])
    source = CassandraSource(options(loaded, fetch_size="500", splits="6"))
    splits = list(iter(source.create_enumerator(None).next_split, None))  # type: ignore[arg-type]
    assert source.schema().names and len(opened) == 1, f"{len(opened)} sessions for the schema and the plan"
    rows = 0
    for split in splits:
        reader = source.create_split_reader()
        reader.add_splits([split])
        while not (fetched := reader.fetch()).finished:
            rows += sum(len(raw[0]) for _, raw in fetched.batches)
        rows += sum(len(raw[0]) for _, raw in fetched.batches)
        reader.close()
    assert rows == ROWS
    assert len(opened) == 2, f"{len(opened) - 1} sessions for {len(splits)} readers"
    # another source on the same connection (another table, other read options) plans on the same session
    other = CassandraSource(options(loaded, fetch_size="100", splits="3", columns="id"))
    assert other.schema().names == ["id"] and len(other.plan()) > 0 and len(opened) == 2
    assert len(_session._SHARED) == 2 and not any(c.is_shutdown for c, _ in _session._SHARED.values())
    # the shared schema follows the server at once: a table made, then altered, after the session opened
    cluster, session = loaded.session()
    try:
        session.execute(f"CREATE TABLE {KS}.fresh (k int PRIMARY KEY, a text)")
        assert CassandraSource(options(loaded, table="fresh")).schema().names == ["k", "a"]
        session.execute(f"ALTER TABLE {KS}.fresh ADD b int")
        assert CassandraSource(options(loaded, table="fresh")).schema().names == ["k", "a", "b"]
        assert len(opened) == 2
        # a session whose every node the driver holds down (the cluster restarted under a long-lived process) is
        # replaced by one that connects now
        held, _ = _session.shared_session(source.options, schema_metadata=True)
        for host in held.metadata.all_hosts():
            host.set_down()
        assert _session.shared_session(source.options, schema_metadata=True)[0] is not held
        assert len(opened) == 3 and source.plan()
        # a renewal whose connect fails (the node still down) leaves nothing behind: the next call connects anew
        failed: list[bool] = []

        def failing_once(*args: Any, **kwargs: Any) -> Any:
            if not failed:
                failed.append(True)
                raise _session.CassandraConnectionError("injected: the node is still down")
            return counting(*args, **kwargs)

        monkeypatch.setattr(_session, "connect", failing_once)
        with pytest.raises(_session.CassandraConnectionError, match="injected"):
            _session.shared_session(source.options, schema_metadata=True, renew=True)
        assert failed, "the injected failure never ran"
        assert _session.shared_session(source.options, schema_metadata=True, renew=True)[0] is not held
        assert len(opened) == 4 and source.plan()
    finally:
        session.execute(f"DROP TABLE IF EXISTS {KS}.fresh")
        cluster.shutdown()
        _session._shut_down_shared()
