"""The sink's memory stays bounded whatever the number of buckets: a budget for every open bucket's buffer
together (buffer_mb), a cap on open files (max_open_files), and a batch split by bucket in one pass."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from splitsource.sink import BucketingGlobalCommitter, BucketingSinkWriter, parse_sink_options
from splitsource.sink._bucketers import ColumnBucketer

BUCKETS = 60


def batches(count: int, rows: int, seed: int) -> list[pa.RecordBatch]:
    rng = random.Random(seed)
    out = []
    for b in range(count):
        ids = range(b * rows, (b + 1) * rows)
        out.append(pa.record_batch({"id": pa.array(ids, pa.int64()),
                                    "k": [f"k{rng.randrange(BUCKETS)}" if i % 97 else None for i in ids],
                                    "text": [f"{'x' * 200}{i}" for i in ids]}))
    return out


def write_and_commit(tmp_path: Path, data: list[pa.RecordBatch], **options: str) -> BucketingSinkWriter:
    opts = parse_sink_options({"path": str(tmp_path), "format": "parquet", "bucketer": "columns",
                               "bucket_columns": "k", **options})
    writer = BucketingSinkWriter(opts, data[0].schema, pafs.LocalFileSystem(), str(tmp_path), task="t")
    for batch in data:
        writer.write(batch)
        assert writer.open_files <= opts.max_open_files
        assert writer.buffered_bytes <= opts.buffer_bytes
    committer = BucketingGlobalCommitter(pafs.LocalFileSystem(), str(tmp_path), opts.names)
    committer.commit(committer.combine(writer.prepare_commit(end_of_input=True), kind="append", write_id="w"))
    return writer


def read_back(tmp_path: Path) -> list[tuple[int, str | None, str]]:
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive",
                       exclude_invalid_files=True).to_table()
    return sorted(zip(table.column("id").to_pylist(), table.column("k").to_pylist(),
                      table.column("text").to_pylist(), strict=True))


def expected(data: list[pa.RecordBatch]) -> list[tuple[int, str | None, str]]:
    return sorted((r["id"], r["k"], r["text"]) for b in data for r in b.to_pylist())


def test_a_small_budget_writes_the_largest_buffers_out_early_and_commits_exactly_the_input(tmp_path: Path) -> None:
    data = batches(30, 2000, seed=1)  # about 13 MB of rows over 61 buckets
    writer = write_and_commit(tmp_path, data, buffer_mb="1")
    assert writer.spills > 10, "the budget never made a buffer spill: the test proves nothing"
    assert read_back(tmp_path) == expected(data)
    groups = [pq.ParquetFile(p).num_row_groups for p in tmp_path.rglob("*.parquet")]
    assert max(groups) > 1  # spilled buffers are row groups of files that stayed open


@pytest.mark.parametrize("buffer_mb", ["128", "0.5"])
def test_past_max_open_files_rows_are_sorted_out_and_each_bucket_gets_one_file(tmp_path: Path,
                                                                                 buffer_mb: str) -> None:
    """Past the cap, as Spark falls back from concurrent writers to sorting: the rows of buckets without an open
    file are kept by bucket (and, under a small budget, written as sorted runs), then merged bucket by bucket, so
    never more than 5 files are open and each bucket still gets one file."""
    data = batches(10, 1000, seed=2)
    writer = write_and_commit(tmp_path, data, max_open_files="5", buffer_mb=buffer_mb)
    files = list(tmp_path.rglob("*.parquet"))
    assert len(files) == BUCKETS + 1  # 60 buckets and the null one
    if buffer_mb == "0.5":
        assert writer.runs_written > 1, "the budget never made the sorted-out rows a run: the test proves nothing"
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.name.startswith("_part")]  # runs removed
    assert read_back(tmp_path) == expected(data)


def test_a_failure_after_runs_were_written_leaves_only_what_the_sweep_removes(tmp_path: Path) -> None:
    opts = parse_sink_options({"path": str(tmp_path), "format": "parquet", "bucketer": "columns",
                               "bucket_columns": "k", "max_open_files": "5", "buffer_mb": "0.5"})
    data = batches(10, 1000, seed=3)
    writer = BucketingSinkWriter(opts, data[0].schema, pafs.LocalFileSystem(), str(tmp_path), task="t")
    for batch in data:
        writer.write(batch)
    assert writer.runs_written > 0, "no run was written: the test proves nothing"
    writer.abort()  # the task fails before its prepare_commit
    committer = BucketingGlobalCommitter(pafs.LocalFileSystem(), str(tmp_path), opts.names)
    assert committer.sweep(keep=()), "the failed task left nothing for the sweep: runs were not on disk"
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_batch_is_split_by_bucket_in_one_pass_keeping_every_row_once() -> None:
    bucketer = ColumnBucketer(["a", "b"])
    batch = pa.record_batch({"a": ["x", "y", None, "x", "y", "x"], "b": [1, 2, 1, 1, None, 2],
                             "v": [0, 1, 2, 3, 4, 5]})
    parts = {bucket: rows.column("v").to_pylist() for bucket, rows in bucketer.split(batch, 0.0)}
    assert parts == {"a=x/b=1": [0, 3], "a=y/b=2": [1], "a=__HIVE_DEFAULT_PARTITION__/b=1": [2],
                     "a=y/b=__HIVE_DEFAULT_PARTITION__": [4], "a=x/b=2": [5]}
