"""``splitsource copy`` of a real Cassandra table: killed with SIGKILL and re-run until done, then verified."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from scripts.cassandra import insert_rows
from tests.splitsource.copyjob.kill_points import ENGINE_POINTS
from tests.splitsource.copyjob.test_copy import finished, kill_and_rerun, run

pytestmark = [pytest.mark.cassandra, pytest.mark.spark, pytest.mark.slow]
KS = "splitsource_copy"
ROWS = 30_000


@pytest.fixture(scope="module")
def table(cassandra: Any) -> Any:
    columns = ("day date, id bigint, kind text, amount decimal, tags set<text>, "
               "at timestamp, PRIMARY KEY ((day, id))")
    with cassandra.fresh_table(KS, "events", columns) as session:
        insert = session.prepare(f"INSERT INTO {KS}.events (day, id, kind, amount, tags, at) VALUES "
                                 "(?, ?, ?, ?, ?, toTimestamp(now()))")
        from datetime import date, timedelta
        from decimal import Decimal

        args = [(date(2024, 1, 1) + timedelta(days=i % 30), i, f"k{i % 7}" if i % 11 else None,
                 Decimal(i) / 100, {f"t{i % 3}", f"u{i % 5}"} if i % 4 else None) for i in range(ROWS)]
        insert_rows(session, insert, args)
    if cassandra.root is not None:
        cassandra.nodetool("flush", KS)
    return cassandra


def source_args(node: Any, table: str = "events") -> list[str]:
    return ["--connector", "cassandra", "-o", f"hosts={node.hosts}", "-o", f"port={node.port}", "-o", f"keyspace={KS}",
            "-o", f"table={table}", "-o", "splits=16", "-o", "fetch_size=500"]


def ledger_rows(checkpoint: Path, out: Path) -> dict[str, int]:
    """Rows per split in the copy's split ledger, each split once (read as plain JSON: the test's own reading)."""
    import json

    found: dict[str, int] = {}
    for path in sorted((checkpoint / "splits").iterdir()):
        for split_id, rows, _ in json.loads(path.read_text())["splits"]:
            assert split_id not in found, f"split {split_id} is in two batches of the ledger\n" + _evidence(
                checkpoint, out)
            found[split_id] = rows
    return found


def _evidence(checkpoint: Path, out: Path) -> str:
    """What a failure of the ledger's rule needs to be understood (it failed once in CI and not in 80 kills here):
    every ledger file, the output's commit records and the checkpoint's offsets, in batch order."""
    import json

    lines = ["ledger (file: query, batch, [split rows]):"]
    for path in sorted((checkpoint / "splits").iterdir()):
        body = json.loads(path.read_text())
        lines.append(f"  {path.name}: {body['query']} {body['batch']} {[(s[0], s[1]) for s in body['splits']]}")
    log = out.with_name(out.name + ".bucketing") / "log"
    lines.append("records: " + " ".join(sorted(p.name for p in log.iterdir())) if log.is_dir() else "no records")
    for path in sorted(checkpoint.glob("*/offsets/*")):
        body = json.loads(path.read_text())
        taken, splits = body.get("taken"), len(body.get("batch", []))
        lines.append(f"  offset {path.parent.parent.name} {path.name}: taken {taken}, {splits} split(s)")
    return "\n".join(lines)


def test_cassandra_copy_to_json_lines_killed_and_rerun_is_exact(table: Any, tmp_path: Path) -> None:
    out = tmp_path / "events"
    args = ["copy", *source_args(table), "--output", str(out), "--format", "jsonl", "--max-splits-per-batch", "1",
            "--quiet"]
    stdout = kill_and_rerun(args, out, kills=2, seed=11, points=ENGINE_POINTS)  # the Spark engine: a JVM a run
    assert f"copy finished: {ROWS:,} rows" in stdout
    ids = sorted(int(json.loads(line)["id"]) for path in out.rglob("*.jsonl") for line in path.read_text().splitlines())
    assert ids == list(range(ROWS)), "not every inserted row is in the output once"
    check = run(["verify", *source_args(table), "--output", str(out)])  # first: whether the output itself is right
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    assert sum(ledger_rows(tmp_path / "events.checkpoint", out).values()) == ROWS


def test_cassandra_copy_to_parquet_bucketed_by_column_verifies(table: Any, tmp_path: Path, spark: Any) -> None:
    out = tmp_path / "events"
    # the local engine: the Spark engine's bucketing is tested by tests/splitsource/copyjob/test_table_copy.py
    result = run(["copy", *source_args(table), "--engine", "local", "--output", str(out), "--bucketer", "columns",
                  "--sink-option", "bucket_columns=kind"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "kind=k1").is_dir() and (out / "kind=__HIVE_DEFAULT_PARTITION__").is_dir()
    assert spark.read.parquet(str(out)).count() == ROWS
    check = run(["verify", *source_args(table), "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


@pytest.mark.parametrize("case", ["missing-table", "unreachable-host"])
def test_a_missing_table_or_an_unreachable_host_is_one_clear_line(table: Any, tmp_path: Path, case: str) -> None:
    out = tmp_path / "events"
    args = source_args(table, table="nosuch") if case == "missing-table" else [
        "--connector", "cassandra", "-o", "hosts=127.0.0.77", "-o", f"keyspace={KS}", "-o", "table=events",
        "-o", "connect_timeout_s=3"]
    result = run(["copy", *args, "--output", str(out)], timeout=120)
    assert result.returncode != 0
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("splitsource copy:") and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert ("nosuch" in line) if case == "missing-table" else ("127.0.0.77" in line)
    assert not out.exists() or finished(out) == {}


def test_cassandra_copy_to_csv_writes_blobs_as_base64_and_verifies(table: Any, tmp_path: Path, spark: Any) -> None:
    """uuid, timeuuid and timestamp columns are read in their server-side form; CSV holds blobs as base64 text."""
    import base64
    import uuid

    cluster, session = table.session()
    try:
        session.execute(f"DROP TABLE IF EXISTS {KS}.blobs")
        session.execute(f"CREATE TABLE {KS}.blobs (id int PRIMARY KEY, u uuid, tu timeuuid, at timestamp, data blob)")
        insert = session.prepare(f"INSERT INTO {KS}.blobs (id, u, tu, at, data) VALUES (?, ?, now(), ?, ?)")
        for i in range(200):
            session.execute(insert, (i, uuid.UUID(int=i * 7919), 1_700_000_000_000 + i if i % 5 else None,
                                     bytes([i % 256, 0, 255, 10, 13, 44, 34]) if i % 3 else None))
    finally:
        cluster.shutdown()
    out = tmp_path / "blobs"
    # the local engine: the Spark engine's CSV is tested by test_cassandra_fidelity.py's every-format test
    result = run(["copy", *source_args(table, table="blobs"), "--engine", "local", "--output", str(out), "--format",
                  "csv", "--quiet"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "copy finished: 200 rows" in result.stdout
    rows = {r["id"]: r for r in spark.read.option("header", True).option("escape", '"').option("inferSchema", False)
            .csv(str(out)).collect()}
    assert len(rows) == 200
    assert base64.b64decode(rows["4"]["data"]) == bytes([4, 0, 255, 10, 13, 44, 34]) and rows["3"]["data"] is None
    assert rows["2"]["u"] == str(uuid.UUID(int=2 * 7919)) and len(rows["2"]["tu"]) == 36
    assert rows["1"]["at"].startswith("2023-11-14") and rows["5"]["at"] is None
    check = run(["verify", *source_args(table, table="blobs"), "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


def test_cassandra_local_engine_copy_killed_and_rerun_is_exact(table: Any, tmp_path: Path) -> None:
    out = tmp_path / "events"
    args = ["copy", *source_args(table), "--engine", "local", "--workers", "2", "--output", str(out),
            "--max-splits-per-batch", "2", "--quiet"]
    stdout = kill_and_rerun(args, out, kills=3, seed=5)
    assert f"copy finished: {ROWS:,} rows" in stdout
    assert sorted(pq.read_table(out, columns=["id"])["id"].to_pylist()) == list(range(ROWS)), \
        "not every inserted row is in the output once"
    check = run(["verify", *source_args(table), "--output", str(out)])  # first: whether the output itself is right
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    assert sum(ledger_rows(tmp_path / "events.checkpoint", out).values()) == ROWS
    assert not list(out.rglob("*.in-progress")) and not list(out.rglob("*.pending"))


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_throttled_copy_reads_no_faster_than_its_limit(table: Any, tmp_path: Path, engine: str) -> None:
    """--max-rows-per-second is one budget for the whole copy, shared by its readers: 30,000 rows at 6,000 rows/s
    take at least 5 s of reading on either engine (both read far faster unthrottled, so the readers slept)."""
    import json
    import time

    out, report = tmp_path / "events", tmp_path / "summary.json"
    engine_args = ["--engine", "local", "--workers", "2"] if engine == "local" else []
    started = time.monotonic()
    result = run(["copy", *source_args(table), *engine_args, "--output", str(out), "--max-rows-per-second", "6000",
                  "--summary-json", str(report), "--quiet"])
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(report.read_text())
    assert outcome["total_rows"] == ROWS and sum(outcome["split_rows"].values()) == ROWS
    assert len(outcome["split_rows"]) == outcome["splits"] >= 16  # wrapping ranges may add a split or two
    assert outcome["throttled_s"] > 0 and "s throttled" in result.stdout
    assert elapsed >= ROWS / 6000
    check = run(["verify", *source_args(table), "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_verify_names_the_splits_whose_rows_changed_after_the_copy(cassandra: Any, tmp_path: Path,
                                                                   engine: str) -> None:
    """The copy keeps its rows per split in the checkpoint (the split ledger, written before each batch's commit
    record); after the table changes, verify names exactly the splits whose token ranges hold the changed keys,
    with the rows the copy wrote of them and the rows the server counts in them now."""
    import json
    import re

    with cassandra.fresh_table(KS, "ledger", "id bigint PRIMARY KEY, v int") as session:
        insert = session.prepare(f"INSERT INTO {KS}.ledger (id, v) VALUES (?, ?)")
        insert_rows(session, insert, [(i, i) for i in range(2_000)])
        out = tmp_path / "ledger"
        args = source_args(cassandra, table="ledger")
        engine_args = ["--engine", "local", "--workers", "2"] if engine == "local" else []
        copied = run(["copy", *args, *engine_args, "--output", str(out), "--max-splits-per-batch", "6", "--quiet"])
        assert copied.returncode == 0, copied.stderr[-3000:]
        assert run(["verify", *args, "--output", str(out)]).stdout.startswith("MATCH")

        def token(key: int) -> int:
            return int(session.execute(f"SELECT token(id) FROM {KS}.ledger WHERE id = {key}").one()[0])

        removed, added = [3, 4], [10_000, 10_001, 10_002]
        tokens = {k: token(k) for k in removed}
        for key in removed:
            session.execute(f"DELETE FROM {KS}.ledger WHERE id = {key}")
        for key in added:
            session.execute(insert, (key, key))
        tokens.update({k: token(k) for k in added})
        check = run(["verify", *args, "--output", str(out)])
        assert check.returncode == 1 and check.stdout.startswith("MISMATCH"), check.stdout + check.stderr
        named = {(int(a), int(b)): (int(c.replace(",", "")), int(s.replace(",", "")))
                 for a, b, c, s in re.findall(r"split token\((-?\d+),(-?\d+)\]: copied ([\d,]+), source ([\d,]+)",
                                              check.stdout)}
        # the truth: the changed keys' tokens, and the server's own count of each named range
        ledger = [json.loads(f.read_text()) for f in sorted((tmp_path / "ledger.checkpoint" / "splits").iterdir())]
        spans = [tuple(int(x) for x in re.fullmatch(r"token\((-?\d+),(-?\d+)\]", s[0]).groups())  # type: ignore[union-attr]
                 for body in ledger for s in body["splits"]]
        assert sum(s[1] for body in ledger for s in body["splits"]) == 2_000
        expected: dict[tuple[int, int], int] = {}
        for key, t in tokens.items():
            (span,) = [s for s in spans if s[0] < t <= s[1]]
            expected[span] = expected.get(span, 0) + (1 if key in added else -1)
        assert set(named) == {s for s, delta in expected.items() if delta}, check.stdout
        for (start, end), (copied_rows, source_rows) in named.items():
            server = session.execute(f"SELECT count(*) FROM {KS}.ledger WHERE token(id) > {start} "
                                     f"AND token(id) <= {end}").one()[0]
            assert source_rows == server and copied_rows == server - expected[(start, end)], check.stdout
        assert f"{len(named)} of " in check.stdout


def test_verify_names_the_key_column_and_token_range_of_one_value_changed_in_a_part_file(
        cassandra: Any, tmp_path: Path) -> None:
    """One value changed by hand in one Parquet part file: verify names that row's primary key, the column, both
    values and a token range that holds the key's token (the server's own), and no other row."""
    import re

    import pyarrow as pa
    import pyarrow.parquet as pq

    with cassandra.fresh_table(KS, "onevalue", "id bigint PRIMARY KEY, v int, w text") as session:
        insert = session.prepare(f"INSERT INTO {KS}.onevalue (id, v, w) VALUES (?, ?, ?)")
        insert_rows(session, insert, [(i, i * 3, f"w{i}") for i in range(3_000)])
        out = tmp_path / "onevalue"
        args = source_args(cassandra, table="onevalue")
        copied = run(["copy", *args, "--engine", "local", "--workers", "2", "--output", str(out), "--quiet"])
        assert copied.returncode == 0, copied.stderr[-3000:]
        assert run(["verify", *args, "--output", str(out)]).stdout.startswith("MATCH")

        part = sorted(out.glob("part-*.parquet"))[-1]
        table = pq.read_table(part)
        row = table.num_rows // 2
        key, old = table.column("id")[row].as_py(), table.column("v")[row].as_py()
        values = table.column("v").to_pylist()
        values[row] = -1
        pq.write_table(table.set_column(table.schema.get_field_index("v"), "v", pa.array(values, pa.int32())), part)

        check = run(["verify", *args, "--output", str(out)])
        assert check.returncode == 1 and check.stdout.startswith("MISMATCH"), check.stdout + check.stderr
        assert "1 row(s) of the source are not in the output as they are in the source, 1 of the output" \
            in check.stdout, check.stdout
        (line,) = [line for line in check.stdout.splitlines() if line.startswith("  key ")]
        assert line.startswith(f"  key id={key}: column 'v': source {old}, output -1 (source: token("), line
        assert f"output: {part.name}, row {row + 1:,})" in line, line
        start, end = (int(t) for t in re.search(r"source: token\((-?\d+),(-?\d+)\]", line).groups())  # type: ignore[union-attr]
        token = int(session.execute(f"SELECT token(id) FROM {KS}.onevalue WHERE id = {key}").one()[0])
        assert start < token <= end, (token, line)


def test_a_table_copy_resumed_after_the_source_s_columns_changed_is_refused_in_one_line(
        cassandra: Any, tmp_path: Path) -> None:
    """A column added to the Cassandra table between two runs of a copy into a Delta table: the second run is
    refused before it reads a row, naming the change (the table keeps one schema)."""
    with cassandra.fresh_table(KS, "altered", "id bigint PRIMARY KEY, v int") as session:
        for i in range(100):
            session.execute(f"INSERT INTO {KS}.altered (id, v) VALUES ({i}, {i})")
        out = tmp_path / "altered"
        args = ["copy", *source_args(cassandra, table="altered"), "--engine", "local", "--output", str(out),
                "--table-format", "delta", "--quiet"]
        first = run(args)
        assert first.returncode == 0, first.stderr[-3000:]
        session.execute(f"ALTER TABLE {KS}.altered ADD note text")
        again = run(args)
    assert again.returncode == 1, again.stdout + again.stderr
    lines = [line for line in again.stderr.splitlines() if line.startswith("splitsource")]
    assert len(lines) == 1 and "Traceback" not in again.stderr, again.stderr
    assert "the source's columns changed since this copy started (note added)" in lines[0], lines[0]
