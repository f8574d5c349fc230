"""A wide partition (200,000 rows) whose default pages time out: the reader halves its pages and reads on from
the paging state, never restarting the split; every row once, on both engines; the summary names the partition."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from tests.splitsource.copyjob.test_copy import run

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]
KS = "splitsource_wide"
WIDE_KEY, WIDE_ROWS = 7, 200_000
SMALL_KEYS, SMALL_ROWS = range(1000, 1300), 10
CONNECTOR = "tests.connectors.cassandra.timeout_pages:TimeoutPagesSource"


@pytest.fixture(scope="module")
def table(cassandra: Any) -> Any:
    from cassandra.concurrent import execute_concurrent
    from cassandra.query import BatchStatement, BatchType

    with cassandra.fresh_table(KS, "wide", "pk int, ck int, payload text, PRIMARY KEY (pk, ck)") as session:
        insert = session.prepare(f"INSERT INTO {KS}.wide (pk, ck, payload) VALUES (?, ?, ?)")
        batches = []
        for start in range(0, WIDE_ROWS, 500):  # one partition: unlogged batches of 500 rows are one mutation each
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for ck in range(start, start + 500):
                batch.add(insert, (WIDE_KEY, ck, f"row {ck:06d} of the wide partition"))
            batches.append((batch, ()))
        for pk in SMALL_KEYS:
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for ck in range(SMALL_ROWS):
                batch.add(insert, (pk, ck, f"small {pk}"))
            batches.append((batch, ()))
        execute_concurrent(session, batches, concurrency=16, raise_on_first_error=True)
        token = session.execute(f"SELECT token(pk) FROM {KS}.wide WHERE pk = {WIDE_KEY} LIMIT 1").one()[0]
    if cassandra.root is not None:
        cassandra.nodetool("flush", KS)
    return cassandra, token


def expected_keys() -> set[tuple[int, int]]:
    return {(WIDE_KEY, ck) for ck in range(WIDE_ROWS)} | {(pk, ck) for pk in SMALL_KEYS for ck in range(SMALL_ROWS)}


def source_args(node: Any, proof: Path, **extra: str) -> list[str]:
    options = {"hosts": node.hosts, "port": str(node.port), "keyspace": KS, "table": "wide", "splits": "8",
               "max_page": "2000", "proof": str(proof), **extra}
    return ["--connector", CONNECTOR, *[a for k, v in options.items() for a in ("-o", f"{k}={v}")]]


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_wide_partition_that_times_out_is_read_in_smaller_pages_exactly_once(table: Any, tmp_path: Path,
                                                                             engine: str) -> None:
    node, token = table
    proof, out, report = tmp_path / "proof", tmp_path / "out", tmp_path / "summary.json"
    proof.mkdir()
    engine_args = ["--engine", "local", "--workers", "2"] if engine == "local" else []
    result = run(["copy", *source_args(node, proof), *engine_args, "--output", str(out), "--quiet",
                  "--summary-json", str(report)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    asked = sorted(int(p.read_text()) for p in proof.glob("timeout-*"))
    assert asked == [2500, 5000], f"the default page timed out, then half of it, then a quarter was read: {asked}"
    outcome = json.loads(report.read_text())
    assert outcome["retries"] == 0, "the split was never restarted: the reader shrank its pages in place"
    assert outcome["events"] == {"page_shrunk": 2, "hot_partition": 1}, outcome["events"]
    hot = [d for d in outcome["event_details"] if d.startswith("hot_partition")]
    assert f"token {token}," in hot[0] and "pages of 1250 rows" in hot[0], hot
    assert "events: hot_partition 1, page_shrunk 2" in result.stdout, result.stdout
    table_read = ds.dataset(out, format="parquet").to_table(columns=["pk", "ck"])
    keys = list(zip(table_read.column("pk").to_pylist(), table_read.column("ck").to_pylist(), strict=True))
    assert len(keys) == len(expected_keys()) and set(keys) == expected_keys()


def test_a_page_that_times_out_at_the_floor_goes_to_the_framework_retry_keeping_its_small_pages(
        table: Any, tmp_path: Path) -> None:
    """Pages of 1,000 rows (the floor) still time out: the framework retries from the split state, and the new
    split reader asks for pages of 1,000 again (kept in the state), not the default 5,000."""
    node, _ = table
    proof, out = tmp_path / "proof", tmp_path / "out"
    proof.mkdir()
    args = source_args(node, proof, max_page="600", min_fetch_size="1000", max_attempts="3", max_retry_wait_s="0",
                       initial_backoff_ms="1")
    result = run(["copy", *args, "--engine", "local", "--workers", "1", "--output", str(out), "--quiet"], timeout=600)
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()[-1]
    assert "failed after 3 attempts" in message and "token(" in message and "OperationTimedOut" in message, message
    asked = [int(p.read_text()) for p in sorted(proof.glob("timeout-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))]
    assert asked == [5000, 2500, 1250, 1000, 1000, 1000], asked
