"""The PostgreSQL connector against real servers (15 and 18): the conformance kit with the inserted rows as the
truth, key and block ranges, composite keys, partitions, and splits near their target on skewed tables."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import hashlib
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors.postgres import PostgresSource, _reader
from connectors.postgres._reader import key_condition
from splitsource import FixedEnumeratorContext, KeyRange, OptionsError, ValueRangeError, testing
from tests.connectors.postgres.conftest import expected_events, make_events, options
from tests.fixtures import PostgresServer, first_split

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]


def _truth(rows: int) -> pa.Table:
    truth = expected_events(rows)
    return pa.table({"id": list(truth), "name": [v[0] for v in truth.values()],
                     "score": [v[1] for v in truth.values()], "flag": [v[2] for v in truth.values()]})


@pytest.mark.parametrize("split_by", ["key", "blocks"])
def test_the_kit_passes_against_the_inserted_rows(postgres: PostgresServer, table_name: str, split_by: str) -> None:
    make_events(postgres, table_name, 30_000)
    source = PostgresSource(options(postgres, table_name, columns="id,name,score,flag", split_by=split_by,
                                    split_size_mb="0.5", page_rows="2000", page_mb="0.1"))
    testing.check_all(source, expected=_truth(30_000))


def test_a_composite_key_and_a_partitioned_table(postgres15: PostgresServer, table_name: str) -> None:
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (region text, id int4, v text, PRIMARY KEY (region, id)) "
                     "PARTITION BY LIST (region)")
        for region in ("east", "west", "north"):
            conn.execute(f"CREATE TABLE {table_name}_{region} PARTITION OF {table_name} FOR VALUES IN ('{region}')")
        conn.execute(f"INSERT INTO {table_name} SELECT r, i, r || i FROM unnest(ARRAY['east', 'west', 'north']) r, "
                     "generate_series(1, 8000) i")
        conn.execute(f"ANALYZE {table_name}")
    source = PostgresSource(options(postgres15, table_name, split_size_mb="0.1", page_rows="1500"))
    assert source.key_columns() == ["region", "id"]
    enumerator = source.create_enumerator(FixedEnumeratorContext(2))
    enumerator.start()
    ends = [s.upto for s in iter(enumerator.next_split, None)]
    enumerator.close()
    # key ranges across the partitions, in the server's order of the key (the parent's ordered append)
    assert {end[0] for end in ends if end} == {"east", "north", "west"} and ends[-1] is None, ends
    truth = pa.table({"region": [r for r in ("east", "west", "north") for _ in range(8000)],
                      "id": pa.array([i for _ in range(3) for i in range(1, 8001)], pa.int32()),
                      "v": [f"{r}{i}" for r in ("east", "west", "north") for i in range(1, 8001)]})
    testing.check_all(source, expected=truth)


# a key of each type the reader takes the key's text of from the page itself (uuid, text) or from a
# ``column::text`` it adds (a numeric(p,s), read as a decimal; a date; any key column not read): a page's last key,
# the next page's lower bound, must give every row once
_KEYS = {"uuid": ("md5(i::text)::uuid", lambda i: str(uuid.UUID(hashlib.md5(str(i).encode()).hexdigest()))),
         "numeric(10,1)": ("i * 0.5", lambda i: decimal.Decimal(f"{i * 0.5:.1f}")),
         "text": ("'k''' || i", lambda i: f"k'{i}"),
         "date": ("date '2000-01-01' + i", lambda i: datetime.date(2000, 1, 1) + datetime.timedelta(days=i))}


@pytest.mark.parametrize("key_type", list(_KEYS))
@pytest.mark.parametrize("columns", ["k,v", "v"])
def test_every_key_type_pages_exactly(postgres15: PostgresServer, table_name: str, key_type: str,
                                      columns: str) -> None:
    sql, text_of = _KEYS[key_type]
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (k {key_type} PRIMARY KEY, v int4)")
        conn.execute(f"INSERT INTO {table_name} SELECT {sql}, i FROM generate_series(1, 6000) i")
        conn.execute(f"ANALYZE {table_name}")
    source = PostgresSource(options(postgres15, table_name, columns=columns, split_size_mb="0.05",
                                    page_rows="700"))
    assert source.key_columns() == ["k"]
    truth = {"k": [text_of(i) for i in range(1, 6001)]} if columns == "k,v" else {}
    testing.check_all(source, expected=pa.table({**truth, "v": pa.array(range(1, 6001), pa.int32())}))


def _since_a_first_run(*sources: PostgresSource) -> None:
    """Each source's ``since``: the instant of a first run of the first, planned now."""
    first = sources[0].create_enumerator(FixedEnumeratorContext(1))
    first.start()
    for source in sources:
        source.since = first.instant()
    first.close()


def _changed_keys(source: PostgresSource) -> tuple[Any, int]:
    """A run of ``source`` planned now: its ``changed_keys()`` and how many changed rows its readers are handed,
    themselves (option ``rows``) or their places (option ``tids``)."""
    later = source.create_enumerator(FixedEnumeratorContext(1))
    later.start()
    try:
        handed = later.reader_options()
        rows = _reader.handed_rows(handed["rows"]).num_rows if "rows" in handed else 0
        return later.changed_keys(), rows + handed.get("tids", "").count("(")
    finally:
        later.close()


@pytest.mark.parametrize("key_type", [*_KEYS, "composite"])
def test_changed_keys_count_the_rows_and_name_each_changed_key(postgres: PostgresServer, table_name: str,
                                                               key_type: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An incremental run's ``changed_keys()``, read in runs of 2 blocks over its two sessions: the rows the table
    holds counted (by the server's count of the rows its scans fetched), and exactly the keys of the rows updated and
    inserted since the last run's instant, as the test wrote them; a deleted row is in neither. With a ``where``,
    which that count cannot see, no count (the deletes list the keys), and the readers are handed the changed rows
    it keeps."""
    monkeypatch.setattr(_reader, "RUN_BLOCKS", 2)
    sql, key_of = _KEYS.get(key_type, ("'r' || i % 3, i", lambda i: (f"r{i % 3}", i)))
    columns = ("k text, n int4, v int4, PRIMARY KEY (k, n)" if key_type == "composite"
               else f"k {key_type} PRIMARY KEY, v int4")
    with postgres.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} ({columns})")
        conn.execute(f"INSERT INTO {table_name} SELECT {sql}, i FROM generate_series(1, 3000) i")
    source = PostgresSource(options(postgres, table_name))
    filtered = PostgresSource(options(postgres, table_name, where="v <= 2900"))
    assert _changed_keys(source)[0] is None  # a first run reads everything
    _since_a_first_run(source, filtered)
    with postgres.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET v = v WHERE v <= 50 OR v > 2950")  # 50 of them outside the where
        conn.execute(f"INSERT INTO {table_name} SELECT {sql}, i - 3000 FROM generate_series(3001, 3020) i")
        conn.execute(f"DELETE FROM {table_name} WHERE v > 2000 AND v <= 2010")
    counted, _ = _changed_keys(source)
    assert counted is not None
    count, keys = counted
    found = pa.Table.from_batches(list(keys))
    assert count == 3000 + 20 - 10
    names = ["k", "n"] if key_type == "composite" else ["k"]
    rows = [tuple(r[n] for n in names) for r in found.to_pylist()]
    wanted = [key_of(i) for i in [*range(1, 51), *range(2951, 3021)]]
    assert sorted(rows, key=repr) == sorted((w if isinstance(w, tuple) else (w,) for w in wanted), key=repr)
    counted, handed = _changed_keys(filtered)
    assert counted is None and handed == 50 + 20


def test_changed_keys_count_the_rows_of_every_partition(postgres: PostgresServer, table_name: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A partitioned table's ``changed_keys()``: the rows of its three partitions counted, each scanned in runs of
    its own (the server's count of each partition's fetched rows, summed), and the changed keys of each."""
    monkeypatch.setattr(_reader, "RUN_BLOCKS", 3)
    with postgres.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (k int8 PRIMARY KEY, v int4) PARTITION BY RANGE (k)")
        for i, (low, high) in enumerate([(0, 1000), (1000, 4000), (4000, 10000)]):
            conn.execute(f"CREATE TABLE {table_name}_{i} PARTITION OF {table_name} FOR VALUES FROM ({low}) TO ({high})")
        conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(1, 6000) i")
    source = PostgresSource(options(postgres, table_name))
    _since_a_first_run(source)
    with postgres.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET v = -v WHERE k % 500 = 1")
        conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(8000, 8004) i")
        conn.execute(f"DELETE FROM {table_name} WHERE k IN (2, 1500, 5000)")
    counted, _ = _changed_keys(source)
    assert counted is not None
    count, keys = counted
    assert count == 6000 + 5 - 3
    assert sorted(pa.Table.from_batches(list(keys)).column("k").to_pylist()) == [
        *range(1, 6000, 500), *range(8000, 8005)]


def test_changed_keys_are_counted_for_a_select_only_login_and_not_where_the_server_counts_nothing(
        postgres15: PostgresServer, table_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's count of the rows a scan fetched is readable by a login granted SELECT on the table and nothing
    else: its run counts exactly, in runs of 4 blocks, though the login's planner settings (a random page read
    costing 1,000 sequential ones) make a sequential scan of the whole table, the range a filter, look cheaper than
    each run's TID range scan (which would count every row once a run). In a database where the server counts
    nothing (``track_counts`` off), a run gives no count (its deletes list the keys) and still names every changed
    key."""
    monkeypatch.setattr(_reader, "RUN_BLOCKS", 4)
    database = f"{table_name}_uncounted"
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")  # granted to the role below by an earlier run
        conn.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.execute(f"CREATE DATABASE {database}")
        conn.execute(f"ALTER DATABASE {database} SET track_counts = off")
        conn.execute("DROP ROLE IF EXISTS counts_select")
        conn.execute("CREATE ROLE counts_select LOGIN PASSWORD 'secret-cs' NOSUPERUSER")
        conn.execute("ALTER ROLE counts_select SET random_page_cost = 1000")
    found = {}
    for where in ("postgres", database):
        dsn = postgres15.dsn.replace("dbname=postgres", f"dbname={where}")
        with postgres15.connect(dbname=where) as conn:
            conn.execute(f"CREATE TABLE {table_name} (k int8 PRIMARY KEY, v int4)")
            conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(1, 3000) i")
            conn.execute(f"GRANT SELECT ON {table_name} TO counts_select")
        settings = {"dsn": dsn.replace("user=postgres", "user=counts_select"), "password": "secret-cs",
                    "table": table_name}
        source = PostgresSource(settings)
        _since_a_first_run(source)
        with postgres15.connect(dbname=where) as conn:
            conn.execute(f"UPDATE {table_name} SET v = -v WHERE k % 100 = 1")
            conn.execute(f"DELETE FROM {table_name} WHERE k = 2")
        counted, handed = _changed_keys(source)
        found[where] = (counted[0] if counted else None, handed)
    with postgres15.connect() as conn:
        conn.execute(f"DROP DATABASE {database}")
    assert found == {"postgres": (2999, 30), database: (None, 30)}


def test_the_scan_for_changed_keys_gives_a_late_session_only_the_runs_left(postgres15: PostgresServer,
                                                                          table_name: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The two sessions of an incremental run's scan take the next run of blocks as each ends one, so a session
    that starts late does not end late: the second session's connection is held here until the planner's has read
    all runs but one, and then it reads at most that one (splitting the runs in halves gave it half), while the
    count and the changed keys stay exact."""
    import threading

    from connectors.postgres import _session

    monkeypatch.setattr(_reader, "RUN_BLOCKS", 4)
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (k int8 PRIMARY KEY, v int4)")
        conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(1, 6000) i")
    source = PostgresSource(options(postgres15, table_name))
    _since_a_first_run(source)
    with postgres15.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET v = -v WHERE k % 100 = 7")
        blocks = conn.execute(f"SELECT pg_relation_size('{table_name}') / 8192").fetchone()[0]
    runs = -(-blocks // 4)
    assert runs >= 6, blocks
    scans: list[str] = []  # the session of each run's query, in order
    late = threading.Event()
    query, connect = _session.Connection.query, _reader.connect

    def counting(connection: _session.Connection, sql: str) -> pa.RecordBatch:
        rows = query(connection, sql)
        if ".xmin)::oid <=" in sql:  # a run's scan (changed_since)
            scans.append(threading.current_thread().name)
            if len(scans) == runs - 1:
                late.set()
        return rows

    def held(*args: Any) -> _session.Connection:
        assert late.wait(timeout=60), "the planner's session never read all runs but one"
        scans.append("connected")
        return connect(*args)

    monkeypatch.setattr(_session.Connection, "query", counting)
    monkeypatch.setattr(_reader, "connect", held)
    counted, _ = _changed_keys(source)
    assert counted is not None
    count, keys = counted
    assert count == 6000
    assert sorted(pa.Table.from_batches(list(keys)).column("k").to_pylist()) == list(range(7, 6000, 100))
    planner = scans[0]
    after = scans[scans.index("connected") + 1:]
    assert scans[:runs - 1] == [planner] * (runs - 1) and len(scans) == runs + 1, scans
    assert len([s for s in after if s != planner]) <= 1, scans


def _read_whole(source: PostgresSource, split: KeyRange) -> tuple[list[tuple[int, int]], list[str]]:
    """``split`` read to its end by ``source``'s reader: its rows' (k, v), sorted, and the kinds of event it told."""
    reader = source.create_split_reader()
    reader.add_splits([split])
    rows: list[tuple[int, int]] = []
    events: list[str] = []
    try:
        while True:
            got = reader.fetch()
            rows += [(row["k"], row["v"]) for _, (page, _) in got.batches for row in page.to_pylist()]
            events += [event.kind for event in got.events]
            if got.finished:
                return sorted(rows), events
    finally:
        reader.close()


def _page_plan(server: PostgresServer, source: PostgresSource) -> str:
    """The server's plan of the first page ``source``'s reader asks for, in a session set as the reader's session
    was: every statement it sent before the page, but its snapshot's, sent again in one transaction."""
    from connectors.postgres import _session

    sent: list[str] = []
    query, execute = _session.Connection.query, _session.Connection.execute
    try:
        _session.Connection.query = lambda self, sql: sent.append(sql) or query(self, sql)  # type: ignore[method-assign]
        _session.Connection.execute = lambda self, sql: sent.append(sql) or execute(self, sql)  # type: ignore[method-assign]
        with source.connect() as connection:
            whole = KeyRange(0, None, None)
            source.read(connection, whole, source.page_limit(whole))
    finally:
        _session.Connection.query, _session.Connection.execute = query, execute  # type: ignore[method-assign]
    with server.connect() as conn, conn.transaction():
        for sql in sent[:-1]:
            if not sql.startswith(("BEGIN", "SET TRANSACTION")):
                conn.execute(sql)
        return "\n".join(row[0] for row in conn.execute(f"EXPLAIN {sent[-1]}"))


@pytest.mark.parametrize(("tid_rows", "page_rows", "few"), [(150, 40, True), (149, 40, False), (150, 18, False)])
def test_an_incremental_run_reads_its_changed_rows_by_their_places(postgres15: PostgresServer, table_name: str,
                                                                   tid_rows: int, page_rows: int, few: bool) -> None:
    """An incremental run whose plan found few changed rows hands its readers their places (option ``tids``) and
    plans one range, read by those places in pages: exactly the rows updated and inserted since the last run, as of
    the run's snapshot, with a change committed after it left out. Over ``tid_rows`` changed rows, or over 8
    pages of them, the plan cuts ranges and the readers scan them, with the same rows. A reader whose snapshot is
    gone drops the places."""
    import re

    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (k int8 PRIMARY KEY, v int4)")
        conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(1, 20000) i")
    wanted = sorted([(k, -k) for k in range(3, 20000, 200)] + [(k, k) for k in range(20001, 20051)])
    assert len(wanted) == 150
    settings = options(postgres15, table_name, split_size_mb="0.1", page_rows=str(page_rows), where="k <> 7",
                       tid_rows=str(tid_rows))
    source = PostgresSource(settings)
    first = source.create_enumerator(FixedEnumeratorContext(1))
    first.start()
    since = first.instant()
    first.close()
    with postgres15.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET v = -v WHERE k % 200 = 3 OR k = 7")  # 100, and one outside where
        conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(20001, 20050) i")
        conn.execute(f"DELETE FROM {table_name} WHERE k BETWEEN 100 AND 120")
    source.since = since
    later = source.create_enumerator(FixedEnumeratorContext(2))
    later.start()
    try:
        counted = later.changed_keys()
        assert counted is None  # a where, which the server's count of fetched rows cannot see: keys listed
        handed = dict(later.reader_options())
        splits = list(iter(later.next_split, None))
        with postgres15.connect() as conn:  # after the run's snapshot: no reader of the run sees it
            conn.execute(f"UPDATE {table_name} SET v = 0 WHERE k IN (3, 10)")

        def reader(**extra: str) -> PostgresSource:
            made = PostgresSource({**settings, **handed, **extra})
            made.since = since
            return made

        read = [row for split in splits for row in _read_whole(reader(), split)[0]]
        if few:  # the places alone decide what a reader reads: half of them, half the rows
            places = re.findall(r"\(\d+,\d+\)", handed["tids"])
            half = "{" + ",".join(f'"{place}"' for place in places[: len(places) // 2]) + "}"
            halved = _read_whole(reader(tids=half), splits[0])[0]
            with postgres15.connect() as conn:  # a place for each row: the planner on its own would scan the table
                every = conn.execute(f"SELECT array_agg(ctid)::text FROM {table_name}").fetchone()[0]
            plan = _page_plan(postgres15, reader(tids=every))
    finally:
        later.close()
    assert sorted(read) == wanted
    if not few:
        assert len(splits) > 1 and "tids" not in handed
        return
    assert len(splits) == 1 and len(places) == len(wanted)
    assert "Tid Scan" in plan, f"a reader given places reads its page otherwise: {plan}"
    assert len(halved) == len(wanted) // 2 and set(halved) <= set(wanted)
    # the snapshot gone (its planner ended), a reader goes on at a new instant and scans for the changed rows
    again, events = _read_whole(reader(), splits[0])
    assert set(events) == {"snapshot_lost"}
    assert again == sorted([r for r in wanted if r[0] != 3] + [(3, 0), (10, 0)])


def _run_after_changes(server: PostgresServer, table_name: str, **extra: str) -> tuple[Any, dict[str, Any],
                                                                                      list[tuple[int, int]]]:
    """A 20,000-row table copied once (an instant), then 100 rows updated and 50 inserted: the next run's
    enumerator (started: close it), its readers' options, and the rows it must read, (k, v) sorted."""
    with server.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (k int8 PRIMARY KEY, v int4)")
        conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(1, 20000) i")
    settings = options(server, table_name, split_size_mb="0.1", **extra)
    first = PostgresSource(settings).create_enumerator(FixedEnumeratorContext(1))
    first.start()
    since = first.instant()
    first.close()
    with server.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET v = -v WHERE k % 200 = 3")
        conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(20001, 20050) i")
    source = PostgresSource(settings)
    source.since = since
    later = source.create_enumerator(FixedEnumeratorContext(2))
    later.start()
    handed = {**settings, **later.reader_options(), "since": since}
    return later, handed, sorted([(k, -k) for k in range(3, 20000, 200)] + [(k, k) for k in range(20001, 20051)])


def _reader_of(handed: dict[str, Any], **extra: str) -> PostgresSource:
    source = PostgresSource({k: v for k, v in {**handed, **extra}.items() if k != "since"})
    source.since = handed["since"]
    return source


def test_a_run_whose_changed_rows_fit_a_page_hands_them_to_its_reader(postgres: PostgresServer, table_name: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Where an incremental run's changed rows fit one page, its plan's scan reads them and hands them to its one
    range's reader (option ``rows``), which connects to no server: exactly the rows updated and inserted since the
    last run, as of the run's snapshot, a change committed after it left out. A page's worth and one more row:
    their places, read by the reader."""
    from connectors.postgres import _session

    enumerator, handed, wanted = _run_after_changes(postgres, table_name, page_rows="150")
    try:
        (split,) = list(iter(enumerator.next_split, None))
        assert "tids" not in handed and _reader.handed_rows(handed["rows"]).num_rows == len(wanted) == 150
        with postgres.connect() as conn:  # after the run's snapshot
            conn.execute(f"UPDATE {table_name} SET v = 0 WHERE k IN (3, 20001)")

        def refused(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("a reader handed the rows connected to the server")

        monkeypatch.setattr(_session.Connection, "__init__", refused)
        rows, _ = _read_whole(_reader_of(handed), split)
    finally:
        enumerator.close()
    assert rows == wanted
    monkeypatch.undo()
    enumerator, handed, wanted = _run_after_changes(postgres, table_name, page_rows="149")
    enumerator.close()
    assert "rows" not in handed and handed["tids"].count("(") == 150

def _rows_per_split(server: PostgresServer, source: PostgresSource) -> list[int]:
    enumerator = source.create_enumerator(FixedEnumeratorContext(2))
    enumerator.start()
    splits = list(iter(enumerator.next_split, None))
    enumerator.close()
    return _counts(server, source, splits)


def _counts(server: PostgresServer, source: PostgresSource, splits: list[KeyRange]) -> list[int]:
    """The rows the table holds now in each key range."""
    with server.connect() as conn:
        return [conn.execute(f"SELECT count(*) FROM {source.table.qualified} WHERE "
                             f"{' AND '.join(key_condition(source.table, s)) or 'true'}").fetchone()[0]
                for s in splits]


@pytest.mark.parametrize("shape", ["skewed", "mass-deleted"])
def test_no_split_is_three_times_its_target(postgres15: PostgresServer, table_name: str, shape: str) -> None:
    """90% of the rows in 10% of the key range, or a table after a mass delete: each split near its target
    (Spark's JDBC source and ConnectorX cut equal-width key ranges: one huge partition)."""
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (id int8 PRIMARY KEY, pad text)")
        if shape == "skewed":  # 180,000 keys in 1..200,000; 20,000 spread over 200,001..2,000,000
            conn.execute(f"INSERT INTO {table_name} SELECT i, repeat('x', 100) FROM generate_series(1, 180000) i")
            conn.execute(f"INSERT INTO {table_name} SELECT 200000 + i * 90, repeat('x', 100) "
                         "FROM generate_series(1, 20000) i")
        else:  # 400,000 rows, then every key below 300,000 deleted but one in 50
            conn.execute(f"INSERT INTO {table_name} SELECT i, repeat('x', 100) FROM generate_series(1, 400000) i")
            conn.execute(f"ANALYZE {table_name}")
            conn.execute(f"DELETE FROM {table_name} WHERE id < 300000 AND id % 50 <> 0")
        conn.execute(f"ANALYZE {table_name}" if shape == "skewed" else "SELECT 1")  # stale statistics stay stale
        total, size = conn.execute(f"SELECT count(*), pg_table_size('{table_name}') FROM {table_name}").fetchone()
    source = PostgresSource(options(postgres15, table_name, split_size_mb="4"))
    counts = _rows_per_split(postgres15, source)
    assert sum(counts) == total
    target_rows = total * 4 * 1024 * 1024 / size if shape == "skewed" else total / len(counts)
    assert len(counts) >= 3, counts
    assert max(counts) <= 3 * target_rows, (counts, target_rows)


def test_a_resumed_plan_skips_its_ranges_in_the_server_s_key_order(postgres15: PostgresServer,
                                                                   table_name: str) -> None:
    """Keys travel as the server's text, which Python would misorder ("10000" before "9999"): the plan compares
    them on the server. A plan resumed after two ranges, with rows added since both inside and after the ranges
    handed out, cuts its boundaries again and gives every key once across the two runs."""
    make_events(postgres15, table_name, 20_000)
    source = PostgresSource(options(postgres15, table_name, split_size_mb="0.3"))
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    assert source.before(("9999",), ("10000",)) and not source.before(("10000",), ("9999",))
    first = [enumerator.next_split(), enumerator.next_split()]
    state = enumerator.snapshot_state()
    enumerator.close()
    assert all(s is not None and s.upto is not None for s in first), first
    with postgres15.connect() as conn:  # between the runs: a key inside the handed-out ranges and keys after them
        conn.execute(f"DELETE FROM {table_name} WHERE id = 3")
        conn.execute(f"INSERT INTO {table_name} (id) VALUES (3), (20001), (20002), (200000)")
    again = source.restore_enumerator(FixedEnumeratorContext(1), state)
    again.start()
    rest = list(iter(again.next_split, None))
    again.close()
    counts = _counts(postgres15, source, [*first, *rest])  # type: ignore[list-item]
    assert sum(counts) == 20_003 and all(counts), counts


def test_block_ranges_resume_only_on_an_unchanged_table(postgres15: PostgresServer, table_name: str) -> None:
    """Block ranges name rows by their place, which an update moves: a plan by blocks resumed after the table
    changed is refused in one line (its guard), and resumed when it did not."""
    from splitsource import CheckpointError

    make_events(postgres15, table_name, 20_000)
    source = PostgresSource(options(postgres15, table_name, split_size_mb="0.3", split_by="blocks"))
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    enumerator.next_split()
    state = enumerator.snapshot_state()
    enumerator.close()
    assert state.position.guard.startswith("blocks ")
    same = source.restore_enumerator(FixedEnumeratorContext(1), state)
    same.start()
    assert same.next_split() is not None
    same.close()
    with postgres15.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET name = 'moved' WHERE id = 1")
    deadline = time.monotonic() + 30  # the server publishes the update's count within about a second
    while True:
        moved = source.restore_enumerator(FixedEnumeratorContext(1), state)
        try:
            moved.start()
        except CheckpointError as refused:
            assert "\n" not in str(refused) and "changed since this copy began" in str(refused), refused
            break
        finally:
            moved.close()
        assert time.monotonic() < deadline, "a plan by blocks resumed on a changed table"
        time.sleep(0.1)


def test_split_by_key_on_a_table_without_one_is_refused(postgres15: PostgresServer, table_name: str) -> None:
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (v text)")
    source = PostgresSource(options(postgres15, table_name, split_by="key"))
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    with pytest.raises(OptionsError, match="has no primary key or unique index"):
        enumerator.start()
    enumerator.close()


def test_a_key_with_a_column_of_no_key_type_gives_way_to_the_next_or_to_block_ranges(postgres15: PostgresServer,
                                                                                      table_name: str) -> None:
    """A primary key (id, flag) whose boolean is of no key type is no key: its id alone repeats, and a page that
    ended between the two rows of one id resumed after both (it was taken as the key (id), and rows were lost). The
    next unique index of key types is taken; without one, the table is read in block ranges. The kit, with the
    inserted rows as the truth, reads every row once."""
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (id int8, flag bool, v int4 NOT NULL, PRIMARY KEY (id, flag))")
        conn.execute(f"INSERT INTO {table_name} SELECT i / 2, i % 2 = 1, i FROM generate_series(0, 2999) i")
        conn.execute(f"ANALYZE {table_name}")
    truth = pa.table({"id": pa.array([i // 2 for i in range(3000)], pa.int64()),
                      "flag": [i % 2 == 1 for i in range(3000)], "v": pa.array(range(3000), pa.int32())})
    source = PostgresSource(options(postgres15, table_name, page_rows="7", page_mb="0.01", split_size_mb="0.02"))
    assert source.key_columns() == [] and source.by_blocks
    testing.check_all(source, expected=truth)
    with postgres15.connect() as conn:
        conn.execute(f"CREATE UNIQUE INDEX {table_name}_id_v ON {table_name} (id, v)")
    source = PostgresSource(options(postgres15, table_name, page_rows="7", page_mb="0.01", split_size_mb="0.02"))
    assert source.key_columns() == ["id", "v"] and not source.by_blocks
    testing.check_all(source, expected=truth)


def test_an_invalid_unique_index_is_no_key(postgres15: PostgresServer, table_name: str) -> None:
    """A failed ``CREATE UNIQUE INDEX CONCURRENTLY`` leaves an index that enforces nothing: it was taken as the key
    (id), whose rows repeat, and pages resumed past the second row of an id (2,625 rows of 3,000 at page_rows=7)."""
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (id int8 NOT NULL, v int4 NOT NULL)")
        conn.execute(f"INSERT INTO {table_name} SELECT i / 2, i FROM generate_series(0, 2999) i")
        with pytest.raises(Exception, match="could not create unique index"):
            conn.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {table_name}_u ON {table_name} (id)")
        conn.execute(f"ANALYZE {table_name}")
    source = PostgresSource(options(postgres15, table_name, page_rows="7", page_mb="0.01", split_size_mb="0.02"))
    assert source.key_columns() == [] and source.by_blocks
    testing.check_all(source, expected=pa.table({"id": pa.array([i // 2 for i in range(3000)], pa.int64()),
                                                 "v": pa.array(range(3000), pa.int32())}))


def test_a_column_named_twice_or_not_at_all_is_refused_by_name(postgres15: PostgresServer, table_name: str) -> None:
    """``columns=id,id`` was planned and failed in its reader, on pyarrow's 'Field "id" exists 2 times in schema',
    after the copy claimed its output; it is refused with the options, before connecting."""
    make_events(postgres15, table_name, 10)
    with pytest.raises(OptionsError, match=r"^option 'columns': invalid value 'id,name,id': names id more than once$"):
        PostgresSource(options(postgres15, table_name, columns="id,name,id"))
    with pytest.raises(OptionsError, match=r"has no column nope; it has id, name"):
        PostgresSource(options(postgres15, table_name, columns="id,nope")).schema()


def test_a_snapshot_option_the_server_cannot_import_is_refused_by_name(postgres15: PostgresServer,
                                                                       table_name: str) -> None:
    """A snapshot id of no open transaction was the driver's "[libpq] Failed to execute query 'SET TRANSACTION
    SNAPSHOT ...'", exit 1; it is a bad value of the option."""
    make_events(postgres15, table_name, 10)
    source = PostgresSource(options(postgres15, table_name, snapshot="00000003-0000001B-1"))
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    with pytest.raises(OptionsError, match=r"^connector 'postgres': option 'snapshot': PostgreSQL cannot import "
                                           r"00000003-0000001B-1 \(never exported"):
        enumerator.start()
    enumerator.close()


def test_errors_a_retry_may_cure_are_told_from_those_it_cannot(postgres15: PostgresServer, table_name: str) -> None:
    """Each error the real server (or the lack of one) gives is classified: a refused or cut connection and a
    terminated backend are transient, a bad query and a wrong password are not; and a connection reset with no
    SQLSTATE, which libpq reports at some instants of a server crash (a fake: no server gives it on demand), is
    transient whatever its words."""
    import adbc_driver_manager
    import adbc_driver_postgresql.dbapi as adbc

    from connectors.postgres._options import conninfo
    from scripts.spark_standalone import free_port

    make_events(postgres15, table_name, 10)
    source = PostgresSource(options(postgres15, table_name))
    dsn = conninfo(source.options)

    def raised(call: object) -> BaseException:
        with pytest.raises(Exception) as caught:
            call()  # type: ignore[operator]
        return caught.value

    def query(sql: str) -> object:
        with adbc.connect(dsn) as conn, conn.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall()

    assert not source.is_transient(raised(lambda: query("SELECT 1 / 0")))
    assert not source.is_transient(raised(lambda: query(f"SELECT nope FROM {table_name}")))
    closed = PostgresSource(options(postgres15, table_name, dsn=f"host=127.0.0.1 port={free_port()} dbname=x"))
    assert source.is_transient(raised(closed.schema))
    wrong = PostgresSource(options(postgres15, table_name, password="not-the-password"))
    assert not source.is_transient(raised(wrong.schema))
    with adbc.connect(dsn) as victim, victim.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
        with postgres15.connect() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert source.is_transient(raised(lambda: cursor.execute("SELECT 1")))
    reset = adbc_driver_manager.OperationalError(
        "IO: [libpq] Failed to execute COPY: could not receive data from server: Connection reset by peer",
        status_code=adbc_driver_manager.AdbcStatusCode.IO)
    assert source.is_transient(reset)


def _slow_pages(server: PostgresServer, table_name: str, page_rows: str) -> PostgresSource:
    """A source over 10 rows whose every page query sleeps 3 s on the server before its rows (a ``where`` with an
    uncorrelated pg_sleep, run once a query)."""
    make_events(server, table_name, 10)
    return PostgresSource(options(server, table_name, page_rows=page_rows, split_size_mb="1",
                                  where="(SELECT pg_sleep(3)) IS NOT NULL"))


def _terminating(server: PostgresServer, sql: str) -> tuple[Any, list[bool]]:
    """A thread, started, that runs ``sql`` (``SELECT pg_terminate_backend(pid) ...``) every 10 ms until it has
    ended a backend or 60 s have passed, and the list of what it ended (join the thread, then check the list)."""
    import threading

    terminated: list[bool] = []

    def terminate() -> None:
        with server.connect() as admin:
            deadline = time.monotonic() + 60
            while not terminated and time.monotonic() < deadline:
                terminated.extend(r[0] for r in admin.execute(sql).fetchall() if r[0])
                time.sleep(0.01)

    killer = threading.Thread(target=terminate)
    killer.start()
    return killer, terminated


def _reading(source: PostgresSource) -> tuple[Any, Any]:
    """``source``'s enumerator, started, and a split reader holding its first split."""
    enumerator, split = first_split(source)
    reader = source.create_split_reader()
    reader.add_splits([split])
    return enumerator, reader


def test_a_backend_ended_while_its_page_streams_is_retried_and_the_page_read_again(postgres15: PostgresServer,
                                                                                  table_name: str) -> None:
    """pg_terminate_backend while a page's query runs (it sleeps 3 s on the server before its rows, long enough for
    the test's poll to find it however loaded the machine): the driver raises that from the rows' stream (the query
    runs as ``COPY``), where pyarrow gives it as a plain OSError. The connector tells it transient, as it does a
    session lost between queries, and the next fetch reads the page again in a new session at the run's snapshot:
    each row once."""

    source = _slow_pages(postgres15, table_name, "20")
    enumerator, reader = _reading(source)
    killer, terminated = _terminating(postgres15, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                      "state = 'active' AND query LIKE '%pg_sleep%ORDER BY%' AND pid <> "
                                      "pg_backend_pid()")  # the page's query, once the server runs it
    with pytest.raises(Exception) as caught:
        reader.fetch()
    killer.join(60)
    assert terminated, "no page query was terminated: the test proves nothing"
    assert "PQgetCopyData" in str(caught.value) or "terminating connection" in str(caught.value), caught.value
    assert source.is_transient(caught.value), repr(caught.value)
    rows: list[int] = []
    while True:
        got = reader.fetch()
        rows += [i for _, (page, _) in got.batches for i in page.column("id").to_pylist()]
        if got.finished:
            break
    reader.close()
    enumerator.close()
    assert sorted(rows) == sorted(expected_events(10))


def test_only_the_servers_word_that_a_snapshot_is_gone_is_taken_for_it(postgres15: PostgresServer,
                                                                      table_name: str) -> None:
    """What the real server answers ``SET TRANSACTION SNAPSHOT`` for a snapshot whose exporting transaction ended,
    and for one whose session was terminated, is "gone"; a terminated backend, a lost connection and any other error
    are not (a reader retries those in the run's snapshot, and never goes on at another instant for them)."""
    import adbc_driver_postgresql.dbapi as adbc

    from connectors.postgres._options import conninfo
    from connectors.postgres._session import snapshot_gone

    dsn = conninfo(PostgresSource(options(postgres15, table_name)).options)

    def set_snapshot(snapshot: str, before: str = "") -> BaseException:
        with adbc.connect(dsn, autocommit=True) as conn, conn.cursor() as cursor:
            cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            if before:
                cursor.execute(before)
            with pytest.raises(Exception) as caught:
                cursor.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
            return caught.value

    with postgres15.connect() as exporter:
        exporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        ended = exporter.execute("SELECT pg_export_snapshot()").fetchone()[0]
        exporter.execute("COMMIT")
    assert snapshot_gone(set_snapshot(ended))
    assert not snapshot_gone(set_snapshot("00000003-0000001B-1", before="SELECT 1"))  # after a query: misuse
    with postgres15.connect() as exporter, adbc.connect(dsn, autocommit=True) as victim, victim.cursor() as cursor:
        exporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        alive = exporter.execute("SELECT pg_export_snapshot()").fetchone()[0]
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
        cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        with postgres15.connect() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(Exception) as terminated:
            cursor.execute(f"SET TRANSACTION SNAPSHOT '{alive}'")
        assert not snapshot_gone(terminated.value), terminated.value


def test_wake_up_cancels_a_page_the_server_is_slow_to_give(postgres15: PostgresServer, table_name: str) -> None:
    """Every page query sleeps 3 s on the server (a ``where`` with an uncorrelated pg_sleep, run once a query):
    the kit's wake-up check, with the timeout check_all gives it (2 s), passes only because wake_up cancels the
    query (libpq's cancel, through the driver) and the next fetch reads the page again, in the run's snapshot."""
    import time

    source = _slow_pages(postgres15, table_name, "5")
    started = time.monotonic()
    testing.check_wake_up_resume(source)
    assert time.monotonic() - started > 3, "no page query slept: the test proves nothing"


# A reader's process, as a copy's worker or a Spark task has it: the source built from the options the planner
# handed its readers (the snapshot, and the table as described), one split read to its end.
_READER = """
import json, sys
from serializers import read_envelope
from connectors.postgres import PostgresSource

source = PostgresSource(json.loads(sys.argv[1]))
reader = source.create_split_reader()
reader.add_splits([read_envelope(source.split_serializer(), bytes.fromhex(sys.argv[2]))])
ids = []
while not (got := reader.fetch()).finished:
    ids += [i for _, (page, _) in got.batches for i in page.column("id").to_pylist()]
ids += [i for _, (page, _) in got.batches for i in page.column("id").to_pylist()]
reader.close()
print(json.dumps(ids))
print(sorted(m for m in ("psycopg", "pyarrow.compute") if m in sys.modules))
"""


def test_a_reader_process_reads_with_what_the_planner_described(postgres15: PostgresServer,
                                                                 table_name: str) -> None:
    """The planner hands its readers the table as it described it (option ``described``) with the snapshot: a
    reader's process asks the catalog nothing, so it imports neither psycopg nor pyarrow.compute (0.2 s of CPU in
    every worker of a copy), and its rows are the inserted ones."""
    import json
    import subprocess
    import sys

    from serializers import write_envelope

    make_events(postgres15, table_name, 5000)
    source = PostgresSource(options(postgres15, table_name, split_size_mb="0.1", page_rows="700"))
    enumerator = source.create_enumerator(FixedEnumeratorContext(2))
    enumerator.start()
    try:
        handed = enumerator.reader_options()
        assert set(handed) == {"snapshot", "described", "split_by"}
        split = enumerator.next_split()
        assert split is not None and split.upto is not None, "the table should be planned in several key ranges"
        read = subprocess.run(
            [sys.executable, "-c", _READER, json.dumps({**options(postgres15, table_name, page_rows="700"), **handed}),
             write_envelope(source.split_serializer(), split).hex()],
            capture_output=True, text=True, timeout=120, cwd=ROOT, env=postgres15.run_env())
    finally:
        enumerator.close()
    assert read.returncode == 0, read.stderr
    ids, loaded = read.stdout.splitlines()
    assert json.loads(ids) == list(range(1, int(split.upto[0]) + 1))
    assert loaded == "[]", f"a reader's process imported {loaded}"


def test_a_damaged_description_is_one_line() -> None:
    with pytest.raises(OptionsError, match=r"option 'described' is not a table's description"):
        PostgresSource({"table": "t", "described": "{\"label\": 1}"}).schema()


@pytest.mark.parametrize("dsn", ["", "host=127.0.0.1 port=5 dbname=x", "dbname='a b' user=\\'x sslmode=disable",
                                 "postgresql://u:p%40@h1:5,h2/db", "postgres://h/db?sslmode=disable&port=7",
                                 "postgresql://h/db?"])
def test_the_connection_string_is_what_psycopg_would_make(dsn: str) -> None:
    """The connector builds libpq's string itself (a reader imports no psycopg): libpq parses it into what
    psycopg's make_conninfo gives for the same dsn and settings, a URI's and quoted values included."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from connectors.postgres._options import conninfo

    source = PostgresSource({"dsn": dsn, "table": "t", "password": "p'w\\d x", "sslmode": "require",
                             "connect_timeout_s": "3"})
    settings = {"application_name": "splitsource", "connect_timeout": "3", "sslmode": "require",
                "password": "p'w\\d x", "options": "-c TimeZone=UTC"}
    made = conninfo(source.options, options="-c TimeZone=UTC")
    assert conninfo_to_dict(made) == conninfo_to_dict(make_conninfo(dsn, **settings))


def test_a_value_beyond_arrow_is_found_by_its_validity_and_offset() -> None:
    """The check for values Arrow cannot hold reads the driver's buffer: a null slot holding any value passes, and
    a valid one beyond is named by its row's key, in a sliced page too."""
    import json

    from connectors.postgres._catalog import _FIRST_TIMESTAMP_US, described
    from connectors.postgres._reader import _refuse_beyond_arrow

    catalog = {"label": "public.t", "qualified": "t", "keys": [["id"]], "relations": ["t"], "version": 150000,
               "money": [2, "C"], "origin": ["1", "db"], "columns": [["id", "bigint", None, "int8", False],
                                              ["at", "timestamp with time zone", None, "timestamptz", True]]}
    table = described(json.dumps(catalog), "", "")
    raw = pa.py_buffer(pa.array([0, _FIRST_TIMESTAMP_US - 1, 5], pa.int64()).buffers()[1])

    def page(valid: list[bool]) -> pa.RecordBatch:
        bits = pa.array(valid).buffers()[1]
        at = pa.Array.from_buffers(table.schema.field("at").type, 3, [bits, raw], valid.count(False))
        return pa.record_batch([pa.array([1, 2, 3], pa.int64()), at], schema=table.schema)

    nulled = page([True, False, True])
    _refuse_beyond_arrow(table, nulled.columns, nulled)
    _refuse_beyond_arrow(table, nulled.slice(1).columns, nulled.slice(1))
    for held in (page([True, True, True]), page([True, True, True]).slice(1)):
        with pytest.raises(ValueRangeError, match=r"column at of public.t holds infinity .* \(row id=2\)"):
            _refuse_beyond_arrow(table, held.columns, held)


def test_a_wake_up_that_reaches_the_server_before_the_query_still_cancels_it(
        postgres15: PostgresServer, table_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race CI found: wake_up lands after the reader decided to send its page's query and before the server
    has it, so the server, still reading the query, ignores the cancel. Here the reader is held at exactly that
    point until a cancel has come back (the server has taken it, with no query running); the query (3 s of pg_sleep
    per page) is then cut by a cancel sent again, and the fetch returns no rows, where one cancel alone would have
    let the page through."""
    import threading

    from connectors.postgres import _session

    source = _slow_pages(postgres15, table_name, "5")
    enumerator, reader = _reading(source)
    sending, cancels = threading.Event(), []
    query, cancel = _session.Connection.query, _session.Connection.cancel

    def held_query(connection: _session.Connection, sql: str) -> pa.RecordBatch:
        if "pg_sleep" in sql:
            sending.set()
            while not cancels:  # until the wake-up's first cancel has reached the idle session
                threading.Event().wait(0.01)
        return query(connection, sql)

    def counted_cancel(connection: _session.Connection) -> None:
        cancel(connection)  # libpq's cancel returns once the server has signalled the session: it is idle then
        cancels.append(1)

    monkeypatch.setattr(_session.Connection, "query", held_query)
    monkeypatch.setattr(_session.Connection, "cancel", counted_cancel)
    fetched: list[object] = []
    fetching = threading.Thread(target=lambda: fetched.append(reader.fetch()))
    fetching.start()
    assert sending.wait(60), "the reader never sent its page's query"
    reader.wake_up()
    fetching.join(60)
    assert not fetching.is_alive()
    got = fetched[0]
    assert not got.batches and not got.finished, got  # cut short: nothing read, the split not finished
    assert len(cancels) >= 2, cancels  # the first cancel found no query; a later one cut it
    monkeypatch.undo()
    rows: list[int] = []
    while not got.finished:
        got = reader.fetch()
        rows += [i for _, (page, _) in got.batches for i in page.column("id").to_pylist()]
    reader.close()
    enumerator.close()
    assert sorted(rows) == sorted(expected_events(10))  # the page read again: each row once


def test_a_reader_counts_money_in_the_planner_s_locale(postgres15: PostgresServer, table_name: str) -> None:
    """A money value is an integer of its locale's smallest unit, so a reader must count it in the locale the
    planner described the column in (its decimal's scale): the planner's ``lc_monetary`` goes to every reader's
    session, whatever the server's default is when the reader connects. This machine's locales all have two
    fractional digits, so the test shows the setting itself: the planner's, read back in the reader's session."""
    from connectors.postgres import _reader
    from connectors.postgres._catalog import Table

    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (id int PRIMARY KEY, m money)")
        conn.execute(f"INSERT INTO {table_name} VALUES (1, 1234.56), (2, '-92233720368547758.08')")
        default = conn.execute("SHOW lc_monetary").fetchone()[0]
    source = PostgresSource(options(postgres15, table_name))
    table: Table = source.table
    assert table.lc_monetary == default and str(table.schema.field("m").type) == "decimal128(19, 2)"
    planned = dataclasses.replace(table, lc_monetary="POSIX" if default != "POSIX" else "C")
    connection, _ = _reader.session(source.options, planned, False, lambda lost: None)
    setting = connection.query("SELECT current_setting('lc_monetary')").column(0)[0].as_py()
    connection.close()
    enumerator, split = first_split(source)
    assert setting == planned.lc_monetary != default
    reader = source.create_split_reader()
    reader.add_splits([split])
    values: dict[int, decimal.Decimal] = {}
    finished = False
    while not finished:
        got = reader.fetch()
        finished = bool(got.finished)
        for _, (page, _) in got.batches:
            values.update(zip(page.column("id").to_pylist(), page.column("m").to_pylist(), strict=True))
    reader.close()
    enumerator.close()
    assert values == {1: decimal.Decimal("1234.56"), 2: decimal.Decimal("-92233720368547758.08")}


def _events(ids: list[int], name: str | None = None) -> pa.Table:
    """``make_events``' rows of ``ids`` (columns id, name, score, flag), ``name`` in place of theirs if given."""
    truth = expected_events(max(ids))
    return pa.table({"id": ids, "name": [name if name is not None else truth[i][0] for i in ids],
                     "score": [truth[i][1] for i in ids], "flag": [truth[i][2] for i in ids]})


def test_the_kits_incremental_check_with_updates_inserts_and_deletes(postgres: PostgresServer,
                                                                     table_name: str) -> None:
    """An incremental run reads the updated and inserted rows, once, and the enumerator's keys() lists the table's
    keys less the deleted ones, and changed_keys() counts them; a keys() that leaves out a key the table holds, and a
    changed_keys() that leaves out the inserted keys, are caught, by name."""
    make_events(postgres, table_name, 3000)
    source = PostgresSource(options(postgres, table_name, columns="id,name,score,flag", split_size_mb="0.05",
                                    page_rows="500"))

    def change() -> PostgresSource:
        with postgres.connect() as conn:
            conn.execute(f"UPDATE {table_name} SET name = 'kit' WHERE id <= 5")
            conn.execute(f"INSERT INTO {table_name} (id, name, score, flag) SELECT i, 'kit', i * 0.5, i % 3 = 0 "
                         "FROM generate_series(3001, 3010) i")
            conn.execute(f"DELETE FROM {table_name} WHERE id > 2990 AND id <= 3000")
        return source

    changed = _events([*range(1, 6), *range(3001, 3011)], name="kit")
    testing.check_incremental(source, change, changed, deleted=pa.table({"id": list(range(2991, 3001))}))

    class ListsTooFew(PostgresSource):
        def keys(self) -> Any:
            found = super().keys()
            return None if found is None else (b.filter(pc.not_equal(b.column("id"), 100)) for b in found)

    make_events(postgres, table_name, 3000)
    mutant = ListsTooFew(options(postgres, table_name, columns="id,name,score,flag"))
    with pytest.raises(AssertionError, match="check_incremental: the keys the first run read that keys"):
        testing.check_incremental(mutant, lambda: change() and mutant, changed,
                                  deleted=pa.table({"id": list(range(2991, 3001))}))

    class CountsNoInsert(PostgresSource):  # its changed keys: the updated alone, so a delete would be missed
        def changed_keys(self) -> Any:
            counted = super().changed_keys()
            return None if counted is None else (
                counted[0], (b.filter(pc.less_equal(b.column("id"), 3000)) for b in counted[1]))

    make_events(postgres, table_name, 3000)
    counts = CountsNoInsert(options(postgres, table_name, columns="id,name,score,flag"))
    with pytest.raises(AssertionError, match=r"check_incremental: changed_keys\(\) leaves out 10 key"):
        testing.check_incremental(counts, lambda: change() and counts, changed,
                                  deleted=pa.table({"id": list(range(2991, 3001))}))
