"""writetime_columns and ttl_columns: the write times the test set itself (USING TIMESTAMP), TTLs counting down
from what it set, nulls where there are none; clear errors for the columns Cassandra keeps none for."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from tests.splitsource.copyjob.test_copy import run

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]
KS = "splitsource_cells"
ROWS = 300
TTL = 86_400  # a day: far longer than the test
BASE_US = 1_700_000_000_000_000  # the write time of row 0, in microseconds


def written_at(i: int) -> int:
    return BASE_US + i * 1_000_003


@pytest.fixture(scope="module")
def table(cassandra: Any) -> Any:
    columns = ("pk int, ck int, a text, b int, l list<text>, fl frozen<list<int>>, "
               "PRIMARY KEY (pk, ck)")
    with cassandra.fresh_table(KS, "cells", columns) as session:
        for i in range(ROWS):  # odd rows with a TTL; b left unset on every third row
            ttl = f" AND TTL {TTL}" if i % 2 else ""
            b = "" if i % 3 == 0 else ", b"
            value = "" if i % 3 == 0 else f", {i}"
            session.execute(f"INSERT INTO {KS}.cells (pk, ck, a, l, fl{b}) VALUES ({i // 10}, {i % 10}, 'a{i}', "
                            f"['x'], [{i}]{value}) USING TIMESTAMP {written_at(i)}{ttl}")
    return cassandra


def args_for(node: Any, **extra: str) -> list[str]:
    options = {"hosts": node.hosts, "port": str(node.port), "keyspace": KS, "table": "cells", **extra}
    return ["--connector", "cassandra", *[a for k, v in options.items() for a in ("-o", f"{k}={v}")]]


def test_write_times_and_ttls_are_copied_as_the_server_keeps_them(table: Any, tmp_path: Path, spark: Any) -> None:
    out = tmp_path / "out"
    source = args_for(table, writetime_columns="*", ttl_columns="a, b")
    result = run(["copy", *source, "--engine", "local", "--output", str(out), "--quiet"])
    assert result.returncode == 0, result.stderr[-3000:]
    copied = ds.dataset(out, format="parquet").to_table()
    # * is every regular column that has one write time: not the non-frozen list l
    assert copied.column_names == ["pk", "ck", "a", "b", "fl", "l", "a_writetime", "b_writetime", "fl_writetime",
                                   "a_ttl", "b_ttl"]
    assert str(copied.schema.field("a_writetime").type) == "timestamp[us, tz=UTC]"
    for row in copied.to_pylist():
        i = row["pk"] * 10 + row["ck"]
        at = datetime.fromtimestamp(written_at(i) / 1e6, timezone.utc)
        assert row["a_writetime"] == at and row["fl_writetime"] == at
        assert row["b_writetime"] == (None if i % 3 == 0 else at)
        if i % 2:
            assert TTL - 600 < row["a_ttl"] <= TTL  # counting down since the insert
            assert (row["b_ttl"] is None) == (i % 3 == 0)
        else:
            assert row["a_ttl"] is None and row["b_ttl"] is None
    assert len(copied) == ROWS
    check = run(["verify", *source, "--output", str(out)])  # TTLs compared as present or not: they count down
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    # Spark reads the same columns through the data source
    df = (spark.read.format("splitsource").option("connector", "cassandra")
          .options(hosts=table.hosts, port=str(table.port), keyspace=KS, table="cells", writetime_columns="a").load())
    micros = {r.ck: r.us for r in df.where("pk = 0").selectExpr("ck", "unix_micros(a_writetime) AS us").collect()}
    assert micros == {ck: written_at(ck) for ck in range(10)}


@pytest.mark.parametrize("option, column, expected", [
    ("writetime_columns", "pk", "primary-key column"),
    ("ttl_columns", "ck", "primary-key column"),
    ("ttl_columns", "l", "not frozen"),
    ("writetime_columns", "nosuch", "no column nosuch"),
])
def test_a_column_cassandra_keeps_no_single_write_time_for_is_one_clear_line(table: Any, tmp_path: Path, option: str,
                                                                            column: str, expected: str) -> None:
    result = run(["copy", *args_for(table, **{option: column}), "--engine", "local", "--output", str(tmp_path / "o")])
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and f"option '{option}'" in result.stderr and expected in result.stderr
