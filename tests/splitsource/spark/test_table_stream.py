"""A streaming write into a table, SIGKILLed at named points of its micro-batches' commits and started again from its
checkpoint: each micro-batch is committed to the table once (the sink's commit log and the table's tags make a
replayed batch a no-op). The points are ``table_stream_job.POINTS``: no verdict depends on how fast the query runs."""

from __future__ import annotations

import os
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
FILES, ROWS_PER_FILE = 8, 50
# (micro-batch, point) of each run that is killed; a later run resumes from the checkpoint the kill left
KILLS = ((1, "written"), (3, "published"), (5, "committed"))


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
    for batch, point in KILLS:
        gate = tmp_path / f"gate-{batch}"
        gate.mkdir()
        proc = subprocess.Popen([*args, str(gate), str(batch), point], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 180
        while not (gate / "reached").exists():
            assert proc.poll() is None, f"the query ended before micro-batch {batch} reached {point}"
            assert time.monotonic() < deadline, f"micro-batch {batch} did not reach {point} within 180 s"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # the kill landed where it was named: the sink's log holds the batches before it, and this one once its
        # sink commit was logged
        assert _committed(out, fmt) == batch + (point != "written"), point
        assert (batch in _table_batches(out, fmt)) == (point != "written"), point  # the table's commit, before ours
    final = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-3000:]
    frame = pl.read_delta(str(out)) if fmt == "delta" else pl.scan_iceberg(open_table(str(out))).collect()
    assert sorted(frame["id"].to_list()) == list(range(FILES * ROWS_PER_FILE))
    # each micro-batch Spark committed is one table commit, tagged with its batch id, and no other commit
    spark_batches = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert _table_batches(out, fmt) == spark_batches == list(range(FILES))
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
