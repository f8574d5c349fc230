"""Partial exports: ``token_range`` (a part of the ring) and ``where`` (a restriction the server serves), copied
by both engines and checked against the truth: the rows the test inserted, with the tokens the server computes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from scripts.cassandra import insert_rows
from tests.splitsource.copyjob.test_copy import run

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]
KS = "splitsource_partial"
PARTITIONS, ROWS_EACH = 400, 5


@pytest.fixture(scope="module")
def table(cassandra: Any) -> Any:
    with cassandra.fresh_table(KS, "parts", "pk int, ck int, v text, PRIMARY KEY (pk, ck)") as session:
        insert = session.prepare(f"INSERT INTO {KS}.parts (pk, ck, v) VALUES (?, ?, ?)")
        insert_rows(session, insert, [(pk, ck, f"{pk}/{ck}") for pk in range(PARTITIONS) for ck in range(ROWS_EACH)])
        # the truth about tokens, from the server's own token() function
        tokens = {row[0]: row[1] for row in session.execute(f"SELECT DISTINCT pk, token(pk) FROM {KS}.parts")}
    assert len(tokens) == PARTITIONS
    return cassandra, tokens


def args_for(node: Any, **extra: str) -> list[str]:
    options = {"hosts": node.hosts, "port": str(node.port), "keyspace": KS, "table": "parts", "splits": "12",
               **extra}
    return ["--connector", "cassandra", *[a for k, v in options.items() for a in ("-o", f"{k}={v}")]]


def copied(out: Path) -> list[tuple[int, int, str]]:
    table = ds.dataset(out, format="parquet").to_table()
    return sorted(zip(*(table.column(c).to_pylist() for c in ("pk", "ck", "v")), strict=True))


def inserted(pks: Any) -> list[tuple[int, int, str]]:
    return sorted((pk, ck, f"{pk}/{ck}") for pk in pks for ck in range(ROWS_EACH))


def quartiles(tokens: dict[int, int]) -> tuple[int, int]:
    ordered = sorted(tokens.values())
    return ordered[len(ordered) // 4], ordered[3 * len(ordered) // 4]


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_token_range_copies_exactly_the_keys_in_it_and_verifies(table: Any, tmp_path: Path, engine: str) -> None:
    node, tokens = table
    start, end = quartiles(tokens)  # about half of the keys, bounds on real tokens: the edges are exercised
    out = tmp_path / "out"
    engine_args = ["--engine", "local", "--workers", "2"] if engine == "local" else []
    source = args_for(node, token_range=f"{start},{end}")
    result = run(["copy", *source, *engine_args, "--output", str(out), "--quiet"])
    assert result.returncode == 0, result.stderr[-3000:]
    wanted = [pk for pk, t in tokens.items() if start < t <= end]  # start excluded, end included
    assert 150 < len(wanted) < 250 and copied(out) == inserted(wanted)
    check = run(["verify", *source, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


def test_a_wrapping_token_range_and_a_where_restriction(table: Any, tmp_path: Path) -> None:
    node, tokens = table
    low, high = quartiles(tokens)
    out = tmp_path / "wrap"
    wrap = args_for(node, token_range=f"{high},{low}")  # (high, MAX] and (MIN, low]
    assert run(["copy", *wrap, "--engine", "local", "--output", str(out), "--quiet"]).returncode == 0
    assert copied(out) == inserted(pk for pk, t in tokens.items() if t > high or t <= low)
    assert run(["verify", *wrap, "--output", str(out)]).stdout.startswith("MATCH")

    out = tmp_path / "where"
    where = args_for(node, where="pk IN (3, 5, 8, 399) AND ck >= 2")
    result = run(["copy", *where, "--engine", "local", "--output", str(out), "--quiet"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert copied(out) == [r for r in inserted([3, 5, 8, 399]) if r[1] >= 2]
    check = run(["verify", *where, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


@pytest.mark.parametrize("where, expected", [
    ("v = '3/1'", "ALLOW FILTERING"),  # a regular column: the server would have to filter
    ("nosuch = 1", "nosuch"),
    ("pk = ?", "bind markers"),
])
def test_a_where_the_server_refuses_is_one_line_naming_the_option(table: Any, tmp_path: Path, where: str,
                                                                  expected: str) -> None:
    node, _ = table
    result = run(["copy", *args_for(node, where=where), "--engine", "local", "--output", str(tmp_path / "o")])
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "option 'where'" in result.stderr and expected in result.stderr, result.stderr


def test_a_checkpoint_of_another_subset_is_refused(table: Any, tmp_path: Path) -> None:
    node, tokens = table
    low, high = quartiles(tokens)
    out = tmp_path / "out"
    first = run(["copy", *args_for(node, token_range=f"{low},{high}"), "--engine", "local", "--output", str(out),
                 "--quiet", "--summary-json", str(tmp_path / "s.json")])
    assert first.returncode == 0, first.stderr
    files = sorted(p.name for p in out.glob("*.parquet"))
    for other in ({"token_range": f"{low},{high + 1}"}, {"where": "pk IN (1, 2)"}, {}):
        again = run(["copy", *args_for(node, **other), "--engine", "local", "--output", str(out), "--quiet"])
        assert again.returncode == 1 and "belongs to another copy" in again.stderr, (other, again.stderr)
    assert sorted(p.name for p in out.glob("*.parquet")) == files
    assert json.loads((tmp_path / "s.json").read_text())["total_rows"] == len(
        [t for t in tokens.values() if low < t <= high]) * ROWS_EACH


def test_push_predicates_takes_only_what_cassandra_serves_without_filtering(table: Any) -> None:
    from connectors.cassandra import CassandraSource
    from splitsource import Predicate

    node, _ = table
    source = CassandraSource({"hosts": node.hosts, "port": str(node.port), "keyspace": KS, "table": "parts"})
    assert source.push_predicates([Predicate("pk", "=", 3)]) == ({"where": '"pk" = 3'}, [0])
    assert source.push_predicates([Predicate("ck", ">", 2), Predicate("v", "=", "x")]) == ({}, ())  # no partition
    assert source.push_predicates([Predicate("pk", "=", "3")]) == ({}, ())  # a text value for an int column
    added, taken = source.push_predicates([Predicate("v", "=", "x"), Predicate("pk", "in", (1, 2)),
                                           Predicate("ck", ">=", 2), Predicate("ck", "<", 4)])
    assert added == {"where": '"pk" IN (1, 2) AND "ck" >= 2 AND "ck" < 4'} and taken == [1, 2, 3]
    with_where = CassandraSource({"hosts": node.hosts, "port": str(node.port), "keyspace": KS, "table": "parts",
                                  "where": "pk IN (3, 4)"})
    # added to the where option; the server refuses a second restriction of pk, so nothing is pushed
    assert with_where.push_predicates([Predicate("pk", "=", 3)]) == ({}, ())


@pytest.mark.spark
@pytest.mark.parametrize("conf, option, pushed", [("true", None, True), ("false", None, False),
                                                  ("true", "false", False), ("true", "true", True)])
def test_spark_filters_on_the_partition_key_are_pushed_into_the_query(table: Any, tmp_path: Path, spark: Any,
                                                                      conf: str, option: str | None,
                                                                      pushed: bool) -> None:
    node, _ = table
    spark.conf.set("spark.sql.python.filterPushdown.enabled", conf)
    try:
        reader = (spark.read.format("splitsource")
                  .option("connector", "tests.connectors.cassandra.timeout_pages:TimeoutPagesSource")
                  .options(hosts=node.hosts, port=str(node.port), keyspace=KS, table="parts", splits="6",
                           max_page="1000000", proof=str(tmp_path)))
        if option is not None:
            reader = reader.option("pushdown", option)
        df = reader.load().where("pk IN (3, 5, 8) AND ck >= 2 AND v != '5/3'")
        rows = sorted((r.pk, r.ck, r.v) for r in df.collect())
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    assert rows == [r for r in inserted([3, 5, 8]) if r[1] >= 2 and r[2] != "5/3"]
    queries = {p.read_text() for p in tmp_path.glob("select-*")}
    assert queries, "the test's connector made no split reader"
    assert {'"pk" IN (3, 5, 8) AND "ck" >= 2' in q for q in queries} == {pushed}, queries
    assert not any('"v"' in q.split("WHERE", 1)[1] for q in queries)  # NOT is Spark's to evaluate
