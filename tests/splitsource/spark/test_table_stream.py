"""A streaming write into a table, SIGKILLed while it runs and started again from its checkpoint: each micro-batch
is committed to the table once (the sink's commit log and the table's tags make a replayed batch a no-op)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from splitsource.sink import open_table, parse_sink_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]
JOB = Path(__file__).parent / "table_stream_job.py"
FILES, ROWS_PER_FILE = 12, 50


def _committed(out: Path, fmt: str) -> int:
    """The micro-batches the sink has committed so far (its log; 0 before the first)."""
    try:
        committer = parse_sink_options({"path": str(out), "table_format": fmt}).committer()
        records = committer.records()
    except Exception:  # noqa: BLE001 - a poll while the query writes: nothing readable yet
        return 0
    return records[-1][0].seq if records else 0


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_stream_into_a_table_killed_and_restarted_commits_each_micro_batch_once(tmp_path: Path, fmt: str,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    source, out, checkpoint = tmp_path / "in", tmp_path / "table", tmp_path / "chk"
    source.mkdir()
    for n in range(FILES):
        (source / f"f{n:02d}.json").write_text(
            "".join(f'{{"id": {n * ROWS_PER_FILE + i}}}\n' for i in range(ROWS_PER_FILE)))
    args = [sys.executable, str(JOB), str(source), str(out), str(checkpoint), fmt]
    rng = random.Random(5)
    kills = 0
    for _ in range(3):
        before = _committed(out, fmt)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 180
        while _committed(out, fmt) <= before:
            assert proc.poll() is None, "the query ended before committing anything new"
            assert time.monotonic() < deadline, "no micro-batch committed within 180 s"
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 0.5))  # somewhere in the next micro-batch
        assert proc.poll() is None, "the query finished before the kill: the test proves nothing"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
    assert 0 < _committed(out, fmt) < FILES, "the kills did not land mid-stream"
    final = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-3000:]
    frame = pl.read_delta(str(out)) if fmt == "delta" else pl.scan_iceberg(open_table(str(out))).collect()
    assert sorted(frame["id"].to_list()) == list(range(FILES * ROWS_PER_FILE))
    # each micro-batch Spark committed is one table commit, tagged with its batch id, and no other commit
    spark_batches = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert _table_batches(out, fmt) == spark_batches, f"after {kills} kills"
    committer = parse_sink_options({"path": str(out), "table_format": fmt}).committer()
    assert committer.table is not None
    tags = [c.seq for c in committer.table.history(committer) if c.seq is not None]
    assert tags == list(range(1, len(spark_batches) + 1)), f"table commits by log number: {tags}"


def _table_batches(out: Path, fmt: str) -> list[int]:
    """The micro-batch ids the table's commits carry, as the table's own library reads its history."""
    if fmt == "delta":
        import deltalake

        history = deltalake.DeltaTable(str(out)).history()
        return sorted(int(e["splitsource.batch-id"]) for e in history if "splitsource.batch-id" in e)
    table = open_table(str(out))
    summaries = [s.summary.additional_properties for s in table.snapshots() if s.summary is not None]
    return sorted(int(p["splitsource.batch-id"]) for p in summaries if "splitsource.batch-id" in p)
